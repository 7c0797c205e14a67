"""When a :class:`~cairn.checkpoint.manager.CheckpointManager` save is due: every n iterations,
every n seconds, and every n env steps (Stable-Baselines3's ``save_freq``); a save is due when
any rule says so, and never twice for one iteration.
"""

from __future__ import annotations

import numbers
import re
import time
from collections.abc import Mapping
from typing import Any

from cairn.errors import ConfigError
from cairn.policy_ids import is_snapshot_id
from cairn.result_names import flat_result, is_finite_number

__all__ = ["SaveSchedule", "TIMESTEPS_KEY", "check_count", "result_metric", "result_timesteps"]

#: The result key (``Algorithm.train()``'s) that counts env steps for ``save_every_timesteps``.
TIMESTEPS_KEY = "num_env_steps_sampled_lifetime"


def check_count(name: str, value: Any, what: str) -> None:
    """Refuse a CheckpointManager setting ``name`` that is neither None (``what``) nor an int >= 1."""
    if value is not None and (type(value) is not int or value < 1):
        raise ConfigError(f"CheckpointManager: {name}={value!r}; expected an int >= 1, or None for {what}.")


class SaveSchedule:
    """The rules of :meth:`CheckpointManager.due <cairn.checkpoint.manager.CheckpointManager.due>`
    and what the last save was (iteration, time, env steps)."""

    def __init__(self, *, every_iterations: int | None, every_seconds: float | None,
                 every_timesteps: int | None) -> None:
        check_count("save_every_iterations", every_iterations, "no iteration rule")
        check_count("save_every_timesteps", every_timesteps, "no env-step rule")
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

    def saved(self, iteration: int, timesteps: int | None) -> tuple[int | None, float, int]:
        """Note a save at ``iteration`` (``timesteps`` env steps; None: not known); returns what
        the schedule held before, for :meth:`unsaved` should that save fail later (a background
        write)."""
        before = (self.last_iteration, self.last_time, self.last_timesteps)
        self.last_iteration, self.last_time = iteration, time.monotonic()
        if timesteps is not None:
            self.last_timesteps = timesteps
        return before

    def unsaved(self, before: tuple[int | None, float, int]) -> None:
        """Forget the save that :meth:`saved` returned ``before`` for: it failed, so no
        checkpoint holds it and the next call is due again as if it had not been made."""
        self.last_iteration, self.last_time, self.last_timesteps = before


def result_metric(result: Mapping[str, Any] | None, key: str) -> float | None:
    """The value of metric ``key`` in ``result``: a key of the result, or a name of
    :func:`cairn.result_names.flat_result` (nested keys joined with ``/``, as progress.csv,
    TensorBoard and the loggers name them: ``"league/win_rate/random_legal"``), or a dotted path
    into it (``"evaluation.episode_return_mean"``). None when ``result`` is None, the value is not
    a finite number, or the metric is one that comes and goes (under ``evaluation`` in a result
    without an evaluation; main's win rate against an opponent with no game in the window).

    Raises :class:`~cairn.errors.ConfigError` naming the metric and the result's numeric names
    when the result lacks it otherwise (a misspelt ``keep_best`` metric would keep no best
    checkpoint, silently), and when its value is no number (a group of metrics such as
    ``"evaluation"``, a string, a bool): that too would keep no best checkpoint. Also when it
    is main's win rate against an opponent that the result's league can never report (neither a
    fixed opponent nor a snapshot ``"<main>_v<n>"``), naming those it can report.
    """
    if result is None:
        return None
    names = flat_result(result)
    if key in result:
        value = result[key]
    else:
        name = key if key in names else key.replace(".", "/")
        if name not in names:
            _check_league_opponent(result, key)
            if _comes_and_goes(result, name):
                return None
            raise ConfigError(
                f"CheckpointManager(keep_best=({key!r}, ...)): the result has no metric {key!r}. Its metrics "
                f"are: {_numeric_names(names)}. Fix: name one of them (nested keys joined with '/', as in "
                "progress.csv, or with '.').")
        value = names[name]
    if value is None:
        return None
    if not (isinstance(value, numbers.Real) and not isinstance(value, bool)):
        kind = "a group of metrics" if isinstance(value, Mapping) else f"{type(value).__name__} {value!r:.80}"
        raise ConfigError(
            f"CheckpointManager(keep_best=({key!r}, ...)): the result's {key!r} is {kind}, not a number, so "
            f"no checkpoint could ever count as best by it. Its metrics are: {_numeric_names(names)}. Fix: "
            "name one of them (nested keys joined with '/', as in progress.csv, or with '.').")
    return float(value) if is_finite_number(value) else None


