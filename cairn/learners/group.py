"""LearnerGroup: who runs an algorithm's learn functions (RLlib's name), and who owns the
training state while they run.

- ``num_learners=0`` on the CPU: the learn function runs on the driver's policy itself. There
  is one copy of the training state, the driver's, and nothing to synchronise.
- ``num_learners=0`` with ``num_gpus_per_learner > 0``: on a device copy of the driver's policy
  (:class:`~cairn.learners.actor.LearnerActor` in this process); the driver's policies stay on
  the CPU, where the env runners act with them.
- ``num_learners=N >= 1``: on N DDP Ray actors (:class:`~cairn.learners.remote.RemoteLearners`).

In the last two cases the driver **lends** a policy's training state to the learners for one
iteration: a policy's first update after :meth:`LearnerGroup.sync_to_driver` sends its whole
state (weights, optimizer, generators, counters; whatever the user did to it meanwhile), the
learners own it until :meth:`~LearnerGroup.sync_to_driver` brings back what they learned and
ends the loan. That is the one synchronisation point; the algorithm calls it at the end of
every ``train()`` (and before its state is read, and before stopping), so between ``train()``
calls the driver's policies are the only owners. The weights also come back after every update,
read-only, because the env runners act with them (:mod:`cairn.learners.policy_sync`). Nothing
decides "unchanged, do not send": a lent state always goes out whole.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

import torch

from cairn.errors import ConfigError, LearnerFailedError
from cairn.learners.actor import LearnerActor, LearnFunction, run_learn
from cairn.learners.device import learner_device
from cairn.learners.policy_sync import keep_learning_rates, with_learned_parts
from cairn.learners.remote import RemoteLearners
from cairn.learners.sync import LOCAL_SYNC, LearnOutput
from cairn.policy.policy import Policy
from cairn.policy.recurrent import is_recurrent
from cairn.policy.state_check import finite_checked

if TYPE_CHECKING:
    from cairn.config.algorithm_config import AlgorithmConfig

__all__ = ["LearnerGroup"]


class LearnerGroup:
    """The learners of one algorithm, per ``config.learners(...)``.

    Build it once the policies exist; :meth:`stop` releases remote learners' resources.
    """

    def __init__(self, config: AlgorithmConfig) -> None:
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
        #: The driver's policies whose training state the learners hold now (lent by their
        #: first update since the last :meth:`sync_to_driver`); empty when learning runs on
        #: the driver's own policies.
        self.lent: dict[str, Policy] = {}

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
        config says; ``policy`` has the updated weights afterwards (and the rest of what the
        learners learned once :meth:`sync_to_driver` ran)."""
        learner = self.learner
        if learner is None:
            return run_learn(fn, self.config, policy, LOCAL_SYNC, inputs, policy_id=policy_id)
        # The loan starts with the driver's whole state; another object under the ID (a policy
        # replaced mid-iteration) starts a new one.
        state = None
        if self.lent.get(policy_id) is not policy:
            _check_optimizer_class(policy_id, policy)
            self._check_not_recurrent(policy_id, policy)
            # Built (as learning here would build it), so that the state holds the learning
            # rates it steps with, which the learners keep (policy_sync.keep_learning_rates).
            policy.optimizer  # noqa: B018
            state = policy.get_state()
        try:
            output, returned = learner.update(fn, policy_id, state, inputs)
        except BaseException:
            if self.remote is not None:
                self.lent.clear()  # the group was shut down; a new one holds nothing
            else:  # the loan ends here: its next update sends the driver's state
                self.lent.pop(policy_id, None)
                self._take_back_failed(policy_id, policy)
            raise
        assert returned is not None  # rank 0, which a learner alone is
        self.lent[policy_id] = policy
        policy.set_weights(returned["weights"])
        policy.num_grad_updates = int(returned["num_grad_updates"])
        return output

    def _check_not_recurrent(self, policy_id: str, policy: Policy) -> None:
        """ConfigError for a recurrent policy with several DDP learners, before anything is
        sent: ``use_lstm`` is refused by ``config.validate()``, but a user's
        RecurrentActorCriticModel is known only once built, and the learn functions cut whole
        sequences, which they do not shard. Raised here the learners stay up and hold nothing
        new; raised on the learners it shut the group down, and every ``train()`` started a new
        one to fail the same way."""
        if self.remote is None or self.remote.num_learners < 2 or not is_recurrent(policy):
            return
        raise ConfigError(
            f"Policy {policy_id!r} is recurrent (a RecurrentActorCriticModel), and "
            f"num_learners={self.remote.num_learners} DDP learners cannot train it: recurrent "
            "policies learn whole sequences in one learner. Fix: config.learners(num_learners=0) "
            "(or num_learners=1), or a feed-forward model (docs/learners.md).")

    def _take_back_failed(self, policy_id: str, policy: Policy) -> None:
        """After an update of the device learner raised: bring its copy of ``policy_id`` whole
        into the driver's ``policy`` (weights and learned parts), as learning on ``policy``
        itself would have left it: the updates that completed, and whatever the failed one
        changed before it raised. Without this the driver would pair the weights of the last
        completed update with the optimizer state, generator and ``num_grad_updates`` of the
        loan's start. A copy whose loading failed was dropped (nothing to take back)."""
        learner = self.device_learner
        if learner is None or policy_id not in learner.policies:
            return
        try:
            copy = learner.policies[policy_id][0]
            _take_back(policy, learner.learned(policy_id), weights=copy.get_weights())
        except Exception as error:  # the learn function's error is the one to raise
            warnings.warn(f"After a failed update of policy {policy_id!r} on the learner, its "
                          f"state could not be read back ({type(error).__name__}: {error}): the "
                          "policy keeps the weights of its last completed update and the optimizer "
                          "state of the loan's start.", RuntimeWarning, stacklevel=4)

    def sync_to_driver(self, policy_ids: Iterable[str] | None = None, *, release: bool = False) -> None:
        """End the loans (of ``policy_ids``; None: all): bring what the learners learned beyond
        the weights (optimizer state, torch generator, ``num_grad_updates``) into the driver's
        policies, which own all of it again; their next update sends it out whole. A no-op
        when nothing is lent.

        ``release=True`` with ``policy_ids`` (policies removed from the algorithm): the
        learners then also drop their copies of them, which they otherwise keep between loans
        only to load the next loan into (memory that a removed policy would hold for good)."""
        policy_ids = None if policy_ids is None else list(policy_ids)
        wanted = list(self.lent) if policy_ids is None else [p for p in policy_ids if p in self.lent]
        learner = self.learner
        for policy_id in wanted:
            policy = self.lent.pop(policy_id)
            assert learner is not None  # a loan exists only with a learner
            try:
                parts = learner.learned(policy_id)
            except BaseException:
                self.lent.clear()
                raise
            _take_back(policy, parts)
        if release and learner is not None and policy_ids:
            try:
                learner.release(policy_ids)
            except BaseException:  # the group was shut down: the loans' learned parts are lost
                self.lent.clear()
                raise

    def stop(self) -> None:
        """Bring the learned parts to the driver's policies, then kill remote learners
        (releasing their CPUs and GPUs)."""
        try:
            if self.remote is None or self.remote.actors:
                self.sync_to_driver()
        except LearnerFailedError as error:  # stopping goes on: env runners still need releasing
            warnings.warn(f"Stopping the learners, their optimizer state since the last iteration "
                          f"could not be read back and is lost: {error}", RuntimeWarning, stacklevel=3)
        finally:
            self.lent.clear()
            if self.remote is not None:
                self.remote.stop()


