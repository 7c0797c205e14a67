"""GaussianActionNoise: TD3's acting, a deterministic action plus clipped Gaussian noise."""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import torch

from cairn.algorithms.sac.distribution import SquashedGaussian
from cairn.policy.distributions import ActionDistribution

__all__ = ["GaussianActionNoise"]


class GaussianActionNoise(ActionDistribution):
    """``a = clip(pi(s) + noise_std * N(0, 1), -1, 1)``; the input is ``pi(s)`` in [-1, 1].

    Raw actions are in [-1, 1], as SAC's (replay stores them, the critics read them);
    :meth:`to_env` rescales them linearly to the Box bounds,
    ``low + (a + 1) / 2 * (high - low)``. The noise is relative to that range, as
    Stable-Baselines3 adds its ``NormalActionNoise`` to the scaled action: ``noise_std=0.1``
    is 5% of ``high - low`` (Fujimoto et al.'s ``0.1 * max_action`` for symmetric bounds).
    """

    def __init__(self, space: gym.spaces.Box, noise_std: float) -> None:
        # SAC's distribution owns the rescaling to the Box bounds; TD3 shares it.
        self.bounds = SquashedGaussian(space)
        self.size = self.bounds.size
        self.shape = self.bounds.shape
        self.noise_std = float(noise_std)
        self.num_inputs = self.size
        self.raw_action_dtype = np.dtype(np.float32)
        self.raw_action_shape = (self.size,)

    def sample(self, inputs: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        noise = torch.randn(inputs.shape, generator=generator, dtype=inputs.dtype)
        return (inputs + self.noise_std * noise).clamp(-1.0, 1.0)

    def deterministic(self, inputs: torch.Tensor) -> torch.Tensor:
        return inputs

    def sample_numpy(self, inputs: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        noise = rng.standard_normal(inputs.shape, dtype=np.float32)
        return np.clip(inputs + np.float32(self.noise_std) * noise, -1.0, 1.0).astype(np.float32, copy=False)

    def deterministic_numpy(self, inputs: np.ndarray) -> np.ndarray:
        return inputs.astype(np.float32, copy=False)

    def logp(self, inputs: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        # The density of the unclipped behaviour noise N(pi(s), noise_std); TD3's losses never
        # read it (a deterministic policy has none of its own).
        std = max(self.noise_std, 1e-12)
        z = (actions - inputs) / std
        return (-0.5 * z.square() - math.log(std) - 0.5 * math.log(2 * math.pi)).sum(dim=-1)

    def entropy(self, inputs: torch.Tensor) -> torch.Tensor:
        std = max(self.noise_std, 1e-12)
        per_dim = 0.5 + 0.5 * math.log(2 * math.pi) + math.log(std)
        return torch.full(inputs.shape[:-1], per_dim * self.size, dtype=inputs.dtype)

    def to_env(self, raw_actions: np.ndarray) -> np.ndarray:
        return self.bounds.to_env(raw_actions)
