"""LearnerGroup: who runs an algorithm's learn functions (RLlib's name).

- ``num_learners=0`` on the CPU: the learn function runs on the driver's policy itself.
- ``num_learners=0`` with ``num_gpus_per_learner > 0``: on device copies of the driver's
  policies (:class:`~cairn.learners.actor.LearnerActor` in this process); the driver's
  policies stay on the CPU, where the env runners act with them.
- ``num_learners=N >= 1``: on N DDP Ray actors (:class:`~cairn.learners.remote.RemoteLearners`).

In the last two cases the learners keep their copies between updates
(:mod:`cairn.learners.policy_sync`): the weights come back into the driver's policy after each
update (its env runners act with them), the rest of what learning changes when
:meth:`LearnerGroup.sync_to_driver` runs (the algorithm calls it at the end of every
iteration, before reading its state, and before stopping). Between ``train()`` calls the
driver's policies are therefore the authoritative ones (checkpoints, env runners, evaluation).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any

import torch

from cairn.errors import LearnerFailedError
from cairn.learners.actor import LearnerActor, LearnFunction
from cairn.learners.device import learner_device
from cairn.learners.policy_sync import driver_key, with_learned_parts
from cairn.learners.remote import RemoteLearners
from cairn.learners.sync import LOCAL_SYNC, LearnOutput
from cairn.policy.policy import Policy

__all__ = ["LearnerGroup"]


@dataclass
class _Copy:
    """What the learners' copy of one policy is, seen from the driver."""

    policy: Policy  #: the driver's policy it was taken from
    key: tuple[Any, Any]  #: :func:`~cairn.learners.policy_sync.driver_key` when last in step
    stale: bool = False  #: learned since: the driver lacks its learned parts


class LearnerGroup:
    """The learners of one algorithm, per ``config.learners(...)``.

    Build it once the policies exist; :meth:`stop` releases remote learners' resources.
    """

    def __init__(self, config: Any) -> None:
        #: The in-process learner's device (the CPU with remote learners, whose GPUs are the
        #: Ray cluster's: RemoteLearners checks them).
        self.device = learner_device(config) if not config.num_learners else torch.device("cpu")
        self.remote: RemoteLearners | None = None
        self.device_learner: LearnerActor | None = None
        if config.num_learners:  # Keras and recurrent policies were refused by config.validate()
            self.remote = RemoteLearners(config)
        elif self.device.type != "cpu":
            self.device_learner = LearnerActor(config, device=str(self.device))
        self.config = config
        #: The learners' copy of each policy they hold (none when learning on the driver's own).
        self.copies: dict[str, _Copy] = {}

    @property
    def num_remote_learners(self) -> int:
        """The DDP learner actors (0: learning in this process)."""
        return len(self.remote.actors) if self.remote is not None else 0

    @property
    def learner(self) -> RemoteLearners | LearnerActor | None:
        """Who learns away from the driver's policies: the DDP actors, the device learner, or
        None (the learn functions run on the driver's policies themselves)."""
        return self.remote if self.remote is not None else self.device_learner

    def remote_actors(self) -> list[Any]:
        """The learner actors' handles, by rank (empty without remote learners)."""
        return list(self.remote.actors) if self.remote is not None else []

    def update(self, fn: LearnFunction, policy_id: str, policy: Policy, **inputs: Any) -> LearnOutput:
        """Run learn function ``fn(config, policy, sync, **inputs)`` on ``policy``, wherever the
        config says; ``policy`` has the updated weights afterwards (and its learned parts once
        :meth:`sync_to_driver` ran)."""
        learner = self.learner
        if learner is None:
            return fn(self.config, policy, LOCAL_SYNC, **inputs)
        state = self._state_to_send(policy_id, policy)
        try:
            output, returned = learner.update(fn, policy_id, state, inputs)
        except BaseException:
            self.copies.clear()  # a new group holds nothing; this one may be half-updated
            raise
        assert returned is not None  # rank 0, which a learner alone is
        policy.set_weights(returned["weights"])
        policy.num_grad_updates = int(returned["num_grad_updates"])
        self.copies[policy_id] = _Copy(policy, driver_key(policy), stale=True)
        return output

    def _state_to_send(self, policy_id: str, policy: Policy) -> dict[str, Any] | None:
        """The driver's state of ``policy`` when the learners' copy is missing or out of step
        with it, else None. A driver that changed only the weights (a DQN target sync) first
        takes the learned parts its copy lacks, so the learners' optimizer state goes on."""
        copy = self.copies.get(policy_id)
        if copy is not None and copy.policy is policy:
            weights_key, optimizer_key = driver_key(policy)
            if (weights_key, optimizer_key) == copy.key:
                return None
            if copy.stale and optimizer_key == copy.key[1]:
                self._take_learned(policy_id, policy)
        self.copies.pop(policy_id, None)
        return policy.get_state()

    def sync_to_driver(self, policies: dict[str, Policy]) -> None:
        """Bring the learned parts the driver's policies lack (optimizer state, torch
        generator, ``num_grad_updates``) from the learners; a no-op when they have them."""
        for policy_id, copy in list(self.copies.items()):  # (copies exist only with a learner)
            if policies.get(policy_id) is not copy.policy:  # removed or replaced on the driver
                del self.copies[policy_id]
            elif copy.stale:
                in_step = driver_key(copy.policy) == copy.key
                self._take_learned(policy_id, copy.policy)
                if in_step:  # the driver now equals the learners' copy
                    self.copies[policy_id] = _Copy(copy.policy, driver_key(copy.policy))
                else:  # the driver changed it meanwhile: send it with the next update
                    del self.copies[policy_id]

    def _take_learned(self, policy_id: str, policy: Policy) -> None:
        learner = self.learner
        assert learner is not None  # a copy to take from exists only with a learner
        try:
            parts = learner.learned(policy_id)
        except BaseException:
            self.copies.clear()
            raise
        policy.set_state(with_learned_parts(policy.get_state(), parts))

    def stop(self) -> None:
        """Bring the learned parts to the driver's policies, then kill remote learners
        (releasing their CPUs and GPUs)."""
        try:
            if self.remote is None or self.remote.actors:
                self.sync_to_driver({pid: c.policy for pid, c in self.copies.items()})
        except LearnerFailedError as error:  # stopping goes on: env runners still need releasing
            warnings.warn(f"Stopping the learners, their optimizer state since the last iteration "
                          f"could not be read back and is lost: {error}", RuntimeWarning, stacklevel=3)
        finally:
            self.copies.clear()
            if self.remote is not None:
                self.remote.stop()
