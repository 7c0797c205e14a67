"""The export graph of a TD3Policy: the deterministic actor, ``pi(s)`` rescaled to the Box bounds."""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import nn

from cairn.algorithms.td3.distribution import GaussianActionNoise
from cairn.errors import ExportError
from cairn.policy.export_graph import (
    BATCH,
    ExportGraph,
    ObservationPath,
    TensorSpec,
    example_input,
    filter_description,
    input_spec,
)

if TYPE_CHECKING:
    from cairn.algorithms.td3.td3_policy import TD3Policy

__all__ = ["deterministic_actor_export_graph"]


class _DeterministicBoxActor(nn.Module):
    """``forward(obs) -> (action,)``: :meth:`TD3Policy.compute_actions` with ``explore=False``
    (``low + (pi(s) + 1) * (high - low) / 2``, clipped), in torch."""

    action_low: torch.Tensor
    action_high: torch.Tensor
    half_range: torch.Tensor

    def __init__(self, policy: TD3Policy, dist: GaussianActionNoise) -> None:
        super().__init__()
        self.observations = ObservationPath(policy)
        self.actor = copy.deepcopy(policy.model.actor).eval()  # critics and targets stay behind
        bounds = dist.bounds
        self.shape = bounds.shape
        self.action_dtype = torch.from_numpy(np.zeros(0, dtype=bounds.env_dtype)).dtype
        self.register_buffer("action_low", torch.from_numpy(bounds.low.copy()))
        self.register_buffer("action_high", torch.from_numpy(bounds.high.copy()))
        self.register_buffer("half_range", torch.from_numpy(bounds.half_range.copy()))

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor]:
        scaled = self.action_low + (self.actor(self.observations(obs)) + 1.0) * self.half_range
        # np.clip(x, low, high) is minimum(maximum(x, low), high); ONNX's Clip wants scalars.
        action = torch.minimum(torch.maximum(scaled, self.action_low), self.action_high)
        if tuple(action.shape[1:]) != self.shape:
            action = action.reshape(action.shape[0], *self.shape)
        if action.dtype != self.action_dtype:
            action = action.to(self.action_dtype)
        return (action,)  # the export writers read a tuple of outputs


def deterministic_actor_export_graph(policy: TD3Policy) -> ExportGraph:
    """One output, ``action``; the reference is the policy's own acting path
    (``compute_actions(obs, explore=False)``)."""
    dist = policy.dist
    if not isinstance(dist, GaussianActionNoise):
        raise ExportError(f"{type(policy).__name__} acts with {type(dist).__name__}, not the "
                          "GaussianActionNoise this export graph reproduces; override export_graph().")

    def reference(observations: Sequence[Any]) -> list[np.ndarray]:
        return [policy.compute_actions(observations, explore=False)]

    return ExportGraph(
        module=_DeterministicBoxActor(policy, dist),
        input=input_spec(policy.network_observation_space),
        outputs=(TensorSpec("action", np.dtype(dist.bounds.env_dtype).name, (BATCH, *dist.shape),
                            "Deterministic action: pi(s) rescaled from [-1, 1] to the Box bounds."),),
        example=example_input(policy),
        reference=reference,
        discrete_sizes=None,
        network_name=type(policy.model.actor).__name__,
        metadata={"observation_filter": filter_description(policy)},
    )
