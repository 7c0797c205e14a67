"""SquashedGaussian: SAC's action distribution, ``tanh`` of a diagonal Gaussian, rescaled."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import gymnasium as gym
import numpy as np
import torch

from cairn.algorithms.sac.loss import squashed_gaussian_log_prob, squashed_gaussian_sample
from cairn.errors import ConfigError
from cairn.policy.acting import raw_actions
from cairn.policy.distributions import ActionDistribution, finite_std_rows, float32_bounds

if TYPE_CHECKING:
    from cairn.policy.policy import Policy

__all__ = ["SquashedGaussian", "check_bounded_box_actions", "box_raw_actions", "follow_initial_random_steps"]


def check_bounded_box_actions(algorithm: str, action_space: gym.Space[Any]) -> None:
    """Raise ConfigError unless ``action_space`` is a Box with finite bounds whose range
    ``high - low`` float32 holds: what an actor that squashes its output into the bounds
    (SAC's, TD3's) needs."""
    if not isinstance(action_space, gym.spaces.Box):
        raise ConfigError(
            f"{algorithm} needs a Box action space, got {action_space}. Use DQN for Discrete actions, "
            "or PPO for Discrete, MultiDiscrete and other action spaces."
        )
    if not (np.all(np.isfinite(action_space.low)) and np.all(np.isfinite(action_space.high))):
        raise ConfigError(
            f"{algorithm} squashes actions into the Box bounds, but {action_space} has infinite bounds. "
            "Wrap the environment so that its action space is bounded (e.g. gymnasium.wrappers."
            "RescaleAction), or use PPO."
        )
    low, high = float32_bounds(action_space)
    with np.errstate(over="ignore"):
        range_overflows = not np.all(np.isfinite(high - low))
    if range_overflows:  # to_env's (high - low) / 2 would be inf: every action a bound, or NaN
        raise ConfigError(
            f"{algorithm} rescales actions from [-1, 1] to the Box bounds in float32, but high - low "
            f"of {action_space} is beyond the float32 maximum ({np.finfo(np.float32).max:.4g}). "
            "Wrap the environment so that its action space is a narrower Box (e.g. gymnasium.wrappers."
            "RescaleAction), or use PPO."
        )


def follow_initial_random_steps(policy: Policy, config: Mapping[str, Any]) -> None:
    """Give a SAC or TD3 ``policy`` the ``initial_random_steps`` of ``config`` (a restore's
    ``num_steps_sampled_before_learning_starts``), so that it acts at random for as long as the
    algorithm waits to learn, as :func:`box_raw_actions` does before the first start."""
    if "initial_random_steps" not in config:
        return
    steps = config["initial_random_steps"]
    if isinstance(steps, bool) or not isinstance(steps, (int, np.integer)) or steps < 0:
        raise ConfigError(f"Config 'initial_random_steps'={steps!r} is invalid: expected an int >= 0 "
                          "(num_steps_sampled_before_learning_starts sets it).")
    policy.config["initial_random_steps"] = int(steps)


def box_raw_actions(policy: Policy, processed_obs: np.ndarray, *, explore: bool) -> np.ndarray:
    """SAC's and TD3's ``compute_raw_actions``: actions in [-1, 1], drawn from the policy's
    distribution (``explore``) or its deterministic ones, except that while an exploring
    policy's sampled timesteps are below ``initial_random_steps`` they are uniform at random
    instead, as SB3's SAC and TD3 act before ``learning_starts``."""
    if explore and policy.global_timestep < int(policy.config["initial_random_steps"]):
        shape = (processed_obs.shape[0], *policy.dist.raw_action_shape)
        return policy.np_random.uniform(-1.0, 1.0, shape).astype(np.float32)
    inputs = policy.compute_action_inputs(processed_obs)
    return raw_actions(policy.dist, inputs, policy.np_random, explore=explore)

#: Raw actions are clipped this far inside (-1, 1) before ``atanh`` in :meth:`logp`.
_ATANH_LIMIT = 1.0 - 1e-6


class SquashedGaussian(ActionDistribution):
    """``a = tanh(u)``, ``u ~ N(mean, exp(log_std))``; inputs are ``[mean, log_std]``.

    Raw actions are the squashed values in [-1, 1] (replay stores them and the critics read
    them); :meth:`to_env` rescales them linearly to the Box bounds,
    ``low + (a + 1) / 2 * (high - low)``.
    """

    def __init__(self, space: gym.spaces.Box) -> None:
        self.size = int(np.prod(space.shape))
        self.shape = tuple(space.shape)
        self.low, self.high = float32_bounds(space)  # inside the Box once cast to its dtype
        self.half_range = (0.5 * (self.high - self.low)).astype(np.float32)
        self.env_dtype = space.dtype
        self.num_inputs = 2 * self.size
        self.raw_action_dtype = np.dtype(np.float32)
        self.raw_action_shape = (self.size,)

    def sample(self, inputs: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        mean, log_std = inputs.chunk(2, dim=-1)
        noise = torch.randn(mean.shape, generator=generator, dtype=mean.dtype)
        return squashed_gaussian_sample(mean, log_std, noise)[0]

    def deterministic(self, inputs: torch.Tensor) -> torch.Tensor:
        return torch.tanh(inputs[..., : self.size])

    def sample_numpy(self, inputs: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        mean, log_std = inputs[:, : self.size], inputs[:, self.size :]
        noise = rng.standard_normal(mean.shape, dtype=np.float32)
        return np.tanh(mean + np.exp(log_std) * noise).astype(np.float32, copy=False)

    def deterministic_numpy(self, inputs: np.ndarray) -> np.ndarray:
        return np.tanh(inputs[:, : self.size]).astype(np.float32, copy=False)

    def logp(self, inputs: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        mean, log_std = inputs.chunk(2, dim=-1)
        pre_tanh = torch.atanh(actions.clamp(-_ATANH_LIMIT, _ATANH_LIMIT))
        return squashed_gaussian_log_prob(mean, log_std, pre_tanh)

    def entropy(self, inputs: torch.Tensor) -> torch.Tensor:
        # No closed form: SAC estimates the entropy from samples, as -log pi(a|s).
        raise NotImplementedError(
            "A tanh-squashed Gaussian has no closed-form entropy; estimate it as -logp(inputs, "
            "sample(inputs)) (SAC's losses do)."
        )

    def usable_rows(self, inputs: np.ndarray) -> np.ndarray:
        # As DiagGaussian's: an infinite mean would act a bound of the Box (tanh(inf) = 1) and an
        # infinite log-std a greedy action from the mean, though no distribution is defined there.
        return np.logical_and.reduce(np.isfinite(inputs), axis=-1)  # type: ignore[no-any-return]

    def sampleable_rows(self, inputs: np.ndarray) -> np.ndarray | None:
        return finite_std_rows(inputs[:, self.size:])

    def to_env(self, raw_actions: np.ndarray) -> np.ndarray:
        scaled = self.low + (raw_actions + 1.0) * self.half_range
        clipped = np.clip(scaled, self.low, self.high)  # rounding may step past a bound
        return clipped.reshape((raw_actions.shape[0], *self.shape)).astype(self.env_dtype, copy=False)
