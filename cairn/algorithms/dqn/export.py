"""The export graph of a DQNPolicy: the greedy action of a Q-network, and its Q-values."""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from cairn.errors import ExportError
from cairn.policy.action_mask_input import network_name
from cairn.policy.export_actor_critic import legal_scores
from cairn.policy.export_hook import BATCH, ExportGraph, TensorSpec
from cairn.policy.observation_path import ObservationPath, policy_export_graph

if TYPE_CHECKING:
    from cairn.policy.policy import Policy

__all__ = ["q_value_export_graph"]


class _GreedyQModule(nn.Module):
    """``forward(obs) -> (argmax_a Q(obs, a) + start, Q(obs, .))``; ``forward(obs, action_mask)``
    for a masked policy (whose Q-network masks the Q-values)."""

    def __init__(self, policy: Policy, q_network: nn.Module, start: int) -> None:
        super().__init__()
        self.observations = ObservationPath(policy, q_network)
        self.model = copy.deepcopy(q_network).eval()
        self.start = start

    def forward(self, obs: torch.Tensor, action_mask: torch.Tensor | None = None,
                ) -> tuple[torch.Tensor, torch.Tensor]:
        q_values = self.model(self.observations(obs, action_mask))
        action = (q_values if action_mask is None else legal_scores(q_values, action_mask)).argmax(dim=1)
        return (action + self.start if self.start else action), q_values


def q_value_export_graph(
    policy: Policy, q_network: nn.Module, q_values: Callable[[Sequence[Any]], np.ndarray],
) -> ExportGraph:
    """The export graph of a greedy Q-value policy with a Discrete action space.

    ``q_network`` maps processed observations to ``Q(obs, .)`` (``[batch, n]``);
    ``q_values`` is the policy's own raw-observations -> Q-values method, the reference for
    the ``q_values`` output, as ``compute_actions(obs, explore=False)`` is for ``action``.
    A masked policy's graph also takes ``action_mask``; ``q_network`` (its masking model)
    gives illegal actions the lowest Q-value, so the greedy action is legal.
    """
    space = policy.action_space
    if not isinstance(space, gym.spaces.Discrete):
        raise ExportError(f"A Q-value export graph needs a Discrete action space, got {space}.")
    n, start = int(space.n), int(space.start)

    def reference(observations: Sequence[Any]) -> list[np.ndarray]:
        return [policy.compute_actions(observations, explore=False), q_values(observations)]

    return policy_export_graph(
        policy, _GreedyQModule(policy, q_network, start),
        outputs=(
            TensorSpec("action", "int64", (BATCH,),
                       f"Greedy action: argmax(q_values) + start ({start})."),
            TensorSpec("q_values", "float32", (BATCH, n), "Q(obs, a) for every action a."),
        ),
        reference=reference, discrete_sizes=(n,), network_name=network_name(q_network),
    )
