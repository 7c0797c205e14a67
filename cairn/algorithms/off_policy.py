"""What DQN, SAC and TD3 share as off-policy algorithms: the training step (sample, store in
replay, learn from replayed minibatches), per-policy replay buffers fed with n-step
transitions, the replay ratio's carried-over credit, and the replay checkpoint component."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from cairn.algorithms.actor_critic_config import ActorCriticConfig
from cairn.algorithms.algorithm import Algorithm
from cairn.algorithms.dqn.config import DQNConfig
from cairn.algorithms.replay_buffers import PolicyReplayBuffers, ReplayRatio, check_finite_transitions
from cairn.env_runner.sample_batch import SampleBatch
from cairn.errors import NonFiniteSampleError
from cairn.learners import LearnFunction
from cairn.replay import PrioritizedReplayBuffer, ReplayBuffer

__all__ = ["OffPolicyAlgorithm"]


class OffPolicyAlgorithm(Algorithm):
    """An :class:`Algorithm` that learns from replay (the base of DQN, SAC and TD3).

    :meth:`training_step` repeats, until ``train_batch_size`` env steps are sampled: sample
    one fragment per environment, add each policy's transitions to its replay buffer, then,
    once ``num_steps_sampled_before_learning_starts`` env steps were sampled, take the
    gradient updates :meth:`gradient_updates_due` calls for (each one :meth:`learn_on_replay`)
    and :meth:`sync_target`. A subclass brings only what differs: :meth:`learn_on_replay`
    (usually :meth:`learn_minibatch` with its learn function), :meth:`learner_stats`, and
    where it differs from SAC's and TD3's, :meth:`gradient_updates_due` and :meth:`sync_target`.

    Its config has ``replay_buffer_config``, ``gamma``, ``n_step``, ``training_intensity``
    (None or a replay ratio), ``minibatch_size``, ``num_steps_sampled_before_learning_starts``
    and ``store_replay_buffer``. It holds ``replay``
    (:class:`~cairn.algorithms.replay_buffers.PolicyReplayBuffers`) and a
    :class:`~cairn.algorithms.replay_buffers.ReplayRatio`, whose credit is its extra state
    (``update_credit``); with ``store_replay_buffer`` the buffers are the ``replay_buffer``
    component of its state and checkpoints.
    """

    #: DQN's config, or SAC's and TD3's (subclasses narrow it to their own).
    config: DQNConfig | ActorCriticConfig

    #: Each policy's replay buffer and n-step builder.
    replay: PolicyReplayBuffers
    #: The replay ratio and its carried-over credit.
    replay_ratio: ReplayRatio

    def setup(self) -> None:
        cfg = self.config
        self.replay = PolicyReplayBuffers(cfg.replay_buffer_config, cfg.seed,
                                          gamma=cfg.gamma, n_step=cfg.n_step)
        self.replay_ratio = ReplayRatio(cfg.training_intensity or 1.0, cfg.minibatch_size)
        self.check_policies()

    def check_policies(self) -> None:
        """Check (and adjust) the built or restored policies once, before any training;
        raise what a user must fix: each must be a :attr:`default_policy_class`
        (:meth:`trained_policy`). A restored policy took ``config_overrides`` in its own
        ``follow_config``: its settings are not set again here."""
        for pid in self.policies:
            self.trained_policy(pid)

    @property
    def replay_buffers(self) -> dict[str, ReplayBuffer]:
        """The replay buffer of each policy that has sampled."""
        return self.replay.buffers

    # ---------------------------------------------------------------------------- training
    def check_sample(self, batches: Mapping[str, SampleBatch]) -> None:
        """Refuse a round (NonFiniteSampleError) before it is counted or any of it stored when a
        row a replay buffer would store holds a NaN or infinite reward or observation: stored,
        it would make every minibatch that replays it NaN (:func:`check_finite_transitions`).
        The n-step rows held for the round's trajectories are stored then, with the windows they
        have: the steps that would complete them are gone
        (:meth:`~cairn.algorithms.replay_buffers.PolicyReplayBuffers.refuse`)."""
        try:
            for pid in self.policies_to_train:
                if pid in batches:
                    check_finite_transitions(pid, batches[pid])
        except NonFiniteSampleError:
            for pid, batch in batches.items():
                self.replay.refuse(pid, batch)
            raise

    def training_step(self) -> dict[str, dict[str, Any]]:
        cfg = self.config
        history: dict[str, list[Sequence[float]]] = {}
        for batches in self.sample_rounds():
            learning = (self.counters["num_env_steps_sampled_lifetime"]
                        >= cfg.num_steps_sampled_before_learning_starts)
            added = {pid: len(batches[pid]) if pid in batches else 0 for pid in self.policies_to_train}
            # Every policy's rows are stored before any policy learns: the round is counted
            # already, so a learner that raises must not cost a later policy its transitions.
            for pid, rows in added.items():
                if rows:
                    self.replay.add(pid, batches[pid])
            # A policy that acts but does not train (taken out of policies_to_train) stores none
            # of its rows: those held for its trajectories can never be completed now.
            for pid, batch in batches.items():
                if pid not in added:
                    self.replay.refuse(pid, batch)
            # Every policy's updates of the round are owed before any policy learns: with a
            # replay ratio, a learner that raises must not cost a later policy its credit.
            due: dict[str, int] = {}
            for pid, rows in added.items():
                buffer = self.replay_buffers.get(pid)
                if learning and buffer is not None and len(buffer):
                    due[pid] = self.gradient_updates_due(pid, rows)
            made: dict[str, int] = {}  # the round's updates made, by policy
            for pid, updates in due.items():
                buffer = self.replay_buffers[pid]
                for _ in range(updates):
                    steps = self.policies[pid].num_grad_updates
                    try:
                        stats = self.learn_on_replay(pid, buffer)
                    except BaseException:
                        # An update the policy counts was made (SAC's and TD3's critics stepped
                        # before their actor's phase raised): the ratio must not owe it again.
                        if self.policies[pid].num_grad_updates != steps:
                            self._count_update(pid, made)
                        raise
                    history.setdefault(pid, []).append(stats)
                    self._count_update(pid, made)
                self.sync_target(pid)
        return {pid: self.learner_stats(pid, rows_) for pid, rows_ in history.items()}

    def _count_update(self, pid: str, made: dict[str, int]) -> None:
        """Count one gradient update of ``pid`` that was made in a round that made ``made``
        before it (by policy; counted in too): with a replay ratio, one update taken from
        ``pid``'s credit; and ``minibatch_size`` env steps trained when ``pid`` has now made
        more updates in the round than any other policy. So a round counts the minibatch rows
        of its updates once however many policies replayed them (the most one policy made),
        as on-policy algorithms count a sample's env steps once: a lone policy's updates
        each count, and two symmetric policies count as one, not twice. Each policy's own
        replayed rows are ``minibatch_size * num_grad_updates``."""
        made[pid] = made.get(pid, 0) + 1
        if made[pid] > max((n for other, n in made.items() if other != pid), default=0):
            self.counters["num_env_steps_trained_lifetime"] += self.config.minibatch_size
        if self.config.training_intensity is not None:  # the ratio's credit: only once made
            self.replay_ratio.made(pid)

    def gradient_updates_due(self, pid: str, rows: int) -> int:
        """Gradient updates owed to ``pid`` after a round that added ``rows`` of its
        transitions (``rows`` may be 0). SAC's and TD3's: none without new transitions, else
        ``training_intensity``'s share of ``rows`` or ``gradient_steps`` (-1: ``rows``). With a
        ``training_intensity`` it must be :attr:`replay_ratio`'s ``due``: the training step
        takes each update from the ratio's credit once it was made (``ReplayRatio.made``): it
        completed, or it raised after the policy's ``num_grad_updates`` counted it."""
        cfg = self.config
        assert isinstance(cfg, ActorCriticConfig)  # DQN (no gradient_steps) overrides this method
        if not rows:
            return 0
        if cfg.training_intensity is not None:
            return self.replay_ratio.due(pid, rows)
        return rows if cfg.gradient_steps == -1 else int(cfg.gradient_steps)

    def learn_on_replay(self, pid: str, buffer: ReplayBuffer) -> Sequence[float]:
        """One gradient update of policy ``pid`` on a minibatch from ``buffer``; returns the
        learner statistics :meth:`learner_stats` averages."""
        raise NotImplementedError

    def learn_minibatch(self, learn: LearnFunction, pid: str, buffer: ReplayBuffer) -> list[float]:
        """:meth:`learn_on_replay` by the learn function ``learn`` (wherever the learners run)
        on a minibatch from ``buffer``; a prioritized buffer takes the TD errors it returns as
        ``rows`` as the new priorities. Returns its statistics."""
        sample = buffer.sample(self.config.minibatch_size)
        output = self.learn(learn, pid, sample=sample)
        if isinstance(buffer, PrioritizedReplayBuffer) and output.rows is not None:
            buffer.update_priorities(sample["batch_indexes"], output.rows)
        stats: list[float] = output.stats
        return stats

    def sync_target(self, pid: str) -> None:
        """After a round's updates of ``pid``: update its target network if one is due."""

    def learner_stats(self, pid: str, history: Sequence[Sequence[float]]) -> dict[str, Any]:
        """The results entry of policy ``pid`` from the statistics of its updates this iteration."""
        raise NotImplementedError

    def trained_policy(self, pid: str) -> Any:
        """Policy ``pid``, or TypeError when it is not a :attr:`default_policy_class`."""
        policy = self.policies[pid]
        expected = self.default_policy_class
        if not isinstance(policy, expected):
            raise TypeError(
                f"{type(self).__name__} trains {expected.__name__} policies; {pid!r} is a "
                f"{type(policy).__name__}. Add it with PolicySpec({expected.__name__}, ...) or "
                "leave policy_class unset."
            )
        return policy

    # ------------------------------------------------------------------------------- state
    def get_extra_state(self) -> dict[str, Any]:
        return {"update_credit": self.replay_ratio.get_state()}

    def set_extra_state(self, state: Mapping[str, Any]) -> None:
        self.replay_ratio.set_state(state.get("update_credit"))

    def drop_policy_state(self, policy_id: str) -> None:
        """A removed policy's replay buffer, held-back n-step rows and replay credit go with it."""
        self.replay.buffers.pop(policy_id, None)
        self.replay.n_step.pop(policy_id, None)
        self.replay_ratio.credit.pop(policy_id, None)

    def set_state(self, state: Mapping[str, Any]) -> None:
        """:meth:`Algorithm.set_state <cairn.algorithms.algorithm.Algorithm.set_state>`, leaving
        out (with a warning) the stored replay buffers whose n-step returns were summed with
        another ``gamma`` than this config's (a ``config_overrides``, or an in-place restore into
        another config): :meth:`~cairn.algorithms.replay_buffers.PolicyReplayBuffers.fitting_components`."""
        components = self.replay.fitting_components(
            state.get("components") or {}, (state.get("config") or {}).get("gamma"),
            [*self.policies, *(state.get("policies") or {})])
        super().set_state({**state, "components": components})

    def get_components(self, *, copy: bool) -> dict[str, Any]:
        """The replay buffers, when ``store_replay_buffer`` is set: in checkpoints as the
        ``replay_buffer`` component, and in :meth:`get_state` (as a copy) likewise."""
        if not getattr(self.config, "store_replay_buffer", False):
            return {}
        return self.replay.component(copy=copy)

    def set_components(self, components: Mapping[str, Any]) -> None:
        self.replay.restore(components, self.policies, algorithm=type(self).__name__)