def _numeric_names(names: Mapping[str, Any]) -> str:
    """The names of ``names`` (a :func:`flat_result`) whose values are numbers, the first 80."""
    numeric = [n for n, v in names.items() if isinstance(v, (int, float)) and not isinstance(v, bool)]
    more = f", ... ({len(numeric) - 80} more)" if len(numeric) > 80 else ""
    return ", ".join(numeric[:80]) + more


def _comes_and_goes(result: Mapping[str, Any], name: str) -> bool:
    """Whether metric ``name``, missing from ``result``, is one that results have in some
    iterations only: the evaluation's (``evaluation/...`` in a result without an evaluation:
    not an evaluation iteration) and main's win rate per opponent (``league/win_rate/<opponent>``:
    only against opponents with a game in the league's window)."""
    if name.startswith("evaluation/"):
        return "evaluation" not in result
    league = result.get("league")
    return name.startswith("league/win_rate/") and isinstance(league, Mapping) \
        and isinstance(league.get("win_rate"), Mapping)


def _check_league_opponent(result: Mapping[str, Any], key: str) -> None:
    """Raise :class:`~cairn.errors.ConfigError` when ``key`` is main's win rate against an
    opponent that ``result``'s league can never report: not one of its fixed opponents, not a
    snapshot ID ``"<main>_v<n>"`` (:func:`cairn.policy_ids.is_snapshot_id`; main plays no
    games against itself). Such a name (a misspelt opponent) would look like an opponent with no
    game yet at every save, and no checkpoint would ever count as best. Snapshots and fixed
    opponents with no game yet are left alone: they can have a win rate later. Without the
    league's ``main`` and ``rating`` (every participant's, fixed opponents included) it cannot
    tell, and checks nothing."""
    match = re.fullmatch(r"league[./]win_rate[./](.+)", key, flags=re.DOTALL)
    league = result.get("league")
    if match is None or not isinstance(league, Mapping):
        return
    main, ratings = league.get("main"), league.get("rating")
    if not (isinstance(main, str) and isinstance(ratings, Mapping)):
        return
    opponent = match.group(1)
    fixed = sorted(str(name) for name in ratings
                   if name != main and not (isinstance(name, str) and is_snapshot_id(main, name)))
    if opponent in fixed or is_snapshot_id(main, opponent):
        return
    raise ConfigError(
        f"CheckpointManager(keep_best=({key!r}, ...)): the league never reports main's win rate against "
        f"{opponent!r}: it is neither one of its fixed opponents ({', '.join(map(repr, fixed)) or 'none'}) "
        f"nor a snapshot of main {main!r} ('{main}_v<n>'; main plays no games against itself), so no "
        "checkpoint could ever count as best by it. Fix: name one of those opponents "
        f"('league/win_rate/<opponent>'), or add {opponent!r} to config.league(opponents=...).")


def result_timesteps(result: Mapping[str, Any] | None) -> int | None:
    """The env steps sampled so far according to ``result`` (:data:`TIMESTEPS_KEY`); None
    when it has none."""
    value = None if result is None else result.get(TIMESTEPS_KEY)
    return int(value) if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None
