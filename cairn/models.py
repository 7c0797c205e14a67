"""Your own torch networks in cairn's policies: the base classes they subclass (docs/models.md).

Select one with RLlib's names, ``model={"custom_model": MyNet, "custom_model_config": {...}}``,
where ``MyNet`` is a class, a ``"package.module:QualName"`` string, or a name registered with
:func:`register_model`. cairn builds it as ``MyNet(observation_space, action_space, num_outputs,
model_config)`` (``model_config`` is the ``custom_model_config`` dict, JSON data) and stores only
the class reference and that dict in checkpoints, never code; on restore the class is resolved
by cairn's one resolver (:func:`cairn.registry.resolve_reference`) and must subclass the base
class of its role, else :class:`~cairn.errors.UnsafeCheckpointError`.

========================  ==============================  ========================================
base class                algorithm, key                  ``forward``
========================  ==============================  ========================================
:class:`ActorCriticModel` PPO, ``custom_model``           ``obs -> (action_inputs [B, num_outputs],
                                                          value [B])``
:class:`RecurrentActorCriticModel`  PPO, ``custom_model``  ``(obs [B, T, size], state) ->
                                                          (action_inputs [B, T, num_outputs],
                                                          value [B, T], state_out)``
:class:`QModel`           DQN, ``custom_model``           ``obs -> q_values [B, n]``
:class:`SACActorModel`    SAC, ``custom_model``           ``obs -> (mean [B, A], log_std [B, A])``
:class:`SACCriticModel`   SAC, TD3, ``custom_q_model``    ``(obs, actions) -> q [B]`` (SAC and TD3
                                                          build two, and a target copy of each)
:class:`TD3ActorModel`    TD3, ``custom_model``           ``obs -> u [B, A]``, the deterministic
                                                          action before TD3's ``tanh``
========================  ==============================  ========================================

``obs`` is the float32 tensor ``[B, observation_size]`` the built-in networks read: the
observation flattened as :func:`gymnasium.spaces.flatten` does it (Dict keys in the space's
order, Discrete parts one-hot), after the observation filter; ``observation_space`` is the space
it comes from (for an observation with an ``"action_mask"``, the space without the mask). A
model whose class sets ``receives_action_mask = True`` is called ``forward(obs, action_mask)``.

A model acts (a few observations per call, in the env runners) and learns through the same
torch code: acting calls ``forward`` (or ``action_inputs``) under ``torch.inference_mode()``, as
the model is at that moment, attributes and branches included.

The model initialises its own parameters in ``__init__`` (cairn seeds torch's generator from
the policy's seed around the call, so a seeded policy always gets the same weights), or in
``reset_parameters(generator)`` if it defines one.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from cairn.errors import ConfigError
from cairn.numpy_acting import in_torch
from cairn.registry import register_model_class, registered_model_classes

__all__ = [
    "ModelBase",
    "ActorCriticModel",
    "RecurrentActorCriticModel",
    "QModel",
    "SACActorModel",
    "SACCriticModel",
    "TD3ActorModel",
    "register_model",
    "registered_models",
    "split_observation",
]


class ModelBase(nn.Module):
    """What every custom model gets: its spaces, output count and JSON config.

    Args:
        observation_space: The space of the observations the model reads (see the module doc).
        action_space: The policy's action space.
        num_outputs: The number of action inputs the model must compute (its role's table).
        model_config: The ``custom_model_config`` dict.
    """

    #: ``True``: ``forward`` (and ``action_inputs``/``value``) also get the action mask, a
    #: float32 ``[B, mask_size]`` tensor of 0/1, as their second argument. cairn masks the
    #: outputs itself either way.
    receives_action_mask: ClassVar[bool] = False

    def __init__(self, observation_space: gym.Space[Any], action_space: gym.Space[Any],
                 num_outputs: int, model_config: Mapping[str, Any]) -> None:
        super().__init__()
        self.observation_space = observation_space
        self.action_space = action_space
        self.num_outputs = int(num_outputs)
        self.model_config = dict(model_config)
        #: The width of ``obs`` (the flattened observation size).
        self.obs_size = int(gym.spaces.flatdim(observation_space))


class ActorCriticModel(ModelBase):
    """PPO's network: ``forward(obs) -> (action_inputs [B, num_outputs], value [B])``.

    ``action_inputs`` are what the action distribution reads: logits for ``Discrete(n)``
    (``num_outputs = n``), the concatenated logits of each sub-action for ``MultiDiscrete``
    (``sum(nvec)``), and ``[mean, log_std]`` for a ``Box`` of ``k`` numbers (``2 * k``).
    Override :meth:`action_inputs` and :meth:`value` too when one can be computed without the
    other (acting needs only the action inputs).
    """

    def forward(self, obs: torch.Tensor, *action_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        raise NotImplementedError(
            f"{type(self).__qualname__} must define forward(obs) -> (action_inputs, value).")

    def action_inputs(self, obs: torch.Tensor, *action_mask: torch.Tensor) -> torch.Tensor:
        """The action distribution's inputs, ``[B, num_outputs]``."""
        return self(obs, *action_mask)[0]  # type: ignore[no-any-return]

    def value(self, obs: torch.Tensor, *action_mask: torch.Tensor) -> torch.Tensor:
        """State values, ``[B]``."""
        return self(obs, *action_mask)[1]  # type: ignore[no-any-return]

    def numpy_action_inputs(self, obs: np.ndarray) -> np.ndarray:
        """:meth:`action_inputs` of a numpy batch, for acting (in torch, under inference mode)."""
        return in_torch(self.action_inputs, obs, self)


class RecurrentActorCriticModel(ActorCriticModel):
    """PPO's network with memory (docs/models.md, "Recurrent models").

    ``forward(obs, state) -> (action_inputs, value, state_out)`` on sequences: ``obs`` is
    ``[B, T, obs_size]`` (``T = 1`` when acting), ``state`` a list of tensors ``[B, *shape]``
    (the state before the sequence's first step), ``action_inputs`` ``[B, T, num_outputs]``,
    ``value`` ``[B, T]`` and ``state_out`` the state after the last step, in ``state``'s
    layout. Steps are causal: PPO pads short sequences at their end and ignores the padded
    outputs. :meth:`get_initial_state` is the state at the start of every episode (one
    unbatched tensor per component, e.g. ``[h, c]`` of ``[cell_size]`` each for an LSTM).

    A recurrent model cannot be used with an observation's ``action_mask``.
    """

    def get_initial_state(self) -> list[torch.Tensor]:
        """The state at the start of an episode: a list of unbatched float32 tensors."""
        raise NotImplementedError(
            f"{type(self).__qualname__} must define get_initial_state() -> list of tensors.")

    def forward(  # type: ignore[override]  # (obs, state) instead of (obs, *action_mask)
        self, obs: torch.Tensor, state: list[torch.Tensor]
    ) -> tuple[torch.Tensor, torch.Tensor, list[torch.Tensor]]:
        raise NotImplementedError(
            f"{type(self).__qualname__} must define forward(obs, state) -> "
            "(action_inputs, value, state_out).")

    def action_inputs(self, obs: torch.Tensor, *state: Any) -> torch.Tensor:
        """Not defined for a recurrent model: its outputs depend on the state, so every caller
        goes through ``forward(obs, state)``."""
        raise TypeError(f"{type(self).__qualname__} is recurrent: call forward(obs, state).")

    def value(self, obs: torch.Tensor, *state: Any) -> torch.Tensor:
        """Not defined for a recurrent model (see :meth:`action_inputs`)."""
        raise TypeError(f"{type(self).__qualname__} is recurrent: call forward(obs, state).")

    def numpy_action_inputs(self, obs: np.ndarray) -> np.ndarray:
        """Not defined for a recurrent model (see :meth:`action_inputs`)."""
        raise TypeError(f"{type(self).__qualname__} is recurrent: call forward(obs, state).")


class QModel(ModelBase):
    """DQN's network: ``forward(obs) -> q_values [B, n]`` for ``Discrete(n)`` (``num_outputs = n``).

    DQN copies it into its target network (``copy.deepcopy``), so keep the model deep-copyable.
    """

    def forward(self, obs: torch.Tensor, *action_mask: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError(f"{type(self).__qualname__} must define forward(obs) -> q_values.")

    def numpy_q_values(self, obs: np.ndarray) -> np.ndarray:
        """Q-values of a numpy batch (acting and targets), through :meth:`forward` in torch."""
        return in_torch(self.forward, obs, self)


class SACActorModel(ModelBase):
    """SAC's actor: ``forward(obs) -> (mean [B, A], log_std [B, A])`` of the Gaussian whose
    samples ``tanh`` squashes into the action Box (``A = num_outputs`` numbers per action).
    Clamp ``log_std`` yourself (the built-in actor clamps to [-20, 2])."""

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        raise NotImplementedError(f"{type(self).__qualname__} must define forward(obs) -> (mean, log_std).")

    def numpy_forward(self, obs: np.ndarray) -> np.ndarray:
        """``[mean, log_std]`` concatenated for a numpy batch (acting), through :meth:`forward`
        in torch."""
        return in_torch(lambda x: torch.cat(self(x), dim=-1), obs, self)


class SACCriticModel(ModelBase):
    """One of SAC's critics: ``forward(obs, actions) -> q [B]``, ``actions`` ``[B, A]`` in the
    squashed range [-1, 1] (``num_outputs = 1``). SAC builds two (twin Q) and a target copy of
    each, all from this class and ``custom_model_config``."""

    def forward(self, obs: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError(f"{type(self).__qualname__} must define forward(obs, actions) -> q.")


class TD3ActorModel(ModelBase):
    """TD3's actor: ``forward(obs) -> u [B, A]`` (``A = num_outputs`` numbers per action), the
    deterministic action before squashing: TD3 acts with ``pi(s) = tanh(u)`` rescaled to the
    Box bounds, as its built-in actor does, so do not end with a ``tanh`` of your own (it would
    keep actions inside 76% of the range). TD3 builds one and a target copy of it."""

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError(f"{type(self).__qualname__} must define forward(obs) -> u [B, A].")


def split_observation(obs: torch.Tensor, observation_space: gym.Space[Any]) -> Any:
    """The flat ``obs`` rows ``[B, flatdim]`` of ``observation_space`` cut back into its
    structure, as views: a dict for a ``Dict`` (keys in the space's order), a tuple for a
    ``Tuple``, ``[B, *shape]`` for a ``Box`` or ``MultiBinary``, and the one-hot block
    (``[B, n]``, ``[B, sum(nvec)]``) for ``Discrete``/``MultiDiscrete``. Slicing only, so a
    model that calls it in ``forward`` still exports (``torch.export``, ONNX).

    >>> space = gym.spaces.Dict({"pos": gym.spaces.Box(-1, 1, (2,)), "mode": gym.spaces.Discrete(3)})
    >>> parts = split_observation(torch.zeros(4, 5), space)
    >>> {k: tuple(v.shape) for k, v in parts.items()}
    {'mode': (4, 3), 'pos': (4, 2)}
    """
    def cut(space: gym.Space[Any], offset: int) -> tuple[Any, int]:
        if isinstance(space, gym.spaces.Dict):
            out: dict[str, Any] = {}
            for key, sub in space.spaces.items():
                out[key], offset = cut(sub, offset)
            return out, offset
        if isinstance(space, gym.spaces.Tuple):
            parts = []
            for sub in space.spaces:
                part, offset = cut(sub, offset)
                parts.append(part)
            return tuple(parts), offset
        size = int(gym.spaces.flatdim(space))
        block = obs[:, offset:offset + size]
        if isinstance(space, (gym.spaces.Box, gym.spaces.MultiBinary)):
            block = block.reshape(obs.shape[0], *space.shape)
        return block, offset + size

    expected = int(gym.spaces.flatdim(observation_space))
    if obs.shape[-1] != expected:
        raise ValueError(f"split_observation: rows of {obs.shape[-1]} numbers do not fit {observation_space} "
                         f"({expected} numbers flattened).")
    return cut(observation_space, 0)[0]


def register_model(name: str, model_class: type[ModelBase]) -> None:
    """Register ``model_class`` under ``name`` for ``model={"custom_model": name}``.

    Checkpoints then store the name: a process that restores them must register it again
    (import the module that calls this) before loading. A ``"module:QualName"`` reference
    needs no registration.
    """
    if not (isinstance(model_class, type) and issubclass(model_class, ModelBase)):
        raise ConfigError(
            f"register_model({name!r}, {model_class!r:.100}): the model must be a subclass of "
            "cairn.models.ActorCriticModel, QModel, SACActorModel, SACCriticModel or TD3ActorModel."
        )
    register_model_class(name, model_class)


def registered_models() -> dict[str, type]:
    """``{name: class}`` of the models registered with :func:`register_model`."""
    return registered_model_classes()
