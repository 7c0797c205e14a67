"""QNetwork: an MLP with a plain or dueling Q head."""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import nn

from cairn.policy.model import ACTIVATIONS

__all__ = ["QNetwork"]


class QNetwork(nn.Module):
    """``forward(obs) -> Q(obs, .)``, shape ``[batch, num_actions]``.

    With ``dueling`` (Wang et al. 2016) the trunk feeds a value stream ``V(s)`` and an
    advantage stream ``A(s, a)``, combined as ``Q = V + A - mean_a A`` so that V and A are
    identifiable.
    """

    def __init__(
        self, obs_size: int, num_actions: int, *, hidden: Sequence[int] = (64, 64),
        activation: str = "relu", dueling: bool = True,
    ) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        sizes = [obs_size, *hidden]
        for fan_in, fan_out in zip(sizes[:-1], sizes[1:]):
            layers += [nn.Linear(fan_in, fan_out), ACTIVATIONS[activation]()]
        self.trunk = nn.Sequential(*layers)
        self.dueling = dueling
        self.advantage_head = nn.Linear(sizes[-1], num_actions)
        self.value_head = nn.Linear(sizes[-1], 1) if dueling else None

    def reset_parameters(self, generator: torch.Generator) -> None:
        """PyTorch's default Linear initialisation, drawn from the policy's generator."""
        for module in self.modules():
            if isinstance(module, nn.Linear):
                bound = 1.0 / math.sqrt(module.in_features)
                nn.init.uniform_(module.weight, -bound, bound, generator=generator)
                nn.init.uniform_(module.bias, -bound, bound, generator=generator)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        features = self.trunk(obs)
        advantages = self.advantage_head(features)
        if self.value_head is None:
            return advantages  # type: ignore[no-any-return]
        return self.value_head(features) + advantages - advantages.mean(dim=1, keepdim=True)  # type: ignore[no-any-return]

    def action_inputs(self, obs: torch.Tensor) -> torch.Tensor:
        """Q-values, read as the logits of a Categorical whose mode is the greedy action."""
        return self(obs)  # type: ignore[no-any-return]
