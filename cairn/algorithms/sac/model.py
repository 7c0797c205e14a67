"""SACModel: a squashed-Gaussian actor, twin Q critics with their targets, and log-alpha.

One module holds everything SAC learns, so that the policy's weights tree (and so its
checkpoint) has all of it: ``actor.*``, ``critic.*``, ``target_critic.*`` and ``log_alpha``.
The target critics never receive gradients (``requires_grad`` is off); they follow the
critics by Polyak averaging (:meth:`SACModel.update_targets`).
"""

from __future__ import annotations

import contextlib
import itertools
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from cairn.algorithms.sac.model_base import SACModelBase, numpy_actor_inputs
from cairn.numpy_acting import Dense, LiveViews, View, in_torch, linear
from cairn.policy.encoders import ObservationEncoder
from cairn.policy.target_network import frozen
from cairn.policy.torch_utils import TORCH_ACTIVATIONS, uniform_fan_in_

__all__ = ["SACModel", "SquashedGaussianActor", "TwinQ", "LOG_STD_MIN", "LOG_STD_MAX"]

#: The actor's log-std is clamped to this range, as in Haarnoja et al.'s code and SB3.
LOG_STD_MIN, LOG_STD_MAX = -20.0, 2.0

#: In-place forms of the activations whose gradient reads only their output, applied to a
#: matrix product's fresh result in the critics (no extra tensor; autograd keeps what it
#: needs). The actor keeps the out-of-place forms: it is what exports trace.
_ACTIVATIONS_IN_PLACE: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "tanh": torch.tanh_, "relu": torch.relu_}


class SquashedGaussianActor(nn.Module):
    """``obs -> (mean, log_std)`` of the Gaussian whose samples ``tanh`` squashes to [-1, 1].

    The log-std depends on the state (a second head) and is clamped to
    ``[LOG_STD_MIN, LOG_STD_MAX]``.
    """

    def __init__(self, obs_size: int, action_size: int, *, hidden: Sequence[int], activation: str,
                 encoder: Mapping[str, Any] | None = None) -> None:
        super().__init__()
        # Image observations: a CNN encoder in front (cairn.policy.encoders), the actor's own.
        self.encoder = None if encoder is None else ObservationEncoder(encoder)
        sizes = [obs_size if encoder is None else int(encoder["output_size"]), *hidden]
        self.trunk = nn.ModuleList(nn.Linear(a, b) for a, b in itertools.pairwise(sizes))
        self.mean_head = nn.Linear(sizes[-1], action_size)
        self.log_std_head = nn.Linear(sizes[-1], action_size)
        self.activation = activation
        self._numpy_views = LiveViews(_acting_views)

    def reset_parameters(self, generator: torch.Generator) -> None:
        """PyTorch's default Linear initialisation, drawn from ``generator``."""
        if self.encoder is not None:
            self.encoder.reset_parameters(generator, orthogonal=False)
        for layer in [*self.hidden_layers(), self.mean_head, self.log_std_head]:
            uniform_fan_in_(layer.weight.data, layer.in_features, generator)
            uniform_fan_in_(layer.bias.data, layer.in_features, generator)

    def hidden_layers(self) -> list[nn.Linear]:
        """The trunk's layers, each followed by the activation."""
        return [m for m in self.trunk if isinstance(m, nn.Linear)]

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        # Functional calls: the learner runs this twice per update on small batches, where
        # nn.Module.__call__ costs more than the maths.
        act = TORCH_ACTIVATIONS[self.activation]
        x = obs if self.encoder is None else self.encoder(obs)
        for layer in self.hidden_layers():
            x = act(F.linear(x, layer.weight, layer.bias))
        mean = F.linear(x, self.mean_head.weight, self.mean_head.bias)
        log_std = F.linear(x, self.log_std_head.weight, self.log_std_head.bias)
        return mean, log_std.clamp(LOG_STD_MIN, LOG_STD_MAX)

    def numpy_forward(self, obs: np.ndarray) -> np.ndarray:
        """``[mean, log_std]`` concatenated, in numpy on views of the live parameters
        (:mod:`cairn.numpy_acting`)."""
        if self.encoder is not None:  # convolutions run in torch
            return in_torch(lambda x: torch.cat(self(x), dim=-1), obs, self)
        bounds = (LOG_STD_MIN, LOG_STD_MAX)
        return numpy_actor_inputs(self._numpy_views.get(self), obs, self.activation, bounds)


def _acting_views(actor: SquashedGaussianActor, view: View) -> tuple[list[Dense], Dense, Dense]:
    return ([linear(layer, view) for layer in actor.hidden_layers()], linear(actor.mean_head, view),
            linear(actor.log_std_head, view))


