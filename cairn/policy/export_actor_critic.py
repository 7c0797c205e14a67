"""The actor-critic export module and its outputs: ``(action, logits | mean + log_std, value)``
computed from ``obs`` as the policy's acting path does (:mod:`cairn.policy.export_graph` builds
the graph; :mod:`cairn.policy.export_recurrent` extends the module with a state)."""

from __future__ import annotations

import copy
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from cairn.policy.distributions import Categorical, DiagGaussian, MultiCategorical
from cairn.policy.export_hook import BATCH, ExportedPolicy, TensorSpec
from cairn.policy.observation_path import ObservationPath

__all__ = ["ActorCriticModule", "actor_critic_outputs", "discrete_sizes", "legal_scores"]


def _torch_dtype(dtype: Any) -> torch.dtype:
    return torch.from_numpy(np.zeros(0, dtype=np.dtype(dtype))).dtype


class ActorCriticModule(nn.Module):
    """``forward(obs) -> (action, *distribution_inputs, value)`` for an actor-critic policy;
    ``forward(obs, action_mask)`` for a masked one (its model masks the logits)."""

    action_start: torch.Tensor
    action_low: torch.Tensor
    action_high: torch.Tensor

    def __init__(self, policy: ExportedPolicy) -> None:
        super().__init__()
        self.observations = ObservationPath(policy, policy.model)
        self.model = copy.deepcopy(policy.model).eval()
        self.dist = dist = policy.dist
        self.start = int(dist.start) if isinstance(dist, Categorical) else 0
        self.shape: tuple[int, ...] = tuple(getattr(dist, "shape", ()))
        if isinstance(dist, MultiCategorical):
            self.register_buffer("action_start", torch.from_numpy(dist.start.copy()))
        if isinstance(dist, DiagGaussian):
            self.size = int(dist.size)
            self.register_buffer("action_low", torch.from_numpy(dist.low.copy()))
            self.register_buffer("action_high", torch.from_numpy(dist.high.copy()))
        if isinstance(dist, (MultiCategorical, DiagGaussian)):
            self.action_dtype = _torch_dtype(dist.env_dtype)

    def to_env(self, raw: torch.Tensor) -> torch.Tensor:
        """Raw deterministic actions -> environment actions, as ``dist.to_env`` does."""
        if isinstance(self.dist, Categorical):
            return raw + self.start if self.start else raw
        if isinstance(self.dist, MultiCategorical):
            out = raw + self.action_start
        else:
            # np.clip(x, low, high) is minimum(maximum(x, low), high); ONNX's Clip wants scalars.
            out = torch.minimum(torch.maximum(raw, self.action_low), self.action_high)
        if tuple(out.shape[1:]) != self.shape:
            out = out.reshape(out.shape[0], *self.shape)
        return out if out.dtype == self.action_dtype else out.to(self.action_dtype)

    def forward(self, obs: torch.Tensor, action_mask: torch.Tensor | None = None) -> tuple[torch.Tensor, ...]:
        x = self.observations(obs, action_mask)
        # The value reads its own copy, as the policy's calls do: a user's model may write into its
        # input (obs *= 2), and value(x) after action_inputs(x) would read what it wrote. cairn's
        # own networks never write into their inputs (ObservationPath.copy_input), and read x.
        x_value = x.clone() if self.observations.copy_input else x
        # An actor-critic's methods (cairn.models.ActorCriticModel; checked by
        # actor_critic_export_graph before this module is built), unseen on torch.nn.Module.
        inputs = self.model.action_inputs(x)  # type: ignore[operator]
        value = self.model.value(x_value)  # type: ignore[operator]
        action = self.to_env(self.dist.deterministic(inputs if action_mask is None
                                                     else legal_scores(inputs, action_mask)))
        if isinstance(self.dist, DiagGaussian):
            return action, inputs[:, : self.size], inputs[:, self.size :], value
        return action, inputs, value


def legal_scores(scores: torch.Tensor, action_mask: torch.Tensor) -> torch.Tensor:
    """``scores`` with the illegal entries (mask ``<= 0.5``) at ``-inf``, for the argmax only: a
    legal score below MASKED_SCORE still beats every illegal one, as the policy's
    ``legal_argmax`` decides."""
    return torch.where(action_mask > 0.5, scores, torch.full_like(scores, -torch.inf))


def discrete_sizes(dist: Any) -> tuple[int, ...] | None:
    """``ExportGraph.discrete_sizes`` of ``dist``: its choices per component, None if continuous."""
    if isinstance(dist, Categorical):
        return (int(dist.num_inputs),)
    if isinstance(dist, MultiCategorical):
        return tuple(int(n) for n in dist.nvec)
    return None


def actor_critic_outputs(action_space: gym.Space[Any]) -> tuple[TensorSpec, ...]:
    value = TensorSpec("value", "float32", (BATCH,), "The value function's estimate V(obs).",
                       optional=True)
    if isinstance(action_space, gym.spaces.Discrete):
        n, start = int(action_space.n), int(action_space.start)
        return (
            TensorSpec("action", "int64", (BATCH,),
                       f"Deterministic action: argmax(logits) + start ({start})."),
            TensorSpec("logits", "float32", (BATCH, n), "Unnormalised log-probabilities of "
                       "the categorical action distribution."),
            value,
        )
    if isinstance(action_space, gym.spaces.MultiDiscrete):
        nvec = [int(n) for n in action_space.nvec.reshape(-1)]
        return (
            TensorSpec("action", np.dtype(action_space.dtype).name, (BATCH, *action_space.shape),
                       "Deterministic action: per component argmax of its logits + start."),
            TensorSpec("logits", "float32", (BATCH, sum(nvec)),
                       f"Logits of independent categoricals, concatenated in component order "
                       f"(sizes {nvec})."),
            value,
        )
    shape = tuple(action_space.shape or ())
    size = int(np.prod(shape))
    return (
        TensorSpec("action", np.dtype(action_space.dtype).name, (BATCH, *shape),
                   "Deterministic action: the Gaussian mean clipped to the Box bounds."),
        TensorSpec("mean", "float32", (BATCH, size), "Mean of the diagonal Gaussian "
                   "(flattened, unclipped)."),
        TensorSpec("log_std", "float32", (BATCH, size), "Log standard deviation of the "
                   "diagonal Gaussian."),
        value,
    )
