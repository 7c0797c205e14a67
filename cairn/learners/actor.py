"""What runs inside a learner's Ray actor: one rank of the DDP group, holding the policies the
driver lent it (:mod:`cairn.learners.group`) and running the algorithms' learn functions on them.

Plain Python (usable in-process); :class:`cairn.learners.group.LearnerGroup` wraps it in Ray.
"""

from __future__ import annotations

import datetime
import os
import socket
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from cairn._compat.keras_internals import seeded_global_seed_generator
from cairn.errors import ConfigError, NonFiniteLossError
from cairn.learners.device import accelerator_report
from cairn.learners.policy_sync import keep_learning_rates, learned_parts
from cairn.learners.sync import LOCAL_SYNC, DistributedGradientSync, GradientSync, LearnOutput
from cairn.policy.keras_config import uses_keras
from cairn.policy.policy import Policy
from cairn.policy.state_check import finite_checked
from cairn.rng import Stream, seed_sequence

if TYPE_CHECKING:
    from cairn.config.algorithm_config import AlgorithmConfig

__all__ = [
    "LearnerActor", "LearnFunction", "PROCESS_GROUP_TIMEOUT_S", "keras_learning_seed", "learning",
    "learning_seed", "move_policy", "run_learn",
]

#: A learn function: ``fn(config, policy, sync, **inputs) -> LearnOutput``.
LearnFunction = Callable[..., LearnOutput]
#: How long a collective waits for a peer; a peer that died usually fails it at once (its
#: sockets close), this bounds the rest.
PROCESS_GROUP_TIMEOUT_S = 120.0


def move_policy(policy: Policy, device: torch.device) -> None:
    """Put a policy's networks (:meth:`~cairn.policy.policy.Policy.networks`) on ``device``; its
    optimizer state follows its parameters when it is loaded (torch casts it there)."""
    if device.type == "cpu":
        return
    for network in policy.networks():
        network.to(device)


def run_learn(fn: LearnFunction, config: AlgorithmConfig, policy: Policy, sync: GradientSync,
              inputs: Mapping[str, Any], *, policy_id: str | None = None) -> LearnOutput:
    """``fn(config, policy, sync, **inputs)``, a user's network in training mode for it
    (:func:`learning`): every place a learn function runs calls it so. A
    :class:`~cairn.errors.NonFiniteLossError` from it is made to name ``policy_id`` and the
    parameters at fault."""
    with learning(policy):
        try:
            return fn(config, policy, sync, **inputs)
        except NonFiniteLossError as error:
            if policy_id is not None:
                error.with_policy_id(policy_id, ((name, param) for network in policy.networks()
                                                 for name, param in network.named_parameters()))
            raise


@contextmanager
def learning(policy: Policy) -> Iterator[None]:
    """A user's network (:attr:`~cairn.policy.policy.Policy.switches_modes`) in training mode for
    the block (its ``Dropout`` on, ``BatchNorm`` normalising by the batch and moving its
    statistics, as torch trains them), and back in eval mode, where it rests and acts, after it,
    also when it raises. A no-gradient target inside it that should see the deployed network
    switches to eval mode itself (PPO's values for GAE: :func:`cairn.numpy_acting.evaluating`).

    For the block torch's global generator (the CPU's, and the network's device's) is forked and
    seeded by :func:`learning_seed`: a torch ``Dropout`` draws its masks from it, and unseeded it
    would be whatever the process drew before (another algorithm, a learner actor's fresh
    process), so a seeded run would not repeat and a restored one would not go on as the
    uninterrupted run. Every learner of a DDP group seeds it alike. The generator is handed
    back as it was, also when the block raises. A Keras model's unseeded ``keras.random.*``
    draws (a custom layer's ``keras.random.normal(shape)``) come from Keras' global
    ``SeedGenerator``, which the block replaces, for a Keras policy, with one seeded by
    :func:`keras_learning_seed`, and hands back after it, unmoved (Python's ``random`` and numpy's
    global state are left alone)."""
    if not policy.switches_modes:
        yield
        return
    device = next(iter(policy.model.parameters()), torch.empty(0)).device
    seed = learning_seed(policy)
    if device.type == "cuda":
        forked = torch.random.fork_rng(devices=[torch.cuda.current_device() if device.index is None
                                                else device.index], device_type="cuda")
    else:  # the CPU's (mps: its own generator is seeded below but not forked)
        forked = torch.random.fork_rng(devices=[])
    with forked, _keras_seeded(policy):
        torch.default_generator.manual_seed(seed)
        if device.type == "cuda":
            with torch.cuda.device(device):
                torch.cuda.manual_seed(seed)
        elif device.type == "mps":
            torch.mps.manual_seed(seed)
        policy.model.train(True)
        try:
            yield
        finally:
            policy.model.train(False)


