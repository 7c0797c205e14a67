"""SAC with a user's own actor and/or critic (``model={"custom_model": ..., "custom_q_model": ...}``).

:class:`CustomSACModel` keeps :class:`~cairn.algorithms.sac.model_base.SACModelBase`'s promise
(``actor``, ``critic`` as twin Q returning ``[2, batch]``, ``target_critic``, ``log_alpha``) with
a :class:`cairn.models.SACActorModel` as the actor and two :class:`cairn.models.SACCriticModel`
as the critics (:class:`TwinCritic`); a part not given is the built-in one.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Mapping, Sequence
from typing import Any

import gymnasium as gym
import torch
from torch import nn
from torch.func import functional_call

from cairn.algorithms.sac.model import SquashedGaussianActor, TwinQ
from cairn.algorithms.sac.model_base import SACModelBase
from cairn.models import SACActorModel, SACCriticModel
from cairn.policy.custom_model import (
    build_custom_model,
    has_reset_parameters,
    reset_users_parameters,
    uses_custom_model,
)
from cairn.policy.target_network import frozen

__all__ = ["CustomSACModel", "TwinCritic", "twin_critics"]


class TwinCritic(nn.Module):
    """Two of a user's critics as SAC's twin Q: ``forward(obs, actions, detach=False) -> [2, B]``;
    ``detach``: gradients reach the actions but not the critics' weights (the actor loss)."""

    def __init__(self, first: nn.Module, second: nn.Module) -> None:
        super().__init__()
        self.q1, self.q2 = first, second

    def forward(self, obs: torch.Tensor, actions: torch.Tensor, *, detach: bool = False) -> torch.Tensor:
        return torch.stack([_q_values(critic, obs, actions, detach) for critic in (self.q1, self.q2)])

    def reset_parameters(self, generator: torch.Generator) -> None:
        """Each of the user's critics that defines ``reset_parameters(generator)`` initialises
        itself from the policy's generator, the first one first (docs/models.md, "Weights")."""
        reset_users_parameters(self.q1, generator)
        reset_users_parameters(self.q2, generator)

    def first_q(self, obs: torch.Tensor, actions: torch.Tensor, *, detach: bool = False) -> torch.Tensor:
        """``[batch]``: ``Q_1(obs, action)`` alone, what TD3's actor loss reads (as the built-in
        ``TwinQ`` and SB3's ``q1_forward``): running ``Q_2`` too would move its ``BatchNorm``
        statistics and draw its ``Dropout`` masks for a value nobody reads."""
        return _q_values(self.q1, obs, actions, detach)


def _q_values(critic: nn.Module, obs: torch.Tensor, actions: torch.Tensor, detach: bool) -> torch.Tensor:
    """``critic(obs, actions)``; ``detach``: through detached weights (gradients reach the actions
    only). The critic gets its own copies: a user's critic may write into its inputs (``obs *= s``),
    and the other critic and the caller's later passes read the same tensors."""
    inputs = (obs.clone(), actions.clone())
    if detach:
        params = {name: p.detach() for name, p in critic.named_parameters()}
        return functional_call(critic, params, inputs)  # type: ignore[no-any-return]
    return critic(*inputs)  # type: ignore[no-any-return]


def twin_critics(model: Mapping[str, Any], obs_size: int, action_size: int, *,
                 observation_space: gym.Space[Any], action_space: gym.Space[Any], generator: torch.Generator,
                 encoder: Mapping[str, Any] | None) -> TwinQ | TwinCritic:
    """The twin critics of SAC and TD3 (``critic(obs, actions, detach=False) -> [2, B]``): two of
    the user's ``custom_q_model`` (a :class:`cairn.models.SACCriticModel`, each built from
    ``generator``) as :class:`TwinCritic`, else the built-in :class:`TwinQ` (``hidden``,
    ``activation``, ``encoder``)."""
    if not uses_custom_model(model, "custom_q_model"):
        return TwinQ(obs_size, action_size, hidden=list(model["hidden"]), activation=model["activation"],
                     encoder=encoder)
    first, second = (build_custom_model(model, SACCriticModel, num_outputs=1, key="custom_q_model",
                                        observation_space=observation_space, action_space=action_space,
                                        generator=generator)
                     for _ in range(2))
    return TwinCritic(first, second)


class CustomSACModel(SACModelBase):
    """SAC's model with a user's actor (``custom_model``) and/or critics (``custom_q_model``);
    the built-in ones (``hidden``, ``activation``) for a part not given."""

    def __init__(self, model: Mapping[str, Any], observation_space: gym.Space[Any],
                 action_space: gym.Space[Any], obs_size: int, *, initial_alpha: float,
                 generator: torch.Generator, encoder: Mapping[str, Any] | None) -> None:
        super().__init__()
        action_size = int(math.prod(action_space.shape or ()))
        builtin: dict[str, Any] = {"hidden": list(model["hidden"]), "activation": model["activation"],
                                   "encoder": encoder}
        spaces: dict[str, Any] = {"observation_space": observation_space, "action_space": action_space,
                  "generator": generator}
        self.actor: nn.Module = (
            build_custom_model(model, SACActorModel, num_outputs=action_size, **spaces)
            if uses_custom_model(model) else SquashedGaussianActor(obs_size, action_size, **builtin))
        self.critic: nn.Module = twin_critics(model, obs_size, action_size, encoder=encoder, **spaces)
        self.target_critic: nn.Module = frozen(copy.deepcopy(self.critic))
        self.log_alpha = nn.Parameter(torch.tensor([math.log(initial_alpha)]))
        self.initial_alpha = initial_alpha

    def builtin_parts(self) -> Sequence[nn.Module]:
        """The parts :meth:`reset_parameters` initialises: cairn's own, the user's critics (their
        :class:`TwinCritic` calls each one's ``reset_parameters`` where it defines one) and a
        user's actor that defines ``reset_parameters(generator)``; any other user's actor
        initialised itself when built."""
        return [part for part in (self.actor, self.critic)
                if isinstance(part, (SquashedGaussianActor, TwinQ, TwinCritic)) or has_reset_parameters(part)]