class TwinQ(nn.Module):
    """Two Q-networks ``Q_i(obs, action)``, stored as one ensemble.

    Layer ``k`` of both networks is one weight ``[2, fan_in, fan_out]`` and bias
    ``[2, 1, fan_out]`` (the checkpoint layout). The forward pass runs each critic's layers as
    plain matrix products on views of its slice: on the CPU, torch's batched ``baddbmm``/``bmm``
    is no faster than two ``addmm`` for the hidden layers and about 6x slower for the 1-wide
    output layer, forwards and backwards (batches of 256, 256x256 networks, HalfCheetah's sizes:
    the critics' forward and backward passes of one gradient step took 6.2 ms instead of 7.4).
    """

    def __init__(self, obs_size: int, action_size: int, *, hidden: Sequence[int], activation: str,
                 encoder: Mapping[str, Any] | None = None) -> None:
        super().__init__()
        # Image observations: one CNN encoder for both critics, as SB3's critic has.
        self.encoder = None if encoder is None else ObservationEncoder(encoder)
        sizes = [(obs_size if encoder is None else int(encoder["output_size"])) + action_size, *hidden, 1]
        self.weights = nn.ParameterList(torch.empty(2, a, b) for a, b in itertools.pairwise(sizes))
        self.biases = nn.ParameterList(torch.empty(2, 1, b) for b in sizes[1:])
        self.activation = activation

    def reset_parameters(self, generator: torch.Generator) -> None:
        if self.encoder is not None:
            self.encoder.reset_parameters(generator, orthogonal=False)
        for weight, bias in zip(self.weights, self.biases, strict=True):
            fan_in = weight.shape[1]
            with torch.no_grad():
                for i in range(2):  # one critic after the other, as two nn.Linear stacks would
                    uniform_fan_in_(weight[i], fan_in, generator)
                    uniform_fan_in_(bias[i], fan_in, generator)

    def forward(self, obs: torch.Tensor, actions: torch.Tensor, *, detach: bool = False) -> torch.Tensor:
        """``[2, batch]``: both critics' ``Q(obs, action)``. ``detach``: gradients reach the
        actions but not the critics' weights (the actor loss)."""
        return torch.stack(self._q_values(obs, actions, detach=detach, critics=2))

    def first_q(self, obs: torch.Tensor, actions: torch.Tensor, *, detach: bool = False) -> torch.Tensor:
        """``[batch]``: the first critic's ``Q_1(obs, action)`` alone, the numbers of
        ``forward(obs, actions)[0]`` without the second critic's forward and backward passes
        (TD3's actor loss reads only ``Q_1``, as SB3's ``q1_forward``). ``detach`` as in
        :meth:`forward`."""
        return self._q_values(obs, actions, detach=detach, critics=1)[0]

    def _q_values(self, obs: torch.Tensor, actions: torch.Tensor, *, detach: bool,
                  critics: int) -> list[torch.Tensor]:
        """``[batch]`` per critic for the first ``critics``; each critic's layers are its own
        chain of products, so the first critic's numbers do not depend on ``critics``."""
        act = _ACTIVATIONS_IN_PLACE.get(self.activation) or TORCH_ACTIVATIONS[self.activation]
        if self.encoder is not None:
            with torch.no_grad() if detach else contextlib.nullcontext():
                obs = self.encoder(obs)
        x = torch.cat([obs, actions], dim=-1)
        weights = [w.detach() if detach else w for w in self.weights]
        biases = [b.detach() if detach else b for b in self.biases]
        # unbind: one view per critic (layer k of critic i is [k][i]); autograd stacks the
        # views' gradients back into each [2, ...] parameter.
        layer_weights = [w.unbind(0) for w in weights]
        layer_biases = [b.unbind(0) for b in biases]
        last = len(weights) - 1
        q_values = []
        for i in range(critics):
            h = x
            for k in range(len(weights)):
                h = torch.addmm(layer_biases[k][i], h, layer_weights[k][i])
                if k < last:
                    h = act(h)  # in place where the backward reads the output (relu, tanh)
            q_values.append(h.squeeze(-1))
        return q_values


class SACModel(SACModelBase):
    """Everything SAC learns: ``actor``, ``critic`` (twin Q), ``target_critic``, ``log_alpha``."""

    actor: SquashedGaussianActor
    critic: TwinQ
    target_critic: TwinQ

    def __init__(self, obs_size: int, action_size: int, *, hidden: Sequence[int], activation: str,
                 initial_alpha: float, encoder: Mapping[str, Any] | None = None) -> None:
        super().__init__()
        nets = {"hidden": hidden, "activation": activation, "encoder": encoder}
        self.actor = SquashedGaussianActor(obs_size, action_size, **nets)  # type: ignore[arg-type]
        self.critic = TwinQ(obs_size, action_size, **nets)  # type: ignore[arg-type]
        self.target_critic = frozen(TwinQ(obs_size, action_size, **nets))  # type: ignore[arg-type]
        self.log_alpha = nn.Parameter(torch.tensor([math.log(initial_alpha)]))
        self.initial_alpha = initial_alpha


