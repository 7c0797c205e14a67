"""Gymnasium's internals that cairn relies on.

Touches:

* the wrappers' step bookkeeping: ``TimeLimit._elapsed_steps`` (the steps taken in this episode,
  which decides when it truncates) and ``OrderEnforcing._has_reset`` (whether ``step`` may be
  called);
* ``Env._np_random``, the environment's random generator, read without the ``np_random``
  property (which makes one when there is none yet);
* the instance attributes of a wrapper (``vars(wrapper)``), to tell a wrapper that keeps state
  of its own (a frame stack, a running normaliser, a step counter) from one that keeps none.

Why: exact resume of classic-control environments (:mod:`cairn.env_runner.env_state`) stores
and restores exactly this state; Gymnasium offers no public get/set for it.

Supported: ``gymnasium>=1.0,<2`` (pyproject.toml). These attributes have kept their names and
meaning through Gymnasium 1.x.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

__all__ = [
    "WRAPPER_STATE_ATTRS", "awaits_reset", "counts_episode_steps", "np_random_or_none", "set_np_random",
    "set_wrapper_state", "wrapper_state", "wrapper_state_is_captured",
]

#: The private attributes of Gymnasium's wrappers that are part of an environment's state.
WRAPPER_STATE_ATTRS = ("_elapsed_steps", "_has_reset")

#: Gymnasium's wrappers (module, class name) whose only state is in :data:`WRAPPER_STATE_ATTRS`:
#: those ``gym.make`` adds, and transforms that hold a function of one step (``func``) and
#: its settings. Not here (state of their own): the frame stacks, normalisers, time features,
#: delays, sticky actions, episode statistics and ``Autoreset``.
_CAPTURED_WRAPPERS = frozenset({
    ("gymnasium.wrappers.common", "TimeLimit"),
    ("gymnasium.wrappers.common", "OrderEnforcing"),
    ("gymnasium.wrappers.common", "PassiveEnvChecker"),
    *(("gymnasium.wrappers.transform_observation", name) for name in (
        "FlattenObservation", "TransformObservation", "DtypeObservation", "ReshapeObservation",
        "RescaleObservation", "FilterObservation", "GrayscaleObservation", "ResizeObservation")),
    *(("gymnasium.wrappers.transform_action", name) for name in (
        "TransformAction", "ClipAction", "RescaleAction")),
    *(("gymnasium.wrappers.transform_reward", name) for name in ("TransformReward", "ClipReward")),
})

#: The attributes every ``gym.Wrapper`` sets (``Wrapper.__init__``, ``RecordConstructorArgs``).
_BASE_WRAPPER_ATTRS = frozenset({
    "env", "_action_space", "_observation_space", "_metadata", "_cached_spec", "_reward_range",
    "_saved_kwargs",
})


def wrapper_state_is_captured(wrapper: Any) -> bool:
    """Whether :func:`wrapper_state` is all the state of ``wrapper``: one of Gymnasium's wrappers
    known to keep no other, or a wrapper with no attributes of its own (a subclass that only
    overrides methods, such as :class:`cairn.envs.memory.StatelessCartPole`). Any other
    wrapper may keep state that a restored environment would lack."""
    cls = type(wrapper)
    if (cls.__module__, cls.__name__) in _CAPTURED_WRAPPERS:
        return True
    return set(vars(wrapper)) <= _BASE_WRAPPER_ATTRS


def wrapper_state(wrapper: Any) -> dict[str, Any]:
    """The :data:`WRAPPER_STATE_ATTRS` that ``wrapper`` itself has, by name."""
    return {k: getattr(wrapper, k) for k in WRAPPER_STATE_ATTRS if hasattr(wrapper, k)}


def counts_episode_steps(wrapper: Any) -> bool:
    """Whether ``wrapper`` itself counts the steps of the episode (a ``TimeLimit``)."""
    return hasattr(wrapper, "_elapsed_steps")


def awaits_reset(wrapper: Any) -> bool:
    """Whether ``wrapper`` itself refuses ``step`` until a reset (an ``OrderEnforcing`` that has
    not seen one)."""
    return getattr(wrapper, "_has_reset", None) is False


def set_wrapper_state(wrapper: Any, saved: Mapping[str, Any]) -> None:
    """Write :func:`wrapper_state` output back to ``wrapper``; other keys are ignored."""
    for key, value in saved.items():
        if key in WRAPPER_STATE_ATTRS:
            setattr(wrapper, key, value)


def np_random_or_none(env: Any) -> np.random.Generator | None:
    """``env``'s random generator, or None when it has none yet (``Env._np_random``)."""
    return getattr(env, "_np_random", None)


def set_np_random(env: Any, rng: np.random.Generator) -> None:
    """Give ``env`` the random generator ``rng`` (``Env._np_random``)."""
    env._np_random = rng
