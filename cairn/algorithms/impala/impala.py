"""IMPALA and APPO: learning from fragments of experience with V-trace's off-policy correction.

The training iteration is two named steps: :meth:`IMPALA.sample_fragments` (where the fragments
come from: the local runner, or remote runners sampling continuously while the learner learns)
and :meth:`IMPALA.learn_on_fragments` (one learner update on fragments tagged with the weights
version that acted them).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from cairn.algorithms.algorithm import Algorithm
from cairn.algorithms.impala.appo_policy import APPOPolicy
from cairn.algorithms.impala.config import APPOConfig, IMPALAConfig
from cairn.algorithms.impala.fragments import Fragment, join_fragments, policy_lags
from cairn.algorithms.impala.learn import after_train_batch, vtrace_learn
from cairn.algorithms.ppo.sequences import epoch_permutations
from cairn.config.algorithm_config import AlgorithmConfig
from cairn.env_runner.remote import join_batches
from cairn.env_runner.sample_batch import SampleBatch
from cairn.errors import ConfigError
from cairn.policy.policy import Policy
from cairn.registry import register_class

__all__ = ["IMPALA", "APPO"]


@register_class
class IMPALA(Algorithm):
    """IMPALA (Espeholt et al. 2018): an actor-critic learning from fragments of experience
    acted by possibly older weights, corrected by V-trace (docs/impala.md).

    Each ``train()`` samples fragments until ``train_batch_size`` env steps are in hand
    (:meth:`sample_fragments`), then learns once on them (:meth:`learn_on_fragments`).
    Policies are cairn's actor-critic :class:`~cairn.policy.Policy` (PPO's networks, action
    masks, custom models, LSTMs learnt over sequences as PPO's).

    >>> from cairn import IMPALAConfig
    >>> algo = IMPALAConfig().environment("CartPole-v1").training(train_batch_size=100).build()
    >>> algo.train()["training_iteration"]
    1
    """

    config_class: ClassVar[type[AlgorithmConfig]] = IMPALAConfig
    config: IMPALAConfig
    #: Whether the loss is APPO's (surrogate against a target network) rather than IMPALA's.
    uses_target_network: ClassVar[bool] = False

    def __init__(self, config: AlgorithmConfig, **kwargs: Any) -> None:
        #: Learner updates so far: the version of the current weights, which fragments carry.
        self.weights_version = 0
        super().__init__(config, **kwargs)

    def setup(self) -> None:
        self.check_policies(self.policies)

    def check_policies(self, policies: Mapping[str, Policy]) -> None:
        """ConfigError for a policy this algorithm cannot train: for APPO one without a target
        network. Checked when built and before each learner update (a policy may be added
        meanwhile), before anything learns."""
        if self.uses_target_network:
            plain = {pid: type(p).__name__ for pid, p in policies.items() if not isinstance(p, APPOPolicy)}
            if plain:
                raise ConfigError(
                    f"APPO got policies without a target network {plain}: APPO's ratio is taken "
                    "against one. Fix: leave the PolicySpec's policy_class unset (APPO's default is "
                    "cairn.algorithms.impala.APPOPolicy) or name a subclass of APPOPolicy.")

    def training_step(self) -> dict[str, dict[str, float]]:
        return self.learn_on_fragments(self.sample_fragments())

    def sample_fragments(self) -> list[Fragment]:
        """Fragments for one learner update, until at least ``train_batch_size`` env steps are
        in hand. With ``num_env_runners=0`` the local runner samples rounds with the current
        weights (``weights_version`` now). With remote runners they sample continuously
        (:mod:`cairn.env_runner.async_sampler`): the weights go out every ``broadcast_interval``
        learner updates, and each fragment carries the version that acted it."""
        group, remote = self.env_runner_group, self.config.num_env_runners > 0
        last = group.broadcast_version  # None after a restore or a policy change: send anew
        if remote and (last is None or not 0 <= self.weights_version - last < self.config.broadcast_interval):
            group.broadcast_weights(self.weights_version,
                                    requests_in_flight=self.config.max_requests_in_flight_per_env_runner)
        fragments: list[Fragment] = []
        start = self.counters["num_env_steps_sampled_lifetime"]  # each sample counts its env steps
        while self.counters["num_env_steps_sampled_lifetime"] - start < self.config.train_batch_size:
            if not remote:
                before = self.counters["num_env_steps_sampled_lifetime"]
                batches = self._sample()
                fragments.append(Fragment(batches, self.weights_version,
                                          self.counters["num_env_steps_sampled_lifetime"] - before))
                continue
            for sampled in group.sample_async():
                batches = join_batches([sampled.result])
                self.record_sample(batches, sampled.result.episodes, sampled.result.env_steps)
                fragments.append(Fragment(batches, sampled.weights_version, sampled.result.env_steps))
        return fragments

    def learn_on_fragments(self, fragments: Sequence[Fragment]) -> dict[str, dict[str, float]]:
        """One learner update of every policy that trains, on its rows of ``fragments`` (each
        tagged with the ``weights_version`` that acted it); then ``weights_version`` counts it.
        Returns the learner stats per policy ID, with ``policy_lag_mean`` and ``policy_lag_max``
        (updates between the acting weights and these, over the rows)."""
        self.check_policies({pid: self.policies[pid] for pid in self.policies_to_train})
        stats: dict[str, dict[str, float]] = {}
        steps = {pid: self.policies[pid].num_grad_updates for pid in self.policies_to_train}
        try:
            for pid in self.policies_to_train:
                batch = join_fragments(fragments, pid)
                if batch is None:
                    continue
                lags = policy_lags(fragments, pid, self.weights_version)
                policy = self.policies[pid]
                permutations = epoch_permutations(self._rng, batch, policy, self.config.num_epochs)
                output = self.learn(vtrace_learn, pid, batch=batch, permutations=permutations,
                                    appo=self.uses_target_network)
                stats[pid] = {**output.stats, **self.after_learn(pid, batch),
                              "policy_lag_mean": float(lags.mean()), "policy_lag_max": float(lags.max())}
                if len(stats) == 1:  # the fragments' env steps, once: a batch's rows are agent steps
                    self.counters["num_env_steps_trained_lifetime"] += sum(f.num_env_steps for f in fragments)
        except BaseException:
            # Weights that changed before the error (another policy's update, or steps of this
            # one) are new weights: they must not share the version of the weights before.
            if any(self.policies[pid].num_grad_updates != n for pid, n in steps.items()):
                self.weights_version += 1
            raise
        self.weights_version += 1
        return stats

    def after_learn(self, policy_id: str, batch: SampleBatch) -> dict[str, float]:
        """Hook: the algorithm's step once policy ``policy_id`` learnt from ``batch``; returns
        stats to report with the learner's (IMPALA: none)."""
        return {}

    def get_extra_state(self) -> dict[str, Any]:
        """``weights_version``: the learner updates so far."""
        return {"weights_version": self.weights_version}

    def set_extra_state(self, state: Mapping[str, Any]) -> None:
        self.weights_version = int(state.get("weights_version", 0))


@register_class
class APPO(IMPALA):
    """APPO (RLlib's name for IMPACT, Luo et al. 2020): IMPALA's sampling and V-trace with PPO's
    clipped surrogate, taken against a target network (:class:`APPOPolicy`), and an optional
    adaptive KL penalty (docs/impala.md).

    >>> from cairn import APPOConfig
    >>> algo = APPOConfig().environment("CartPole-v1").training(train_batch_size=100).build()
    >>> algo.train()["training_iteration"]
    1
    """

    config_class: ClassVar[type[AlgorithmConfig]] = APPOConfig
    config: APPOConfig
    default_policy_class: ClassVar[type[Policy]] = APPOPolicy
    uses_target_network: ClassVar[bool] = True

    def after_learn(self, policy_id: str, batch: SampleBatch) -> dict[str, float]:
        """The target network's update and the KL weight's adaptation
        (:func:`~cairn.algorithms.impala.learn.after_train_batch`), on the driver's policy once
        the learners' loan of it ended (with ``num_learners >= 1`` they hold its training state
        until then)."""
        self.sync_learners([policy_id])
        policy = self.policies[policy_id]
        assert isinstance(policy, APPOPolicy)  # vtrace_learn refused any other
        return after_train_batch(self.config, policy, batch)
