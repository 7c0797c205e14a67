"""Scripted opponents: fixed players of a two-player game, named by a string.

A config or a checkpoint names an opponent, never stores it: ``"random_legal"`` (a uniformly
random legal action) or ``"package.module:function_or_class"``, resolved through cairn's one
resolver (:func:`cairn.registry.resolve_reference`: no standard library, nothing executed
that the name does not import, a plain function defined in that module or a class of
callables). The signature is :class:`cairn.core.ScriptedOpponent`::

    def my_opponent(observation, action_mask, rng):
        return int(rng.choice(np.flatnonzero(action_mask)))

:func:`cairn.envs.connect_four_heuristic` is one, for connect four.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from typing import Any

import gymnasium as gym
import numpy as np

from cairn.core import ScriptedOpponent
from cairn.errors import CheckpointConfigError, ConfigError, EnvError
from cairn.registry import resolve_reference

__all__ = ["ScriptedOpponent", "RANDOM_LEGAL", "check_discrete_action", "random_legal", "resolve_opponent",
           "scripted_move", "split_observation"]

#: The name of the built-in opponent that plays a uniformly random legal action.
RANDOM_LEGAL = "random_legal"

_FORMS = (f"{RANDOM_LEGAL!r} or 'package.module:function_or_class' (e.g. "
          "'cairn.envs.connect_four:connect_four_heuristic')")


def random_legal(observation: np.ndarray, action_mask: np.ndarray | None, rng: np.random.Generator, *,
                 start: int = 0) -> int:
    """A uniformly random legal action: ``start`` plus a position drawn by ``rng.choice`` among
    the mask's nonzero entries (entry ``k`` of a ``Discrete(n, start=s)`` space's mask is action
    ``s + k``). cairn's env runners and :func:`~cairn.league.games.play_games` pass the space's
    ``start`` (:func:`scripted_move`); called by hand, give it for a space that does not start at 0.

    Raises :class:`~cairn.errors.ConfigError` without a mask (a non-Discrete action space) and
    :class:`~cairn.errors.EnvError` when the mask allows nothing.
    """
    if action_mask is None:
        raise ConfigError(f"The {RANDOM_LEGAL!r} opponent needs an action mask: it plays Discrete action "
                          "spaces only (got none). Write a scripted opponent for this game instead.")
    legal = np.flatnonzero(np.asarray(action_mask))
    if legal.size == 0:
        raise EnvError(f"The {RANDOM_LEGAL!r} opponent was asked to move with an action mask that allows "
                       f"no action ({np.asarray(action_mask).tolist()}).")
    return int(start) + int(rng.choice(legal))


def scripted_move(opponent: ScriptedOpponent, observation: Any, action_mask: np.ndarray | None,
                  rng: np.random.Generator, action_space: Any) -> Any:
    """``opponent``'s move, an action of ``action_space``: what it returns, called as
    ``opponent(observation, action_mask, rng)``; :func:`random_legal` (which sees only the mask)
    is also given a Discrete space's ``start``, so that its mask positions become actions."""
    if opponent is random_legal and isinstance(action_space, gym.spaces.Discrete):
        return random_legal(observation, action_mask, rng, start=int(action_space.start))
    return opponent(observation, action_mask, rng)


def resolve_opponent(spec: str) -> ScriptedOpponent:
    """The scripted opponent ``spec`` names: :data:`RANDOM_LEGAL`, or ``"module:function"``
    (that function), or ``"module:Class"`` (an instance built with no arguments).

    Raises :class:`~cairn.errors.ConfigError` naming the spec and the fix for a malformed
    spec, a module or name that does not exist, or a class that cannot be built without
    arguments; :class:`~cairn.errors.UnsafeCheckpointError` for a reference the resolver refuses
    (the standard library, a builtin, a class that is not callable).

    >>> resolve_opponent("random_legal") is random_legal
    True
    """
    if spec == RANDOM_LEGAL:
        return random_legal
    module_name, _, qualname = spec.partition(":") if isinstance(spec, str) else ("", "", "")
    if not all(part.isidentifier() for part in module_name.split(".") + qualname.split(".")):
        close = difflib.get_close_matches(str(spec), [RANDOM_LEGAL], n=1)  # a misspelt random_legal
        hint = f" Did you mean {close[0]!r}?" if close else ""
        raise ConfigError(f"Unknown opponent {spec!r:.100}: expected {_FORMS}.{hint}")
    try:
        resolved: Any = resolve_reference(spec, what="scripted opponent", base=ScriptedOpponent,
                                          functions=True)
    except CheckpointConfigError as exc:  # a module or name that does not exist
        raise ConfigError(f"Could not resolve opponent {spec!r}: {exc.__cause__ or exc}. Fix: name an "
                          f"importable function or class, as {_FORMS}; install or put its package on "
                          "sys.path (PYTHONPATH).") from exc
    if not isinstance(resolved, type):
        return resolved  # type: ignore[no-any-return]
    try:
        return resolved()  # type: ignore[no-any-return]
    except TypeError as exc:
        raise ConfigError(f"Opponent {spec!r} names the class {resolved.__qualname__}, which could not be "
                          f"built with no arguments ({exc}). Fix: give its __init__ defaults for every "
                          "argument, or name a function.") from exc


def split_observation(observation: Any, info: Any, action_space: Any) -> tuple[Any, np.ndarray | None]:
    """``(observation, action_mask)`` of one player's raw observation: the mask from the
    observation dict's ``"action_mask"`` (its ``"observation"`` entry is then the observation),
    else from ``info["action_mask"]``, else all ones for a Discrete action space (None for
    others)."""
    if isinstance(observation, Mapping) and "action_mask" in observation:
        return observation.get("observation", observation), np.asarray(observation["action_mask"])
    mask = info.get("action_mask") if isinstance(info, Mapping) else None
    if mask is not None:
        return observation, np.asarray(mask)
    if isinstance(action_space, gym.spaces.Discrete):
        return observation, np.ones(int(action_space.n), np.int8)
    return observation, None


def check_discrete_action(action: Any, action_space: gym.spaces.Discrete, who: str) -> int:
    """The index (from 0) of ``action`` in ``action_space``, or :class:`~cairn.errors.EnvError`
    naming ``who`` (a player: "the opponent", "scripted opponent 'x' (...)") for anything that
    is not one of its actions (gymnasium's ``contains``: an integer in range, not a float or a
    string), checked before the env sees it (PettingZoo's own check is a bare AssertionError, and
    a game without one would play it)."""
    if not action_space.contains(action):
        raise EnvError(f"{who} played {action!r}, outside the action space {action_space}; a player must "
                       "return an action of the space (a scripted opponent: one the mask allows, an int).")
    return int(action) - int(action_space.start)
