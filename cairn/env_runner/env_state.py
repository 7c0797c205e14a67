"""The environment state protocol: how an env runner saves and restores environments.

An environment takes part in exact resume when cairn can read and write its state:

1. **Protocol.** The environment (``env.unwrapped`` for Gymnasium wrappers) defines
   ``get_state() -> dict`` and ``set_state(state) -> None``; the dict holds JSON values and
   numpy arrays only. :class:`cairn.envs.MultiAgentCartPole` does this. A turn-based PettingZoo
   env is reset before its ``set_state`` runs, so that its wrappers (``OrderEnforcingWrapper``)
   are in their after-reset state; so is a Gymnasium env whose ``OrderEnforcing`` wrapper has
   not seen a reset yet (``gym.make``'s, in a new env runner). The protocol's state is the
   env's alone: behind a wrapper that keeps state (``TimeLimit``'s step counter, which
   ``gym.make`` adds for ``max_episode_steps``, or one that
   :func:`cairn._compat.gymnasium_internals.wrapper_state_is_captured` does not know) the env
   is one of the others below (put the time limit inside the env to keep exact resume).
2. **Gymnasium classic control** (CartPole, Acrobot, MountainCar, MountainCarContinuous,
   Pendulum) is supported without changes: cairn stores the physics state, the environment's
   random generator and the ``TimeLimit`` step counter. Only inside wrappers whose whole state
   that is (:func:`cairn._compat.gymnasium_internals.wrapper_state_is_captured`: those of
   ``gym.make``, Gymnasium's per-step transforms such as ``FlattenObservation`` or
   ``RescaleAction``, and wrappers with no attributes of their own); a wrapper that keeps
   state (``FrameStackObservation``, ``NormalizeObservation``, ``TimeAwareObservation``, a
   user's step counter) makes the environment one of the others below.
3. **PettingZoo classic** ``tictactoe_v3`` and ``connect_four_v3`` (turn-based games, as
   their ``env()`` wraps them) are supported without changes too: cairn stores the board, the
   AEC bookkeeping and the wrappers' state (:mod:`cairn.env_runner.pettingzoo_state`).

Any other environment returns ``None`` here; after a restore its env runner starts fresh
episodes seeded from the runner's restored random generator.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

from cairn._compat import gymnasium_internals
from cairn.env_runner.make_env import is_turn_based_env
from cairn.env_runner.pettingzoo_state import get_board_game_state, set_board_game_state
from cairn.errors import EnvError
from cairn.rng import make_rng, rng_state

__all__ = ["get_env_state", "set_env_state"]

_CLASSIC_CONTROL_ATTRS = ("state", "steps_beyond_terminated", "last_u")


def _base(env: Any) -> Any:
    return env.unwrapped if isinstance(env, gym.Env) else env


def _is_classic_control(env: Any) -> bool:
    return type(env).__module__.startswith("gymnasium.envs.classic_control")


def _wrappers_keep_no_state(env: Any) -> bool:
    """Whether no Gymnasium wrapper around ``env``'s protocol env keeps state of its own that
    matters after a reset (OrderEnforcing's flag is set by the reset before ``set_state``)."""
    layer = env
    while isinstance(layer, gym.Wrapper):
        if (not gymnasium_internals.wrapper_state_is_captured(layer)
                or gymnasium_internals.counts_episode_steps(layer)):
            return False
        layer = layer.env
    return True


def _awaits_reset(env: Any) -> bool:
    """Whether a Gymnasium wrapper around ``env`` refuses ``step`` until a reset."""
    layer = env
    while isinstance(layer, gym.Wrapper):
        if gymnasium_internals.awaits_reset(layer):
            return True
        layer = layer.env
    return False


def get_env_state(env: Any) -> dict[str, Any] | None:
    """The state of ``env`` as data, or None when it cannot be captured."""
    base = _base(env)
    getter = getattr(base, "get_state", None)
    if callable(getter) and callable(getattr(base, "set_state", None)):
        # Restored without its wrappers' state, a TimeLimit truncated at the restoring env's count.
        if not _wrappers_keep_no_state(env):
            return None
        try:
            state = getter()
        except Exception as exc:  # the env's own code: say whose it is, and why cairn called it
            raise EnvError(
                f"{type(base).__name__}.get_state() raised {type(exc).__name__}: {exc}. cairn calls an "
                "environment's get_state() when it saves the env runner's state (a checkpoint, which "
                "resumes the episodes in flight exactly), also before the first reset. Fix get_state() "
                "for every state the env can be in (e.g. attributes its reset() sets), or remove "
                "get_state/set_state: the runner then starts fresh episodes after a restore.") from exc
        return {"kind": "protocol", "state": state}
    if not _is_classic_control(base):
        board_game = None if isinstance(env, gym.Env) else get_board_game_state(env)
        return None if board_game is None else {"kind": "pettingzoo_board_game", "state": board_game}
    wrappers = []
    layer = env
    while isinstance(layer, gym.Wrapper):
        if not gymnasium_internals.wrapper_state_is_captured(layer):
            return None  # its state would be the fresh env's: not restored exactly, not at all
        wrappers.append(gymnasium_internals.wrapper_state(layer))
        layer = layer.env
    attrs = {}
    for name in _CLASSIC_CONTROL_ATTRS:
        if hasattr(base, name):
            value = getattr(base, name)
            # A numpy scalar (Pendulum's last_u) becomes a Python number, as JSON restores it.
            attrs[name] = (np.array(value) if isinstance(value, (np.ndarray, tuple, list))
                           else value.item() if isinstance(value, np.generic) else value)
    rng = gymnasium_internals.np_random_or_none(base)
    return {
        "kind": "classic_control",
        "attrs": attrs,
        "wrappers": wrappers,
        "np_random": None if rng is None else rng_state(rng),
    }


def set_env_state(env: Any, state: dict[str, Any] | None) -> bool:
    """Restore :func:`get_env_state` output; False when ``state`` does not apply to ``env``."""
    if state is None:
        return False
    base = _base(env)
    if state.get("kind") == "protocol":
        setter = getattr(base, "set_state", None)
        if not callable(setter):
            return False
        if not _wrappers_keep_no_state(env):
            return False
        # PettingZoo's wrappers (order enforcing) expect a reset first, as does Gymnasium's
        # OrderEnforcing (ResetNeeded at the first step of a new runner's restored env).
        if is_turn_based_env(env) or _awaits_reset(env):
            env.reset()
        setter(state["state"])
        return True
    if state.get("kind") == "pettingzoo_board_game":
        return not isinstance(env, gym.Env) and set_board_game_state(env, state["state"])
    if state.get("kind") != "classic_control" or not _is_classic_control(base):
        return False
    layer = env
    while isinstance(layer, gym.Wrapper):  # a state of its own (an earlier checkpoint's env) is not in it
        if not gymnasium_internals.wrapper_state_is_captured(layer):
            return False
        layer = layer.env
    # A reset first brings every wrapper (order enforcing, env checker) into its after-reset
    # state; the physics, step counters and generator are then overwritten with the saved ones.
    env.reset()
    for name, value in state["attrs"].items():
        if name in _CLASSIC_CONTROL_ATTRS:
            setattr(base, name, np.array(value) if isinstance(value, np.ndarray) else value)
    layer, index = env, 0
    while isinstance(layer, gym.Wrapper) and index < len(state["wrappers"]):
        gymnasium_internals.set_wrapper_state(layer, state["wrappers"][index])
        layer, index = layer.env, index + 1
    if state.get("np_random") is not None:
        gymnasium_internals.set_np_random(base, make_rng(state["np_random"]))
    return True
