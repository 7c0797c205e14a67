"""PolicyGraph: a policy's whole observation-to-action path as one traceable torch module.

It repeats, in torch, what :meth:`cairn.Policy.compute_actions` does in numpy around the
network, using the same constants: the observation preprocessing (flatten, one-hot), the
observation filter's current mean, inverse std and clip, the network
(``model.action_inputs`` and ``model.value``), the distribution's deterministic action and
its ``to_env`` step (``start`` offsets, clipping to the Box, the space's dtype).
"""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Any

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from cairn.errors import ExportError
from cairn.policy.distributions import Categorical, DiagGaussian, MultiCategorical
from cairn.policy.filters import MeanStdFilter

if TYPE_CHECKING:
    from cairn.policy.policy import Policy

__all__ = ["PolicyGraph", "example_input"]


def _torch_dtype(dtype: Any) -> torch.dtype:
    return torch.from_numpy(np.zeros(0, dtype=np.dtype(dtype))).dtype


class PolicyGraph(nn.Module):
    """``forward(obs) -> (action, *distribution_inputs, value)`` for one policy.

    The network is a deep copy, so that exporting never changes the policy (not even its
    train/eval flags), and the constants are snapshots of the policy's current state.
    """

    obs_mean: torch.Tensor
    obs_inv_std: torch.Tensor
    action_start: torch.Tensor
    action_low: torch.Tensor
    action_high: torch.Tensor

    def __init__(self, policy: Policy) -> None:
        super().__init__()
        model = policy.model
        if not (callable(getattr(model, "action_inputs", None)) and callable(getattr(model, "value", None))):
            raise ExportError(
                f"{type(policy).__name__}'s model {type(model).__name__} has no "
                "action_inputs(obs) and value(obs) methods; exported models call both. Add "
                "them to the model returned by make_model()."
            )
        self.model = copy.deepcopy(model).eval()
        space = policy.observation_space
        self.obs_size = int(policy.preprocessor.size)
        self.obs_discrete = isinstance(space, gym.spaces.Discrete)
        self.obs_start = int(space.start) if isinstance(space, gym.spaces.Discrete) else 0

        obs_filter = policy.observation_filter
        self.filtered = isinstance(obs_filter, MeanStdFilter)
        self.clip = 0.0
        if isinstance(obs_filter, MeanStdFilter):
            # The very arrays MeanStdFilter.apply uses, so that the results agree bit for bit.
            mean, inv_std = obs_filter.constants()
            self.register_buffer("obs_mean", torch.from_numpy(mean.copy()))
            self.register_buffer("obs_inv_std", torch.from_numpy(inv_std.copy()))
            self.clip = float(obs_filter.clip)

        self.dist = policy.dist
        if not isinstance(self.dist, (Categorical, MultiCategorical, DiagGaussian)):
            raise ExportError(
                f"Cannot export action distribution {type(self.dist).__name__}: supported are "
                "Categorical, MultiCategorical and DiagGaussian."
            )
        if isinstance(self.dist, MultiCategorical):
            self.register_buffer("action_start", torch.from_numpy(self.dist.start.copy()))
        if isinstance(self.dist, DiagGaussian):
            self.register_buffer("action_low", torch.from_numpy(self.dist.low.copy()))
            self.register_buffer("action_high", torch.from_numpy(self.dist.high.copy()))
        if isinstance(self.dist, (MultiCategorical, DiagGaussian)):
            self.action_dtype = _torch_dtype(self.dist.env_dtype)

    def preprocess(self, obs: torch.Tensor) -> torch.Tensor:
        """Model input -> the network's float32 ``[batch, obs_size]`` input."""
        if self.obs_discrete:
            # Comparing with arange one-hot encodes without one_hot's data-dependent checks.
            categories = torch.arange(self.obs_size, dtype=obs.dtype, device=obs.device)
            x = ((obs.unsqueeze(-1) - self.obs_start) == categories).to(torch.float32)
        else:
            x = obs.to(torch.float32).reshape(obs.shape[0], self.obs_size)
        if self.filtered:
            x = torch.clamp((x - self.obs_mean) * self.obs_inv_std, -self.clip, self.clip)
        return x

    def to_env(self, raw: torch.Tensor) -> torch.Tensor:
        """Raw deterministic actions -> environment actions, as ``dist.to_env`` does."""
        dist = self.dist
        if isinstance(dist, Categorical):
            return raw + dist.start if dist.start else raw
        if isinstance(dist, MultiCategorical):
            out = (raw + self.action_start).reshape(raw.shape[0], *dist.shape)
            return out.to(self.action_dtype)
        if isinstance(dist, DiagGaussian):
            # np.clip(x, low, high) is minimum(maximum(x, low), high); ONNX's Clip wants scalars.
            clipped = torch.minimum(torch.maximum(raw, self.action_low), self.action_high)
            return clipped.reshape(raw.shape[0], *dist.shape).to(self.action_dtype)
        raise ExportError(f"Cannot export action distribution {type(dist).__name__}.")

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, ...]:
        x = self.preprocess(obs)
        model: Any = self.model  # checked in __init__ to have both methods
        inputs = model.action_inputs(x)
        value = model.value(x)
        action = self.to_env(self.dist.deterministic(inputs))
        if isinstance(self.dist, DiagGaussian):
            size = self.dist.size
            return action, inputs[:, :size], inputs[:, size:], value
        return action, inputs, value


def example_input(policy: Policy, batch: int = 2) -> torch.Tensor:
    """A valid ``obs`` input of ``batch`` rows, to trace with (2+ rows keeps the batch dynamic)."""
    space = policy.observation_space
    if isinstance(space, gym.spaces.Discrete):
        return torch.full((batch,), int(space.start), dtype=torch.int64)
    if isinstance(space, (gym.spaces.Box, gym.spaces.MultiBinary)):
        return torch.zeros((batch, *space.shape), dtype=torch.float32)
    return torch.zeros((batch, int(policy.preprocessor.size)), dtype=torch.float32)
