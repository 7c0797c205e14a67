"""PPO: clipped-surrogate policy optimisation over minibatch epochs."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np
import torch

from cairn.algorithms.algorithm import Algorithm
from cairn.algorithms.ppo.loss import compute_gae, ppo_loss
from cairn.algorithms.ppo.recurrent import learn_recurrent
from cairn.algorithms.reward_normalization import RewardNormalizer
from cairn.config.algorithm_config import BASE_FIELDS, AlgorithmConfig
from cairn.config.fields import Field, boolean, number, optional
from cairn.env_runner.sample_batch import SampleBatch
from cairn.policy.policy import Policy
from cairn.policy.recurrent import is_recurrent
from cairn.policy.torch_utils import clip_grad_norm
from cairn.registry import register_class

__all__ = ["PPO", "PPOConfig"]


class PPOConfig(AlgorithmConfig):
    """Config for :class:`PPO`. Defaults follow Stable-Baselines3's PPO.

    PPO's own ``training()`` settings: ``lambda_`` (GAE lambda), ``clip_param`` (surrogate
    clip range), ``vf_coeff`` (value-loss weight), ``entropy_coeff`` (entropy bonus weight),
    ``vf_clip_param`` (None, or the largest change of the value prediction per update), and
    ``normalize_advantages`` (per minibatch), ``normalize_rewards`` (divide the learner's
    rewards by a running std of the discounted return, as SB3's ``VecNormalize(norm_reward=
    True)``; :mod:`cairn.algorithms.reward_normalization`) and ``reward_clip`` (the scaled
    rewards' bound). Observation normalisation is ``env_runners(observation_filter=
    "MeanStdFilter")``. docs/ppo.md explains both.

    >>> config = PPOConfig().environment("CartPole-v1").training(clip_param=0.2, lambda_=0.95)
    """

    FIELDS: ClassVar[dict[str, Field]] = {
        **BASE_FIELDS,
        "lambda_": Field("training", 0.95, number(0.0, 1.0), "GAE lambda"),
        "clip_param": Field("training", 0.2, number(0.0, 10.0, low_open=True), "surrogate clip"),
        "vf_coeff": Field("training", 0.5, number(0.0, 1e6), "value loss weight"),
        "entropy_coeff": Field("training", 0.0, number(0.0, 1e6), "entropy bonus weight"),
        "vf_clip_param": Field("training", None, optional(number(0.0, 1e12, low_open=True)), "value clip"),
        "normalize_advantages": Field("training", True, boolean, "per-minibatch normalisation"),
        "normalize_rewards": Field("training", False, boolean, "scale rewards by a running return std"),
        "reward_clip": Field("training", 10.0, number(0.0, 1e12, low_open=True), "bound of scaled rewards"),
    }
    algo_class_name = "PPO"

    lambda_: float
    clip_param: float
    vf_coeff: float
    entropy_coeff: float
    vf_clip_param: float | None
    normalize_advantages: bool
    normalize_rewards: bool
    reward_clip: float


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
        batches = self._sample()
        stats = {}
        for pid in self.policies_to_train:
            batch = batches.get(pid)
            if batch is not None and len(batch):
                stats[pid] = self._learn(self.policies[pid], batch, self._learner_rewards(pid, batch))
                self.counters["num_env_steps_trained_lifetime"] += len(batch)
        return stats

    def _learner_rewards(self, pid: str, batch: SampleBatch) -> np.ndarray:
        """The rewards the learner uses: as sampled, or scaled by the policy's normaliser."""
        if not self.config.normalize_rewards:
            return batch["rewards"]
        cfg = self.config
        norm = self.reward_normalizers.get(pid)
        if norm is None:
            norm = self.reward_normalizers[pid] = RewardNormalizer(gamma=cfg.gamma, clip=cfg.reward_clip)
        norm.gamma, norm.clip = cfg.gamma, cfg.reward_clip  # the config's, also after a restore
        dones = batch["terminateds"] | batch["truncateds"]
        streams = batch.get("streams")
        if streams is None:  # no trajectory IDs: the return restarts at each piece of the batch
            streams = np.cumsum(np.concatenate([[0], batch["ends"][:-1]]))
            norm.returns = {}
        return norm.normalize(batch["rewards"], dones, streams)

    def get_extra_state(self) -> dict[str, Any]:
        """The reward normalisers' states (``reward_normalizers``), when there are any."""
        if not self.reward_normalizers:
            return {}
        return {"reward_normalizers": {pid: n.get_state() for pid, n in self.reward_normalizers.items()
                                       if pid in self.policies}}  # not those of removed policies

    def set_extra_state(self, state: Mapping[str, Any]) -> None:
        cfg = self.config
        self.reward_normalizers = {}
        for pid, norm_state in (state.get("reward_normalizers") or {}).items():
            norm = self.reward_normalizers[pid] = RewardNormalizer(gamma=cfg.gamma, clip=cfg.reward_clip)
            norm.set_state(norm_state)

    def _learn(self, policy: Policy, batch: SampleBatch, rewards: np.ndarray) -> dict[str, float]:
        if is_recurrent(policy):  # whole sequences from their stored states (docs/ppo.md)
            return learn_recurrent(policy, batch, rewards, self.config, self._rng)
        cfg = self.config
        model, dist = policy.model, policy.dist
        obs = torch.from_numpy(batch["obs"])
        actions = torch.from_numpy(batch["actions"])
        with torch.no_grad():
            inputs, values = model(obs)
            old_logp = dist.logp(inputs, actions)
            next_values = _next_values(model, batch, values.numpy())
        advantages = compute_gae(
            rewards, values.numpy(), next_values, batch["terminateds"],
            batch["ends"], gamma=cfg.gamma, lambda_=cfg.lambda_,
        )
        adv_t = torch.from_numpy(advantages)
        returns = adv_t + values
        n, size = len(batch), min(cfg.minibatch_size, len(batch))
        params = list(model.parameters())
        history: list[torch.Tensor] = []
        for _ in range(cfg.num_epochs):
            perm = torch.from_numpy(self._rng.permutation(n))
            for start in range(0, n, size):
                idx = perm[start : start + size]
                mb_adv = adv_t[idx]
                if cfg.normalize_advantages and len(idx) > 1:
                    # Normalisation makes no sense for a single sample (std undefined).
                    mb_adv = (mb_adv - mb_adv.mean()) / (mb_adv.std() + 1e-8)
                mb_inputs, mb_values = model(obs[idx])
                loss, stats = ppo_loss(
                    dist.logp(mb_inputs, actions[idx]), old_logp[idx], mb_adv, mb_values,
                    values[idx], returns[idx], dist.entropy(mb_inputs),
                    clip_param=cfg.clip_param, vf_coeff=cfg.vf_coeff,
                    entropy_coeff=cfg.entropy_coeff, vf_clip_param=cfg.vf_clip_param,
                )
                policy.optimizer.zero_grad(set_to_none=True)
                loss.backward()
                if cfg.grad_clip is not None:
                    stats["grad_norm"] = clip_grad_norm(params, cfg.grad_clip)
                policy.optimizer.step()
                policy.num_grad_updates += 1
                history.append(torch.stack(list(stats.values())))
        means = torch.stack(history).mean(dim=0).tolist()
        out = dict(zip(stats.keys(), means))
        var_y = float(np.var(returns.numpy()))
        out["vf_explained_var"] = (
            float("nan") if var_y == 0 else 1.0 - float(np.var(returns.numpy() - values.numpy())) / var_y
        )
        out["num_grad_updates"] = float(policy.num_grad_updates)
        return out


def _next_values(model: Any, batch: SampleBatch, values: np.ndarray) -> np.ndarray:
    """``V(next_obs)`` of each row, for GAE.

    Inside a piece of a trajectory a row's next observation is the next row's observation, so
    its value is already in ``values``; only the piece ends that bootstrap (truncated episodes,
    fragment ends) need a forward pass. For a CNN that saves a pass over the whole batch.
    Terminal rows get 0 (GAE multiplies their next value by 0).
    """
    ends, terminateds = batch["ends"], batch["terminateds"]
    next_values = np.zeros_like(values)
    next_values[:-1] = values[1:]
    next_values[ends] = 0.0
    bootstrap = np.flatnonzero(ends & ~terminateds)
    if bootstrap.size:
        next_values[bootstrap] = model.value(torch.from_numpy(batch["next_obs"][bootstrap])).numpy()
    return next_values
