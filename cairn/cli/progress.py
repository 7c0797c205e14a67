"""What ``cairn train`` shows while it trains: a rich progress bar on a terminal (timesteps
or iterations against the stop criterion, return, env steps/s, ETA), one plain line per
iteration elsewhere (logs, pipes, CI), nothing with ``-q``."""

from __future__ import annotations

import math
import sys
from collections.abc import Mapping
from typing import Any, Protocol

__all__ = ["Reporter", "PlainReporter", "BarReporter", "QuietReporter", "make_reporter", "format_line"]


class Reporter(Protocol):
    """Shows training progress; ``message`` prints a line without breaking the display."""

    def start(self, result: Mapping[str, Any] | None) -> None: ...
    def update(self, result: Mapping[str, Any]) -> None: ...
    def message(self, text: str) -> None: ...
    def stop(self) -> None: ...


def _num(value: Any, spec: str) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "nan".rjust(len(format(0.0, spec)))
    return format(value, spec)


def league_summary(result: Mapping[str, Any]) -> tuple[float, float] | None:
    """(main's mean win rate against its opponents, the pool's snapshots and the fixed
    opponents alike: the mean of ``result["league"]["win_rate"]``, nan before any game; main's
    rating) of a league's result, else None: a zero-sum game's return says nothing, these do."""
    league = result.get("league")
    if not league:
        return None
    rates = list(league["win_rate"].values())
    return (sum(rates) / len(rates) if rates else float("nan")), league["rating"][league["main"]]


def format_line(result: Mapping[str, Any]) -> str:
    """The plain line of one iteration (``iter    3 | env steps ...``); with a league, main's
    win rate and rating instead of the return."""
    league = league_summary(result)
    shown = (f" | return_mean {_num(result.get('episode_return_mean'), '8.2f')}" if league is None else
             f" | win_rate {_num(league[0], '5.2f')} | rating {_num(league[1], '6.2f')}")
    return (f"iter {result['training_iteration']:4d}"
            f" | env steps {result['num_env_steps_sampled_lifetime']:8d}"
            f"{shown}"
            f" | len_mean {_num(result.get('episode_len_mean'), '7.1f')}"
            f" | {_num(result.get('env_steps_per_s'), '6.0f')} steps/s | {result['time_this_iter_s']:.2f}s")


class QuietReporter:
    """``-q``: shows nothing."""

    def start(self, result: Mapping[str, Any] | None) -> None: ...
    def update(self, result: Mapping[str, Any]) -> None: ...
    def message(self, text: str) -> None: ...
    def stop(self) -> None: ...


class PlainReporter:
    """One line per iteration on stdout, flushed at once."""

    def start(self, result: Mapping[str, Any] | None) -> None: ...

    def update(self, result: Mapping[str, Any]) -> None:
        print(format_line(result), flush=True)

    def message(self, text: str) -> None:
        print(text, flush=True)

    def stop(self) -> None: ...


class BarReporter:
    """A rich progress bar. Its length is the stop criterion: ``--stop-timesteps`` (env steps),
    else ``--stop-iters``; with only ``--stop-reward`` it shows the return against the target.

    Args:
        title: Shown left of the bar (``PPO CartPole-v1``).
        stop: ``{"timesteps": N | None, "iters": N | None, "reward": R | None}``.
        console: A ``rich.console.Console`` (default: stdout's); tests pass a recording one.
    """

    def __init__(self, title: str, stop: Mapping[str, Any], console: Any = None) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

        self.console = console or Console()
        self.stop_criteria = stop
        self.total: int | None
        if stop.get("timesteps") is not None:
            self.unit, self.total = "timesteps", int(stop["timesteps"])
        elif stop.get("iters") is not None:
            self.unit, self.total = "iters", int(stop["iters"])
        else:
            self.unit, self.total = "reward", None
        # Under 110 columns (80 is common) a shorter bar and only the return, so the line fits.
        self.narrow = self.console.width < 110
        clock = TimeRemainingColumn() if self.total is not None else TimeElapsedColumn()
        self.progress = Progress(
            TextColumn("[bold]{task.description}"), BarColumn(bar_width=8 if self.narrow else 24),
            TextColumn("{task.fields[done]}"),
            TextColumn("ETA" if self.total is not None else "elapsed"), clock,
            TextColumn("{task.fields[stats]}"),
            console=self.console, transient=False,
        )
        self.task = self.progress.add_task(title, total=self.total, **self._fields(None))  # type: ignore[arg-type]

    def _fields(self, result: Mapping[str, Any] | None) -> dict[str, str]:
        """``done``: ``12,288/50,000 steps`` (or ``iter 6/20``); ``stats``: ``| return 23.4 |
        5,079 steps/s | iter 6``."""
        result = result or {}
        steps = result.get("num_env_steps_sampled_lifetime", 0)
        iteration = result.get("training_iteration", 0)
        if self.unit == "timesteps":
            done = f"{steps:,}/{self.total:,} steps"
        elif self.unit == "iters":
            done = f"iter {iteration}/{self.total}"
        else:
            done = f"{steps:,} steps"
        ret = result.get("episode_return_mean")
        shown = "-" if ret is None or math.isnan(ret) else f"{ret:.1f}"
        if self.stop_criteria.get("reward") is not None:
            shown += f"/{self.stop_criteria['reward']:g}"
        speed = result.get("env_steps_per_s")
        league = league_summary(result)
        if league is not None:
            rate = "-" if math.isnan(league[0]) else f"{league[0]:.2f}"
            shown = f"win rate {rate} | rating {league[1]:.1f}"
        parts = [shown if league is not None else f"return {shown}",
                 f"{'-' if speed is None or math.isnan(speed) else f'{speed:,.0f}'} steps/s"]
        if self.narrow:
            parts[1] = parts[1].replace(" steps/s", "/s")
            del parts[2:]
        if self.unit != "iters" and not self.narrow:
            parts.append(f"iter {iteration}")
        return {"done": done, "stats": "| " + " | ".join(parts)}

    def _completed(self, result: Mapping[str, Any]) -> float:
        if self.unit == "timesteps":
            return min(float(result["num_env_steps_sampled_lifetime"]), float(self.total or 0))
        if self.unit == "iters":
            return min(float(result["training_iteration"]), float(self.total or 0))
        return 0.0

    def start(self, result: Mapping[str, Any] | None) -> None:
        if result is not None:  # resumed: the bar starts where the run was (ETA from here on)
            self.progress.reset(self.task, completed=int(self._completed(result)),
                                **self._fields(result))  # type: ignore[arg-type]
        self.progress.start()

    def update(self, result: Mapping[str, Any]) -> None:
        self.progress.update(self.task, completed=self._completed(result), **self._fields(result))  # type: ignore[arg-type]

    def message(self, text: str) -> None:
        self.progress.console.print(text, highlight=False, markup=False, soft_wrap=True)

    def stop(self) -> None:
        self.progress.stop()


def make_reporter(*, quiet: bool, title: str, stop: Mapping[str, Any]) -> Reporter:
    """The reporter for this process: quiet, a bar when stdout is a terminal (and rich is
    installed), else plain lines."""
    if quiet:
        return QuietReporter()
    if sys.stdout.isatty():
        try:
            return BarReporter(title, stop)
        except ImportError:
            pass
    return PlainReporter()