def _keras_seeded(policy: Policy) -> AbstractContextManager[None]:
    """For a Keras policy, Keras' global ``SeedGenerator`` seeded by :func:`keras_learning_seed`
    for the block (:func:`learning`); nothing for a torch one (Keras is not imported for it)."""
    if not uses_keras(policy.config):
        return nullcontext()
    return seeded_global_seed_generator(keras_learning_seed(policy))


def _learning_words(policy: Policy, stream: Stream) -> np.ndarray:
    copy = torch.Generator()
    copy.set_state(policy.generator.get_state())
    base = int(torch.randint(0, 2**62, (1,), generator=copy))
    return seed_sequence(base, stream, int(policy.num_grad_updates)).generate_state(2, np.uint32)


def learning_seed(policy: Policy) -> int:
    """The seed of torch's global generator for one learn call of ``policy`` (:func:`learning`):
    from its training state only, so that a restored policy and every DDP learner draw what the
    uninterrupted run, or a learner alone, draws. Mixes a draw of a copy of ``policy.generator``
    (the policy's seed and, for SAC and TD3, the noise drawn so far; the generator itself does
    not move) with ``num_grad_updates`` (which moves with every learn call)."""
    words = _learning_words(policy, Stream.LEARNING)
    return (int(words[0]) << 31) ^ int(words[1])


def keras_learning_seed(policy: Policy) -> int:
    """The seed (below ``2**31``, as Keras' int32 seed state holds it) of Keras' global
    ``SeedGenerator`` for one learn call of a Keras ``policy`` (:func:`learning`): from the same
    training state as :func:`learning_seed`, on its own stream (:data:`Stream.KERAS_LEARNING`)."""
    return int(_learning_words(policy, Stream.KERAS_LEARNING)[0]) >> 1


