"""The export graph of SAC's and TD3's policies: the deterministic action of their actor,
rescaled from [-1, 1] to the Box bounds (``tanh(mean)`` for SAC, with its ``mean`` and
``log_std`` as extra outputs; ``pi(s)`` for TD3). The critics and targets stay behind."""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch import nn

from cairn.algorithms.sac.distribution import SquashedGaussian
from cairn.algorithms.td3.custom_model import TanhActor
from cairn.algorithms.td3.distribution import GaussianActionNoise
from cairn.errors import ExportError
from cairn.policy.export_graph import BATCH, ExportGraph, ObservationPath, TensorSpec
from cairn.policy.observation_path import policy_export_graph
from cairn.policy.policy import Policy

__all__ = ["box_actor_export_graph"]


class _DeterministicBoxActor(nn.Module):
    """``forward(obs) -> (action, *extras)``: the policy's ``compute_actions(obs,
    explore=False)`` in torch, ``low + (a + 1) * (high - low) / 2`` clipped, where ``a`` is
    ``tanh(mean)`` of a squashed Gaussian's ``(mean, log_std)`` (both returned as extras) or a
    deterministic actor's ``pi(s)``."""

    action_low: torch.Tensor
    action_high: torch.Tensor
    half_range: torch.Tensor

    def __init__(self, policy: Policy, actor: nn.Module, bounds: SquashedGaussian, *, squashed: bool) -> None:
        super().__init__()
        self.observations = ObservationPath(policy, actor)
        self.actor = copy.deepcopy(actor).eval()
        self.squashed = squashed
        self.shape = bounds.shape
        self.action_dtype = torch.from_numpy(np.zeros(0, dtype=bounds.env_dtype)).dtype
        self.register_buffer("action_low", torch.from_numpy(bounds.low.copy()))
        self.register_buffer("action_high", torch.from_numpy(bounds.high.copy()))
        self.register_buffer("half_range", torch.from_numpy(bounds.half_range.copy()))

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, ...]:
        out = self.actor(self.observations(obs))
        extras: tuple[torch.Tensor, ...] = ()
        if self.squashed:
            mean, log_std = out
            raw, extras = torch.tanh(mean), (mean, log_std)
        else:
            raw = out
        scaled = self.action_low + (raw + 1.0) * self.half_range
        # np.clip(x, low, high) is minimum(maximum(x, low), high); ONNX's Clip wants scalars.
        action = torch.minimum(torch.maximum(scaled, self.action_low), self.action_high)
        if tuple(action.shape[1:]) != self.shape:
            action = action.reshape(action.shape[0], *self.shape)
        if action.dtype != self.action_dtype:
            action = action.to(self.action_dtype)
        return (action, *extras)  # the export writers read a tuple of outputs


def _named_actor(actor: nn.Module) -> nn.Module:
    """The network an export error names: a user's TD3 actor rather than the ``tanh`` around it."""
    return actor.net if isinstance(actor, TanhActor) else actor  # type: ignore[return-value]


def box_actor_export_graph(policy: Policy, expected: type[SquashedGaussian | GaussianActionNoise], *,
                           actor: nn.Module) -> ExportGraph:
    """The export graph of a policy that acts with ``expected`` through its model's ``actor`` (SAC's
    :class:`SquashedGaussian`: outputs ``action``, ``mean``, ``log_std``; TD3's
    :class:`GaussianActionNoise`: ``action``). The reference is the policy's own acting path,
    ``compute_actions(obs, explore=False)`` (and the actor's outputs)."""
    dist = policy.dist
    if not isinstance(dist, expected):
        raise ExportError(f"{type(policy).__name__} acts with {type(dist).__name__}, not the "
                          f"{expected.__name__} this export graph reproduces; override export_graph().")
    squashed = isinstance(dist, SquashedGaussian)
    bounds = dist if isinstance(dist, SquashedGaussian) else dist.bounds
    size, shape = bounds.size, bounds.shape
    action = "tanh(mean)" if squashed else "pi(s)"
    outputs = [TensorSpec("action", np.dtype(bounds.env_dtype).name, (BATCH, *shape),
                          f"Deterministic action: {action} rescaled from [-1, 1] to the Box bounds.")]
    if squashed:
        outputs += [TensorSpec("mean", "float32", (BATCH, size),
                               "Mean of the Gaussian before the tanh squashing (flattened)."),
                    TensorSpec("log_std", "float32", (BATCH, size),
                               "Log standard deviation of the Gaussian before the squashing.")]

    def reference(observations: Sequence[Any]) -> list[np.ndarray]:
        actions = policy.compute_actions(observations, explore=False)
        if not squashed:
            return [actions]
        inputs = policy.compute_action_inputs(policy.process_observations(observations, update=False))
        return [actions, inputs[:, :size], inputs[:, size:]]

    return policy_export_graph(
        policy, _DeterministicBoxActor(policy, actor, bounds, squashed=squashed), outputs=tuple(outputs),
        reference=reference, discrete_sizes=None,
        network_name=type(_named_actor(actor)).__name__,  # the user's class for a custom actor
    )
