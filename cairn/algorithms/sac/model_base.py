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

from cairn._compat.torch_internals import foreach_lerp_
from cairn.numpy_acting import Dense, affine, dense_stack

__all__ = ["SACModelBase", "numpy_actor_inputs", "polyak_update", "targets_in_eval_mode"]


def polyak_update(targets: Sequence[nn.Module], sources: Sequence[nn.Module], tau: float) -> None:
    """Each target network towards its source: parameters ``target <- (1 - tau) * target + tau *
    source``, and buffers (a user's ``BatchNorm`` running statistics) copied, as SB3 copies them
    (its ``polyak_update`` of the batch-norm statistics with ``tau=1``): a target runs in eval mode
    (:func:`targets_in_eval_mode`), where a ``BatchNorm`` normalises by these statistics, and its
    own passes never move them."""
    with torch.no_grad():
        foreach_lerp_([p for t in targets for p in t.parameters()],
                      [p for s in sources for p in s.parameters()], tau)
        for target, source in zip(targets, sources, strict=True):
            for kept, moved in zip(target.buffers(), source.buffers(), strict=True):
                kept.copy_(moved)


def targets_in_eval_mode(model: nn.Module, targets: Sequence[str]) -> None:
    """The parts ``targets`` of ``model`` (its target networks) in eval mode, whatever mode
    ``model`` itself was put in: a target is a frozen estimate, so a user's ``Dropout`` does not
    draw in it and a ``BatchNorm`` reads the statistics it was copied with (SB3 keeps its target
    networks in eval mode always). Called from each model's ``train``."""
    for name in targets:
        getattr(model, name).train(False)


class SACModelBase(nn.Module):
    """The parameter groups, acting inputs and target update shared by SAC's models; a
    subclass builds ``actor``, ``critic``, ``target_critic``, ``log_alpha`` and sets
    ``initial_alpha``."""

    actor: nn.Module
    critic: nn.Module
    target_critic: nn.Module
    log_alpha: nn.Parameter
    initial_alpha: float

    def train(self, mode: bool = True) -> SACModelBase:
        """``mode`` for the actor and the critics; the target critics stay in eval mode
        (:func:`targets_in_eval_mode`)."""
        super().train(mode)
        targets_in_eval_mode(self, ("target_critic",))
        return self

    def builtin_parts(self) -> Sequence[nn.Module]:
        """The parts :meth:`reset_parameters` initialises: the actor and the critics (a user's
        part initialised itself when built, see ``CustomSACModel``)."""
        return self.actor, self.critic

    def reset_parameters(self, generator: torch.Generator) -> None:
        """SACModel's initialisation of the built-in parts from the policy's generator, actor
        first; the targets copy the critics and ``log_alpha`` starts at ``log(initial_alpha)``."""
        for part in self.builtin_parts():
            part.reset_parameters(generator)  # type: ignore[operator]
        self.target_critic.load_state_dict(self.critic.state_dict())
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

    def update_targets(self, tau: float) -> None:
        """Polyak averaging: ``target <- (1 - tau) * target + tau * critic``; buffers copied
        (:func:`polyak_update`)."""
        polyak_update([self.target_critic], [self.critic], tau)

    def extra_repr(self) -> str:
        return f"initial_alpha={self.initial_alpha}"


def numpy_actor_inputs(views: tuple[list[Dense], Dense, Dense], obs: np.ndarray, activation: str,
                       log_std_bounds: tuple[float, float]) -> np.ndarray:
    """A squashed-Gaussian actor's ``[mean, log_std]`` in numpy, from the views of its hidden
    layers, mean head and log-std head (torch's and Keras' actor alike); the log-std clipped."""
    hidden, mean_head, log_std_head = views
    x = dense_stack(obs, hidden, activation)
    return np.concatenate([affine(x, mean_head), np.clip(affine(x, log_std_head), *log_std_bounds)], axis=-1)