class LearnerActor:
    """Rank ``rank`` of ``world_size`` learners, learning on ``device``; ``num_threads``: torch
    threads to set (None: leave them). With ``world_size=1`` it is the driver's own learner on
    an accelerator (``num_learners=0``, ``num_gpus_per_learner=1``), lent the driver's CPU
    policies' state on the device for each iteration."""

    def __init__(self, config: AlgorithmConfig, rank: int = 0, world_size: int = 1, *, device: str,
                 num_threads: int | None = None) -> None:
        self.config = config
        self.device = torch.device(device)
        if self.device.type == "cuda" and not torch.cuda.is_available():
            raise ConfigError(f"A learner was placed on a CUDA device, but here {accelerator_report()}.")
        self.sync: GradientSync = (DistributedGradientSync(rank, world_size) if world_size > 1
                                   else LOCAL_SYNC)
        self.policies: dict[str, tuple[Policy, Any]] = {}
        #: Rank 0's rendezvous store, open from :meth:`address` on (None elsewhere).
        self.store: Any = None
        if num_threads is not None:
            torch.set_num_threads(max(1, num_threads))

    def address(self) -> str:
        """``tcp://host:port`` for the group's rendezvous (asked of rank 0). Rank 0 opens the
        group's store on a port the OS picks and keeps it listening until it joins: a port found
        free and released before the group bound it again could be taken by another process in
        between (``EADDRINUSE``)."""
        import torch.distributed as dist

        host = socket.gethostbyname(socket.gethostname())
        self.store = dist.TCPStore(host, 0, self.sync.world_size, is_master=True, wait_for_workers=False,
                                   timeout=datetime.timedelta(seconds=PROCESS_GROUP_TIMEOUT_S))
        return f"tcp://{host}:{self.store.port}"

    def join(self, init_method: str) -> int:
        """Join the process group (gloo on CPU, NCCL on CUDA) through the store at
        ``init_method`` (:meth:`address`); returns this process's ID."""
        import torch.distributed as dist

        timeout = datetime.timedelta(seconds=PROCESS_GROUP_TIMEOUT_S)
        store = self.store
        if store is None:  # a rank other than 0 (or a rank 0 asked no address): a client of rank 0's store
            host, _, port = init_method.removeprefix("tcp://").rpartition(":")
            store = dist.TCPStore(host, int(port), self.sync.world_size, is_master=False, timeout=timeout)
        backend = "nccl" if self.device.type == "cuda" else "gloo"
        dist.init_process_group(backend, store=store, rank=self.sync.rank, world_size=self.sync.world_size,
                                timeout=timeout)
        return os.getpid()

    def update(self, fn: LearnFunction, policy_id: str, state: Mapping[str, Any] | None,
               inputs: Mapping[str, Any]) -> tuple[LearnOutput, dict[str, Any] | None]:
        """Run ``fn`` as this rank on its policy ``policy_id``, first loading the driver's
        ``state`` when one is sent (a loan starts; None: the loan goes on). Rank 0 also
        returns what the driver takes after every update: ``{"weights", "num_grad_updates"}``
        (:mod:`cairn.learners.policy_sync`)."""
        if state is not None:
            policy, spec = self.policies.get(policy_id, (None, None))
            try:
                if policy is None or spec != state["spec"]:  # new, or replaced under the same ID
                    policy = Policy.from_state(state)
                    move_policy(policy, self.device)
                    self.policies[policy_id] = (policy, state["spec"])
                else:  # each loan: the driver's policy, checked where its state entered
                    with finite_checked(state):
                        policy.set_state(state)
                # The driver's optimizer was built: its learning rates, not the config's.
                keep_learning_rates(policy, state["optimizer"])
            except BaseException:  # a copy that may hold part of the state is no loan's copy
                self.policies.pop(policy_id, None)
                raise
        policy = self._policy(policy_id)
        output = run_learn(fn, self.config, policy, self.sync, inputs, policy_id=policy_id)
        self.sync.broadcast_buffers(policy.networks())
        if self.sync.rank != 0:
            return output, None
        return output, {"weights": policy.get_weights(), "num_grad_updates": policy.num_grad_updates}

    def learned(self, policy_id: str) -> dict[str, Any]:
        """The learned parts of this learner's policy ``policy_id`` (optimizer state, torch
        generator, ``num_grad_updates``), as CPU arrays: :func:`~cairn.learners.policy_sync.
        learned_parts`."""
        return learned_parts(self._policy(policy_id).get_state())

    def release(self, policy_ids: list[str]) -> None:
        """Drop this learner's copies of ``policy_ids`` (removed from the algorithm); the next
        loan of such an ID builds a new copy from the driver's state."""
        for policy_id in policy_ids:
            self.policies.pop(policy_id, None)

    def _policy(self, policy_id: str) -> Policy:
        if policy_id not in self.policies:
            raise RuntimeError(f"Learner rank {self.sync.rank} holds no policy {policy_id!r}; the "
                               "driver sends a policy's state with its first update of a loan.")
        return self.policies[policy_id][0]

    def pid(self) -> int:
        """The actor's process ID (tests kill it)."""
        return os.getpid()
