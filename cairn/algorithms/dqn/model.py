"""QNetwork: an MLP with a plain or dueling Q head."""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from cairn.policy.model import _NUMPY_ACTIVATIONS, ACTIVATIONS

__all__ = ["QNetwork"]

_TORCH_ACTIVATIONS: dict[str, Any] = {"tanh": torch.tanh, "relu": torch.relu, "elu": F.elu, "silu": F.silu}


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
        for fan_in, fan_out in itertools.pairwise(sizes):
            layers += [nn.Linear(fan_in, fan_out), ACTIVATIONS[activation]()]
        self.trunk = nn.Sequential(*layers)
        self.activation = activation
        self._numpy_layers: list[tuple[np.ndarray, np.ndarray]] | None = None
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
        # Functional calls instead of module calls: the learner runs this hundreds of times
        # per iteration on small batches, where nn.Module.__call__ costs more than the maths.
        act = _TORCH_ACTIVATIONS[self.activation]
        x = obs
        for module in self.trunk:
            if isinstance(module, nn.Linear):
                x = act(F.linear(x, module.weight, module.bias))
        advantages = F.linear(x, self.advantage_head.weight, self.advantage_head.bias)
        if self.value_head is None:
            return advantages
        value = F.linear(x, self.value_head.weight, self.value_head.bias)
        return value + advantages - advantages.mean(dim=1, keepdim=True)

    def action_inputs(self, obs: torch.Tensor) -> torch.Tensor:
        """Q-values, read as the logits of a Categorical whose mode is the greedy action."""
        return self(obs)  # type: ignore[no-any-return]

    def numpy_q_values(self, obs: np.ndarray) -> np.ndarray:
        """:meth:`forward` in numpy on views of the live parameters, for the sampling loop
        (a few observations per call, where torch's per-operator dispatch dominates)."""
        if self._numpy_layers is None:
            linears = [m for m in self.trunk if isinstance(m, nn.Linear)] + [self.advantage_head]
            if self.value_head is not None:
                linears.append(self.value_head)
            self._numpy_layers = [(m.weight.detach().numpy().T, m.bias.detach().numpy()) for m in linears]
        act: Any = _NUMPY_ACTIVATIONS[self.activation]
        layers = self._numpy_layers
        heads = 2 if self.value_head is not None else 1
        x = obs
        for w, b in layers[:-heads]:
            x = act(x @ w + b)
        w_a, b_a = layers[-heads]
        advantages = x @ w_a + b_a
        if self.value_head is None:
            return advantages  # type: ignore[no-any-return]
        w_v, b_v = layers[-1]
        return (x @ w_v + b_v) + advantages - advantages.mean(axis=1, keepdims=True)  # type: ignore[no-any-return]

    def _apply(self, fn: Any, recurse: bool = True) -> QNetwork:
        self._numpy_layers = None  # parameters may be replaced (to_empty, .to(), ...)
        return super()._apply(fn, recurse)  # type: ignore[no-any-return]
