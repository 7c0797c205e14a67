"""Gymnasium's internals that cairn relies on.

Touches:

* the wrappers' step bookkeeping: ``TimeLimit._elapsed_steps`` (the steps taken in this episode,
  which decides when it truncates) and ``OrderEnforcing._has_reset`` (whether ``step`` may be
  called);
* ``Env._np_random``, the environment's random generator, read without the ``np_random``
  property (which makes one when there is none yet).

Why: exact resume of classic-control environments (:mod:`cairn.env_runner.env_state`) stores
and restores exactly this state; Gymnasium offers no public get/set for it.

Supported: ``gymnasium>=1.0,<2`` (pyproject.toml). These attributes have kept their names and
meaning through Gymnasium 1.x.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

__all__ = ["WRAPPER_STATE_ATTRS", "np_random_or_none", "set_np_random", "set_wrapper_state", "wrapper_state"]

#: The private attributes of Gymnasium's wrappers that are part of an environment's state.
WRAPPER_STATE_ATTRS = ("_elapsed_steps", "_has_reset")


def wrapper_state(wrapper: Any) -> dict[str, Any]:
    """The :data:`WRAPPER_STATE_ATTRS` that ``wrapper`` itself has, by name."""
    return {k: getattr(wrapper, k) for k in WRAPPER_STATE_ATTRS if hasattr(wrapper, k)}


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
