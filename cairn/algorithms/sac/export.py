"""The export graph of a SACPolicy: the deterministic action path, ``tanh(mean)`` rescaled."""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import nn

from cairn.algorithms.sac.distribution import SquashedGaussian
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
    from cairn.algorithms.sac.sac_policy import SACPolicy

__all__ = ["squashed_gaussian_export_graph"]


class _DeterministicSquashedActor(nn.Module):
    """``forward(obs) -> (action, mean, log_std)``: :meth:`SACPolicy.compute_actions` with
    ``explore=False`` (``low + (tanh(mean) + 1) * (high - low) / 2``, clipped), in torch."""

    action_low: torch.Tensor
    action_high: torch.Tensor
    half_range: torch.Tensor

    def __init__(self, policy: SACPolicy, dist: SquashedGaussian) -> None:
        super().__init__()
        self.observations = ObservationPath(policy)
        self.actor = copy.deepcopy(policy.model.actor).eval()  # the critics stay behind
        self.shape = dist.shape
        self.action_dtype = torch.from_numpy(np.zeros(0, dtype=dist.env_dtype)).dtype
        self.register_buffer("action_low", torch.from_numpy(dist.low.copy()))
        self.register_buffer("action_high", torch.from_numpy(dist.high.copy()))
        self.register_buffer("half_range", torch.from_numpy(dist.half_range.copy()))

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        mean, log_std = self.actor(self.observations(obs))
        scaled = self.action_low + (torch.tanh(mean) + 1.0) * self.half_range
        # np.clip(x, low, high) is minimum(maximum(x, low), high); ONNX's Clip wants scalars.
        action = torch.minimum(torch.maximum(scaled, self.action_low), self.action_high)
        if tuple(action.shape[1:]) != self.shape:
            action = action.reshape(action.shape[0], *self.shape)
        if action.dtype != self.action_dtype:
            action = action.to(self.action_dtype)
        return action, mean, log_std


def squashed_gaussian_export_graph(policy: SACPolicy) -> ExportGraph:
    """Outputs ``action``, ``mean``, ``log_std``; the reference is the policy's own acting
    path (``compute_actions(obs, explore=False)`` and its actor's outputs)."""
    dist = policy.dist
    if not isinstance(dist, SquashedGaussian):
        raise ExportError(f"{type(policy).__name__} acts with {type(dist).__name__}, not the "
                          "SquashedGaussian this export graph reproduces; override export_graph().")
    size, shape = dist.size, dist.shape

    def reference(observations: Sequence[Any]) -> list[np.ndarray]:
        action = policy.compute_actions(observations, explore=False)
        inputs = policy.compute_action_inputs(policy.process_observations(observations, update=False))
        return [action, inputs[:, :size], inputs[:, size:]]

    return ExportGraph(
        module=_DeterministicSquashedActor(policy, dist),
        input=input_spec(policy.network_observation_space),
        outputs=(
            TensorSpec("action", np.dtype(dist.env_dtype).name, (BATCH, *shape),
                       "Deterministic action: tanh(mean) rescaled from [-1, 1] to the Box bounds."),
            TensorSpec("mean", "float32", (BATCH, size),
                       "Mean of the Gaussian before the tanh squashing (flattened)."),
            TensorSpec("log_std", "float32", (BATCH, size),
                       "Log standard deviation of the Gaussian before the squashing."),
        ),
        example=example_input(policy),
        reference=reference,
        discrete_sizes=None,
        network_name=type(policy.model.actor).__name__,  # the user's class for a custom actor
        metadata={"observation_filter": filter_description(policy)},
    )
