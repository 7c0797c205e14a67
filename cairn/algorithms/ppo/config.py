"""PPOConfig: PPO's settings on top of the shared AlgorithmConfig sections."""

from __future__ import annotations

from typing import ClassVar

from cairn.config.algorithm_config import BASE_FIELDS, AlgorithmConfig
from cairn.config.fields import Field, boolean, number, optional

__all__ = ["PPOConfig"]


class PPOConfig(AlgorithmConfig):
    """Config for :class:`PPO`. Defaults follow Stable-Baselines3's PPO.

    PPO's own ``training()`` settings: ``lambda_`` (GAE lambda), ``clip_param`` (surrogate
    clip range), ``vf_coeff`` (value-loss weight), ``entropy_coeff`` (entropy bonus weight),
    ``vf_clip_param`` (None, or the largest change of the value prediction per update: SB3's
    ``clip_range_vf``, not RLlib's clamp of the squared error of the same name), and
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
