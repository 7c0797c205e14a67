"""QNetwork: an MLP with a plain or dueling Q head, and its numpy forward pass."""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from cairn.numpy_acting import Dense, LiveViews, View, affine, dense_stack, in_torch, linear, row_means
from cairn.policy.encoders import ObservationEncoder
from cairn.policy.mlp_actor_critic import ACTIVATIONS
from cairn.policy.torch_utils import TORCH_ACTIVATIONS, uniform_fan_in_

__all__ = ["QNetwork", "NumpyQLayers", "numpy_q_forward"]

@dataclass(frozen=True, slots=True)
class NumpyQLayers:
    """A QNetwork as data: numpy views of its live parameters, each ``(weight [in, out], bias)``
    (:data:`~cairn.numpy_acting.Dense`), and its activation's name."""

    hidden: list[Dense]
    advantage: Dense
    value: Dense | None  # None: plain (not dueling) head
    activation: str


def numpy_q_forward(layers: NumpyQLayers, obs: np.ndarray, outputs: list[np.ndarray] | None = None) -> Any:
    """:meth:`QNetwork.forward` in numpy over :meth:`QNetwork.numpy_layers`, for acting, the targets
    and the numpy update (whose backward pass reads the hidden layers' ``outputs``)."""
    x = dense_stack(obs, layers.hidden, layers.activation, outputs)
    advantages = affine(x, layers.advantage)
    if layers.value is None:
        return advantages
    mean = row_means(advantages)
    advantages += affine(x, layers.value)  # V + A - mean A, in place (a + v is v + a bit for bit)
    advantages -= mean
    return advantages


class QNetwork(nn.Module):
    """``forward(obs) -> Q(obs, .)``, shape ``[batch, num_actions]``.

    With ``dueling`` (Wang et al. 2016) the trunk feeds a value stream ``V(s)`` and an
    advantage stream ``A(s, a)``, combined as ``Q = V + A - mean_a A`` so that V and A are
    identifiable.

    The network is its linear layers (:meth:`linear_layers`) and one activation; the torch
    :meth:`forward` and the numpy :func:`numpy_q_forward` both walk that list. ``encoder`` (an
    :func:`~cairn.policy.encoders.encoder_description`) puts a CNN encoder (``encoder.*``) in
    front of the trunk; such a network acts and computes targets in torch, not numpy.
    """

    def __init__(
        self, obs_size: int, num_actions: int, *, hidden: Sequence[int] = (64, 64),
        activation: str = "relu", dueling: bool = True, encoder: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__()
        self.encoder = None if encoder is None else ObservationEncoder(encoder)
        layers: list[nn.Module] = []
        sizes = [obs_size if encoder is None else int(encoder["output_size"]), *hidden]
        for fan_in, fan_out in itertools.pairwise(sizes):
            layers += [nn.Linear(fan_in, fan_out), ACTIVATIONS[activation]()]
        self.trunk = nn.Sequential(*layers)
        self.activation = activation
        self._numpy_views = LiveViews(_acting_views)
        self.dueling = dueling
        self.advantage_head = nn.Linear(sizes[-1], num_actions)
        self.value_head = nn.Linear(sizes[-1], 1) if dueling else None

    def reset_parameters(self, generator: torch.Generator) -> None:
        """PyTorch's default Linear initialisation, drawn from the policy's generator."""
        encoder = () if self.encoder is None else list(self.encoder.modules())
        if self.encoder is not None:
            self.encoder.reset_parameters(generator, orthogonal=False)
        for module in self.modules():
            if isinstance(module, nn.Linear) and not any(module is m for m in encoder):
                uniform_fan_in_(module.weight, module.in_features, generator)
                uniform_fan_in_(module.bias, module.in_features, generator)

    def linear_layers(self) -> tuple[list[nn.Linear], nn.Linear, nn.Linear | None]:
        """The hidden layers (each followed by the activation), the advantage head (the Q head
        when not dueling) and the value head (None when not dueling)."""
        hidden = [m for m in self.trunk if isinstance(m, nn.Linear)]
        return hidden, self.advantage_head, self.value_head

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        # Functional calls instead of module calls: the learner runs this hundreds of times
        # per iteration on small batches, where nn.Module.__call__ costs more than the maths.
        act = TORCH_ACTIVATIONS[self.activation]
        hidden, advantage_head, value_head = self.linear_layers()
        x = obs if self.encoder is None else self.encoder(obs)
        for layer in hidden:
            x = act(F.linear(x, layer.weight, layer.bias))
        advantages = F.linear(x, advantage_head.weight, advantage_head.bias)
        if value_head is None:
            return advantages
        value = F.linear(x, value_head.weight, value_head.bias)
        return value + advantages - advantages.mean(dim=1, keepdim=True)

    def action_inputs(self, obs: torch.Tensor) -> torch.Tensor:
        """Q-values, read as the logits of a Categorical whose mode is the greedy action."""
        return self(obs)  # type: ignore[no-any-return]

    def numpy_layers(self) -> NumpyQLayers:
        """:meth:`linear_layers` as numpy views of the live parameters (:mod:`cairn.numpy_acting`),
        with the activation :meth:`forward` runs now."""
        layers = self._numpy_views.get(self)
        if layers.activation != self.activation:  # an attribute, which the views cannot watch
            self._numpy_views = LiveViews(_acting_views)
            layers = self._numpy_views.get(self)
        return layers

    def numpy_q_values(self, obs: np.ndarray) -> np.ndarray:
        """:meth:`forward` in numpy on views of the live parameters, for the sampling loop
        (a few observations per call, where torch's per-operator dispatch dominates) and
        the learner's targets."""
        if self.encoder is not None:  # convolutions: torch's kernels, not dispatch, dominate
            return in_torch(self, obs, self)
        return numpy_q_forward(self.numpy_layers(), obs)


def _acting_views(model: QNetwork, view: View) -> NumpyQLayers:
    hidden, advantage_head, value_head = model.linear_layers()
    return NumpyQLayers([linear(layer, view) for layer in hidden], linear(advantage_head, view),
                        None if value_head is None else linear(value_head, view), model.activation)
