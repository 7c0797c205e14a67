"""SACModelBase: what SAC's model promises the algorithm, with the methods every one shares.

SAC's model holds everything SAC learns, so that the policy's weights tree (and so its
checkpoint) has all of it: ``actor`` (``actor(obs) -> (mean, log_std)`` and
``actor.numpy_forward(obs)``), ``critic`` (twin Q: ``critic(obs, actions, detach=False) ->
[2, batch]``), ``target_critic`` (the critics' Polyak-averaged copy, which no optimizer sees) and
``log_alpha``. Two classes build them: the torch
:class:`~cairn.algorithms.sac.model.SACModel` and the Keras
:class:`~cairn.algorithms.sac.keras_model.KerasSACModel` (``framework="keras"``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch
from torch import nn

from cairn.numpy_acting import Dense, affine, dense_stack
from cairn.policy.target_network import TargetParts

__all__ = ["SACModelBase", "numpy_actor_inputs"]


class SACModelBase(TargetParts):
    """The parameter groups, acting inputs and target update shared by SAC's models; a
    subclass builds ``actor``, ``critic``, ``target_critic`` (:func:`~cairn.policy.target_network.frozen`),
    ``log_alpha`` and sets ``initial_alpha``."""

    actor: nn.Module
    critic: nn.Module
    target_critic: nn.Module
    log_alpha: nn.Parameter
    initial_alpha: float
    target_sources = {"target_critic": "critic"}

    def builtin_parts(self) -> Sequence[nn.Module]:
        """The parts :meth:`reset_parameters` initialises: the actor and the critics (a user's
        part only through its own ``reset_parameters``, see ``CustomSACModel``)."""
        return self.actor, self.critic

    def reset_parameters(self, generator: torch.Generator) -> None:
        """SACModel's initialisation of the built-in parts from the policy's generator, actor
        first; the targets copy the critics and ``log_alpha`` starts at ``log(initial_alpha)``."""
        for part in self.builtin_parts():
            part.reset_parameters(generator)  # type: ignore[operator]
        self.copy_targets()
        with torch.no_grad():
            self.log_alpha.fill_(math.log(self.initial_alpha))

    def parameter_groups(self) -> dict[str, list[nn.Parameter]]:
        """The parameters each of SAC's three optimizers trains."""
        return {"actor": list(self.actor.parameters()), "critic": list(self.critic.parameters()),
                "alpha": [self.log_alpha]}

    def action_inputs(self, obs: torch.Tensor) -> torch.Tensor:
        """``[mean, log_std]`` of the pre-squash Gaussian, concatenated."""
        return torch.cat(self.actor(obs), dim=-1)

    def numpy_action_inputs(self, obs: np.ndarray) -> np.ndarray:
        """:meth:`action_inputs` in numpy (the actor's ``numpy_forward``)."""
        return self.actor.numpy_forward(obs)  # type: ignore[operator,no-any-return]

    def extra_repr(self) -> str:
        return f"initial_alpha={self.initial_alpha}"


def numpy_actor_inputs(views: tuple[list[Dense], Dense, Dense], obs: np.ndarray, activation: str,
                       log_std_bounds: tuple[float, float]) -> np.ndarray:
    """A squashed-Gaussian actor's ``[mean, log_std]`` in numpy, from the views of its hidden
    layers, mean head and log-std head (torch's and Keras' actor alike); the log-std clipped."""
    hidden, mean_head, log_std_head = views
    x = dense_stack(obs, hidden, activation)
    return np.concatenate([affine(x, mean_head), np.clip(affine(x, log_std_head), *log_std_bounds)], axis=-1)
