"""TD3 with a user's own actor and/or critics (``model={"custom_model": ..., "custom_q_model": ...}``).

:class:`CustomTD3Model` keeps :class:`~cairn.algorithms.td3.model.TD3ModelBase`'s promise with a
:class:`cairn.models.TD3ActorModel` as the actor (squashed by :class:`TanhActor`) and two
:class:`cairn.models.SACCriticModel` as the critics: SAC's
:func:`~cairn.algorithms.sac.custom_model.twin_critics`, the same contract. A part not given is
the built-in one; the targets are copies.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Mapping
from typing import Any

import gymnasium as gym
import torch
from torch import nn

from cairn.algorithms.sac.custom_model import twin_critics
from cairn.algorithms.td3.model import DeterministicActor, TD3ModelBase
from cairn.models import TD3ActorModel
from cairn.policy.custom_model import build_custom_model, reset_users_parameters, uses_custom_model
from cairn.policy.target_network import frozen

__all__ = ["CustomTD3Model", "TanhActor"]


class TanhActor(nn.Module):
    """A user's :class:`~cairn.models.TD3ActorModel` ``net`` as TD3's actor:
    ``forward(obs) = tanh(net(obs))``, the deterministic action in [-1, 1] that the critics,
    acting and exports read (the built-in actor's ``tanh``, applied for the user)."""

    def __init__(self, net: nn.Module) -> None:
        super().__init__()
        self.net = net

    def reset_parameters(self, generator: torch.Generator) -> None:
        """The user's ``reset_parameters(generator)``, where it defines one (docs/models.md)."""
        reset_users_parameters(self.net, generator)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        # A copy: the user's actor may write into its input, and TD3's learner hands the critics
        # the same rows after it (the actor loss reads Q_1(obs, actor(obs))).
        return torch.tanh(self.net(obs.clone()))


class CustomTD3Model(TD3ModelBase):
    """TD3's model with a user's actor (``custom_model``) and/or critics (``custom_q_model``);
    the built-in ones (``hidden``, ``activation``) for a part not given."""

    def __init__(self, model: Mapping[str, Any], observation_space: gym.Space[Any],
                 action_space: gym.Space[Any], obs_size: int, *, generator: torch.Generator,
                 encoder: Mapping[str, Any] | None) -> None:
        super().__init__()
        action_size = int(math.prod(action_space.shape or ()))
        spaces: dict[str, Any] = {"observation_space": observation_space, "action_space": action_space,
                                  "generator": generator}
        self.actor: nn.Module = (
            TanhActor(build_custom_model(model, TD3ActorModel, num_outputs=action_size, **spaces))
            if uses_custom_model(model) else
            DeterministicActor(obs_size, action_size, hidden=list(model["hidden"]),
                               activation=model["activation"], encoder=encoder))
        self.critic = twin_critics(model, obs_size, action_size, encoder=encoder, **spaces)
        self.target_actor: nn.Module = frozen(copy.deepcopy(self.actor))
        self.target_critic = frozen(copy.deepcopy(self.critic))