def _take_back(policy: Policy, parts: Mapping[str, Any], *, weights: Mapping[str, Any] | None = None) -> None:
    """Take a learner's copy of ``policy`` back into the driver's ``policy``: ``parts`` (what
    ``learner.learned`` returned: optimizer state, torch generator, ``num_grad_updates``) and,
    with ``weights`` (the copy's own, after a failed update), its weights too; without them
    ``policy`` keeps the weights that came back after each update."""
    state = with_learned_parts(policy.get_state(), parts)
    if weights is not None:
        state["weights"] = weights
    with finite_checked(state):  # every iteration: parts of the driver's own policy
        policy.set_state(state)
    keep_learning_rates(policy, parts["optimizer"])  # those learnt with, not the config's


def _check_optimizer_class(policy_id: str, policy: Policy) -> None:
    """ConfigError when ``policy``'s optimizer is not of the class its ``make_optimizer()``
    builds (one assigned to ``policy.optimizer``): a learner builds its copy from the policy's
    class and state, which holds the optimizer's state but not its class, so it would step
    the class's own optimizer with the assigned one's matching hyperparameters, silently."""
    optimizer = policy.training.built_optimizer  # None: never built, so never assigned either
    if optimizer is None:
        return
    own, built = type(optimizer), type(policy.make_optimizer())
    if own is not built:
        raise ConfigError(
            f"Policy {policy_id!r} has a {own.__module__}.{own.__qualname__} assigned to "
            f"policy.optimizer, but {type(policy).__name__}.make_optimizer() builds a "
            f"{built.__module__}.{built.__qualname__}. Learners away from this process "
            "(config.learners(num_learners=N >= 1) or num_gpus_per_learner > 0) build their copy "
            "of a policy from its class and state, which does not name the optimizer, so they "
            f"would step {built.__qualname__} instead. Fix: subclass {type(policy).__name__}, override "
            "make_optimizer() to return the optimizer you want and name the subclass in the "
            "PolicySpec (checkpoints then restore it too), or learn in this process on the CPU "
            "(config.learners(num_learners=0, num_gpus_per_learner=0)).")

