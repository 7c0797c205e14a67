"""PPO: clipped-surrogate policy optimisation over minibatch epochs."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np

from cairn.algorithms.algorithm import Algorithm
from cairn.algorithms.ppo.config import PPOConfig
from cairn.algorithms.ppo.learn import ppo_learn
from cairn.algorithms.ppo.sequences import epoch_permutations
from cairn.algorithms.reward_normalization import RewardNormalizer
from cairn.config.algorithm_config import AlgorithmConfig
from cairn.env_runner.sample_batch import SampleBatch
from cairn.registry import register_class

__all__ = ["PPO", "PPOConfig"]


@register_class
class PPO(Algorithm):
    """Proximal Policy Optimization (clipped surrogate, GAE, minibatch epochs).

    >>> from cairn import PPOConfig
    >>> algo = PPOConfig().environment("CartPole-v1").training(train_batch_size=256).build()
    >>> result = algo.train()
    >>> result["training_iteration"]
    1
    """

    config_class: ClassVar[type[AlgorithmConfig]] = PPOConfig
    config: PPOConfig
    #: One reward normaliser per policy ID, made on first use when ``normalize_rewards`` is on.
    reward_normalizers: dict[str, RewardNormalizer]

    def __init__(self, config: AlgorithmConfig, **kwargs: Any) -> None:
        self.reward_normalizers = {}
        super().__init__(config, **kwargs)

    def training_step(self) -> dict[str, dict[str, float]]:
        # Rounds until train_batch_size: one round alone fell short whenever
        # fragment * num_envs_per_env_runner * num_env_runners < train_batch_size.
        start = self.counters["num_env_steps_sampled_lifetime"]
        rounds = list(self.sample_rounds())
        env_steps = self.counters["num_env_steps_sampled_lifetime"] - start
        stats = {}
        for pid in self.policies_to_train:
            parts = [batches[pid] for batches in rounds if pid in batches and len(batches[pid])]
            if parts:
                # Rewards are normalised round by round: a trajectory's rows are contiguous (and
                # its running return carried over) within one round's batch, not across rounds.
                rewards = np.concatenate([self._learner_rewards(pid, part) for part in parts])
                batch = parts[0] if len(parts) == 1 else SampleBatch.concat(parts)
                stats[pid] = self._learn(pid, batch, rewards)
                if len(stats) == 1:  # the sample's env steps, once: a batch's rows are agent steps
                    self.counters["num_env_steps_trained_lifetime"] += env_steps
        return stats

    def _learner_rewards(self, pid: str, batch: SampleBatch) -> np.ndarray:
        """The rewards the learner uses: as sampled, or scaled by the policy's normaliser."""
        if not self.config.normalize_rewards:
            return batch["rewards"]
        cfg = self.config
        norm = self.reward_normalizers.get(pid)
        if norm is None:
            norm = self.reward_normalizers[pid] = RewardNormalizer(gamma=cfg.gamma)
        norm.gamma, norm.clip = cfg.gamma, cfg.reward_clip  # the config's, also after a restore
        dones = batch["terminateds"] | batch["truncateds"]
        streams = batch.get("streams")
        if streams is None:  # no trajectory IDs: the return restarts at each piece of the batch
            streams = np.cumsum(np.concatenate([[0], batch["ends"][:-1]]))
            norm.returns = {}
        return norm.normalize(batch["rewards"], dones, streams, batch.get("firsts"))

    def get_extra_state(self) -> dict[str, Any]:
        """The reward normalisers' states (``reward_normalizers``), when there are any."""
        if not self.reward_normalizers:
            return {}
        return {"reward_normalizers": {pid: n.get_state() for pid, n in self.reward_normalizers.items()
                                       if pid in self.policies}}  # a subset restore reads all

    def drop_policy_state(self, policy_id: str) -> None:
        """A removed policy's reward normaliser goes with it."""
        self.reward_normalizers.pop(policy_id, None)

    def set_extra_state(self, state: Mapping[str, Any]) -> None:
        cfg = self.config
        normalizers = {}  # built aside: a state refused half-way keeps the live normalisers
        for pid, norm_state in (state.get("reward_normalizers") or {}).items():
            norm = normalizers[pid] = RewardNormalizer(gamma=cfg.gamma, clip=cfg.reward_clip)
            norm.set_state(norm_state)
        self.reward_normalizers = normalizers

    def _learn(self, policy_id: str, batch: SampleBatch, rewards: np.ndarray) -> dict[str, float]:
        policy = self.policies[policy_id]
        # A recurrent policy's: whole sequences from their stored states (docs/ppo.md).
        permutations = epoch_permutations(self._rng, batch, policy, self.config.num_epochs)
        output = self.learn(ppo_learn, policy_id, batch=batch, rewards=rewards, permutations=permutations)
        stats: dict[str, float] = output.stats
        return stats
