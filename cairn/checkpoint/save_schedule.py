"""When a :class:`~cairn.checkpoint.manager.CheckpointManager` save is due: every n iterations,
every n seconds, and every n env steps (Stable-Baselines3's ``save_freq``); a save is due when
any rule says so, and never twice for one iteration.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from typing import Any

from cairn.errors import ConfigError

__all__ = ["SaveSchedule", "TIMESTEPS_KEY", "result_metric", "result_timesteps"]

#: The result key (``Algorithm.train()``'s) that counts env steps for ``save_every_timesteps``.
TIMESTEPS_KEY = "num_env_steps_sampled_lifetime"


def _check_count(name: str, value: Any, what: str) -> None:
    if value is not None and (type(value) is not int or value < 1):
        raise ConfigError(f"CheckpointManager: {name}={value!r}; expected an int >= 1, or None for {what}.")


class SaveSchedule:
    """The rules of :meth:`CheckpointManager.due <cairn.checkpoint.manager.CheckpointManager.due>`
    and what the last save was (iteration, time, env steps)."""

    def __init__(self, *, every_iterations: int | None, every_seconds: float | None,
                 every_timesteps: int | None) -> None:
        _check_count("save_every_iterations", every_iterations, "no iteration rule")
        _check_count("save_every_timesteps", every_timesteps, "no env-step rule")
        if every_seconds is not None and not (
                isinstance(every_seconds, (int, float)) and not isinstance(every_seconds, bool)
                and every_seconds > 0):
            raise ConfigError(f"CheckpointManager: save_every_seconds={every_seconds!r}; "
                              "expected a number > 0, or None for no time rule.")
        self.every_iterations = every_iterations
        self.every_seconds = every_seconds
        self.every_timesteps = every_timesteps
        #: The iteration of the last save (or the latest checkpoint under the root).
        self.last_iteration: int | None = None
        #: The env steps at the last save (0: none yet, or not known).
        self.last_timesteps = 0
        self.last_time = time.monotonic()

    def due(self, iteration: int, timesteps: int | None = None) -> bool:
        """Whether a save at ``iteration`` (``timesteps`` env steps sampled so far) is due: an
        iteration not saved yet that is a multiple of ``every_iterations``, or
        ``every_seconds`` passed since the last save, or a multiple of ``every_timesteps``
        reached since the last save (never with ``timesteps=None``)."""
        if self.last_iteration is not None and iteration <= self.last_iteration:
            return False
        by_iteration = self.every_iterations is not None and iteration % self.every_iterations == 0
        by_time = self.every_seconds is not None and time.monotonic() - self.last_time >= self.every_seconds
        by_steps = (self.every_timesteps is not None and timesteps is not None
                    and timesteps // self.every_timesteps > self.last_timesteps // self.every_timesteps)
        return by_iteration or by_time or by_steps

    def saved(self, iteration: int, timesteps: int | None) -> None:
        """Note a save at ``iteration`` (``timesteps`` env steps; None: not known)."""
        self.last_iteration, self.last_time = iteration, time.monotonic()
        if timesteps is not None:
            self.last_timesteps = timesteps


def result_metric(result: Mapping[str, Any] | None, key: str) -> float | None:
    """``result[key]``, where a dotted key reaches into nested dicts
    (``"evaluation.episode_return_mean"``); None when absent or not a finite number."""
    if result is None:
        return None
    node: Any = result
    if key in result:
        node = result[key]
    else:
        for part in key.split("."):
            if not isinstance(node, Mapping) or part not in node:
                return None
            node = node[part]
    if isinstance(node, bool) or not isinstance(node, (int, float)):
        return None
    value = float(node)
    return value if math.isfinite(value) else None


def result_timesteps(result: Mapping[str, Any] | None) -> int | None:
    """The env steps sampled so far according to ``result`` (:data:`TIMESTEPS_KEY`); None
    when it has none."""
    value = None if result is None else result.get(TIMESTEPS_KEY)
    return int(value) if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None
