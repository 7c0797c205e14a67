"""TD3Model: a deterministic tanh actor, twin Q critics, and a target copy of each.

One module holds everything TD3 learns, so that the policy's weights tree (and so its
checkpoint) has all of it: ``actor.*``, ``critic.*``, ``target_actor.*`` and
``target_critic.*``. The targets never receive gradients (``requires_grad`` is off); they
follow the actor and the critics by Polyak averaging (:meth:`TD3Model.update_targets`), which
TD3 applies only on its delayed steps. The critics are SAC's twin-Q ensemble
(:class:`~cairn.algorithms.sac.model.TwinQ`): same layout, same initialisation.

:class:`TD3ModelBase` is what TD3's learner, acting and export read from any TD3 model:
``actor(obs) -> pi(s)`` in [-1, 1], ``critic(obs, actions, detach=False) -> [2, B]``, their
targets, the optimizer groups and the Polyak step. Three classes build the parts: this
:class:`TD3Model` (torch), :class:`~cairn.algorithms.td3.keras_model.KerasTD3Model`
(``framework="keras"``) and :class:`~cairn.algorithms.td3.custom_model.CustomTD3Model` (a
user's ``custom_model`` / ``custom_q_model``).
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from cairn.algorithms.sac.model import TwinQ
from cairn.errors import ConfigError
from cairn.policy.encoders import ObservationEncoder
from cairn.policy.target_network import TargetParts, frozen
from cairn.policy.torch_utils import TORCH_ACTIVATIONS, uniform_fan_in_

if TYPE_CHECKING:
    from cairn.algorithms.sac.custom_model import TwinCritic
    from cairn.algorithms.sac.keras_model import KerasTwinQ

__all__ = ["DeterministicActor", "TD3Model", "TD3ModelBase"]

class DeterministicActor(nn.Module):
    """``pi(s) = tanh(W h(s) + b)``: the deterministic action in [-1, 1] (Fujimoto et al.'s
    actor, before its scaling to the action bounds, which the policy applies)."""

    def __init__(self, obs_size: int, action_size: int, *, hidden: Sequence[int], activation: str,
                 encoder: Mapping[str, Any] | None = None) -> None:
        super().__init__()
        if activation not in TORCH_ACTIVATIONS:
            raise ConfigError(f"Config 'model.activation'={activation!r} is not one TD3's networks have: "
                              f"expected one of {sorted(TORCH_ACTIVATIONS)}.")
        # Image observations: a CNN encoder in front (cairn.policy.encoders), the actor's own.
        self.encoder = None if encoder is None else ObservationEncoder(encoder)
        sizes = [obs_size if encoder is None else int(encoder["output_size"]), *hidden]
        self.trunk = nn.ModuleList(nn.Linear(a, b) for a, b in itertools.pairwise(sizes))
        self.action_head = nn.Linear(sizes[-1], action_size)
        self.activation = activation

    def reset_parameters(self, generator: torch.Generator) -> None:
        """PyTorch's default Linear initialisation, drawn from ``generator``."""
        if self.encoder is not None:
            self.encoder.reset_parameters(generator, orthogonal=False)
        for layer in [*self.trunk, self.action_head]:
            assert isinstance(layer, nn.Linear)  # the trunk holds only Linear layers
            uniform_fan_in_(layer.weight.data, layer.in_features, generator)
            uniform_fan_in_(layer.bias.data, layer.in_features, generator)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        act = TORCH_ACTIVATIONS[self.activation]
        x = obs if self.encoder is None else self.encoder(obs)
        for layer in self.trunk:
            x = act(layer(x))
        return torch.tanh(self.action_head(x))


class TD3ModelBase(TargetParts):
    """The optimizer groups, acting input, initialisation and target update shared by TD3's
    models; a subclass builds ``actor``, ``critic``, ``target_actor`` and ``target_critic``
    (the targets :func:`~cairn.policy.target_network.frozen`)."""

    actor: nn.Module
    #: Twin Q (``critic(obs, actions, detach=False) -> [2, B]``, ``first_q``): built-in, a user's, or Keras.
    critic: TwinQ | TwinCritic | KerasTwinQ
    target_actor: nn.Module
    target_critic: TwinQ | TwinCritic | KerasTwinQ
    target_sources = {"target_actor": "actor", "target_critic": "critic"}

    def reset_parameters(self, generator: torch.Generator) -> None:
        """Each part's initialisation from the policy's generator, actor first (a user's part
        through its ``reset_parameters(generator)`` where it defines one, else as its seeded
        constructor made it); the targets copy."""
        for part in (self.actor, self.critic):
            reset = getattr(part, "reset_parameters", None)
            if reset is not None:
                reset(generator)
        self.copy_targets()

    def parameter_groups(self) -> dict[str, list[nn.Parameter]]:
        """The parameters each of TD3's two optimizers trains."""
        return {"actor": list(self.actor.parameters()), "critic": list(self.critic.parameters())}

    def action_inputs(self, obs: torch.Tensor) -> torch.Tensor:
        """The deterministic action ``pi(s)`` in [-1, 1] (the distribution's input)."""
        return self.actor(obs)  # type: ignore[no-any-return]


class TD3Model(TD3ModelBase):
    """Everything TD3 learns: ``actor``, ``critic`` (twin Q, ``[2, B]``), ``target_actor``,
    ``target_critic``."""

    def __init__(self, obs_size: int, action_size: int, *, hidden: Sequence[int], activation: str,
                 encoder: Mapping[str, Any] | None = None) -> None:
        super().__init__()
        nets: dict[str, Any] = {"hidden": hidden, "activation": activation, "encoder": encoder}
        self.actor = DeterministicActor(obs_size, action_size, **nets)
        self.critic = TwinQ(obs_size, action_size, **nets)
        self.target_actor = frozen(DeterministicActor(obs_size, action_size, **nets))
        self.target_critic = frozen(TwinQ(obs_size, action_size, **nets))
