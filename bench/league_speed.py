"""Training speed of league PPO against plain self-play on connect_four_v3 (issue 39's goal: the
league's env steps/s >= 0.9x plain self-play's).

Both variants are ``league_connect_four.py``'s ``build`` (its settings: PPO with
``connect_four_selfplay.py``'s SETTINGS, 8 env copies, batch 4096, [256, 256] tanh, 1 torch
thread): ``selfplay`` maps both seats to one policy; ``league`` is ``config.league(
snapshot_every_iterations=K, max_snapshots=20, matchmaking="pfsp", self_play_fraction=0.2,
opponents={"random_legal": "random_legal"})``. Two settings, one row each:

* ``K=10``: the bench's own setting (``cairn train --league``'s default).
* ``K=1``: a snapshot at the end of every iteration (each iteration adds a policy, and from the
  21st on removes the oldest), after a warm-up that fills the pool to ``max_snapshots``.

Per setting, both variants are built (seed 0) and warmed up, then timed in turns, league first
(A B A B ...): each turn trains ``--iters`` iterations. Per turn: env steps/s over wall time
and over the process's CPU time (the machine is shared: CPU time is the steadier figure), and
the time inside the env runners' ``sample``, the learners (``algo.learn``) and the league's
``end_iteration`` (snapshots, ratings, metrics), measured by wrapping those public calls. The
ratio is league over self-play per pair of turns; the table gives the median.

    .venv/bin/python bench/league_speed.py                 # both settings
    .venv/bin/python bench/league_speed.py --quick         # smoke run
"""

from __future__ import annotations

import argparse
import functools
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _util import (
    REPO,
    cairn_code_line,
    command_line,
    fmt,
    load_average,
    machine_lines,
    median,
    table,
    write_report,
)
from league_connect_four import build

TARGET = 0.9
#: Setting name -> (snapshot_every_iterations, warm-up iterations of the league).
SETTINGS = {"K=10": (10, 3), "K=1": (1, 21)}


class Timers:
    """Seconds spent in wrapped calls since the last :meth:`take`."""

    def __init__(self) -> None:
        self.spent: dict[str, float] = {}

    def wrap(self, name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        def timed(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.spent[name] = self.spent.get(name, 0.0) + time.perf_counter() - start
        return timed

    def take(self) -> dict[str, float]:
        spent, self.spent = self.spent, {}
        return spent


def instrumented(variant: str, every: int) -> tuple[Any, Timers]:
    """The variant's algorithm with its sampling, learning and league step timed."""
    args = argparse.Namespace(snapshot_every=every, max_snapshots=20, league_opponents=["random_legal"])
    algo = build(variant, 0, args)
    timers = Timers()
    group = algo.env_runner_group
    group.sample = timers.wrap("sample", group.sample)
    algo.learn = timers.wrap("learn", algo.learn)
    if algo.league is not None:
        algo.league.end_iteration = timers.wrap("league", algo.league.end_iteration)
    return algo, timers


def turn(algo: Any, timers: Timers, iters: int) -> dict[str, Any]:
    """Train ``iters`` iterations: env steps, wall and CPU seconds, and the split."""
    timers.take()
    before = algo.counters["num_env_steps_sampled_lifetime"]
    start, cpu = time.perf_counter(), time.process_time()
    result: dict[str, Any] = {}
    for _ in range(iters):
        result = algo.train()
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu
    steps = int(result["num_env_steps_sampled_lifetime"]) - before
    return {"steps": steps, "wall": wall, "cpu": cpu, **timers.take(),
            "pool": result.get("league", {}).get("pool_size"), "load": load_average()}


def measure(setting: str, args: argparse.Namespace) -> list[dict[str, Any]]:
    every, warmup = SETTINGS[setting]
    algos = {v: instrumented(v, every) for v in ("league", "selfplay")}
    for variant, (algo, _) in algos.items():
        for _ in range(warmup if variant == "league" else args.warmup):
            algo.train()
    rows = []
    for rep in range(args.reps):
        for variant in ("league", "selfplay"):
            algo, timers = algos[variant]
            row = {"setting": setting, "rep": rep, "variant": variant, **turn(algo, timers, args.iters)}
            print(row, flush=True)
            rows.append(row)
    for algo, _ in algos.values():
        algo.stop()
    return rows


def per_iter_ms(row: dict[str, Any], key: str, iters: int) -> str:
    return fmt(1000 * row.get(key, 0.0) / iters, 0)


def report(rows: list[dict[str, Any]], args: argparse.Namespace) -> list[str]:
    summary, detail = [], []
    for setting in dict.fromkeys(r["setting"] for r in rows):
        league = [r for r in rows if r["setting"] == setting and r["variant"] == "league"]
        selfplay = [r for r in rows if r["setting"] == setting and r["variant"] == "selfplay"]
        wall = [(a["steps"] / a["wall"]) / (b["steps"] / b["wall"]) for a, b in zip(league, selfplay)]
        cpu = [(a["steps"] / a["cpu"]) / (b["steps"] / b["cpu"]) for a, b in zip(league, selfplay)]
        summary.append([setting, fmt(median(a["steps"] / a["wall"] for a in league), 0),
                        fmt(median(b["steps"] / b["wall"] for b in selfplay), 0), f"{median(wall):.2f}x",
                        f"{median(cpu):.2f}x", "yes" if median(cpu) >= TARGET else "no",
                        ", ".join(f"{x:.2f}" for x in wall)])
        for r in [*league, *selfplay]:
            detail.append([setting, r["rep"], r["variant"], f"{r['steps']:,}", fmt(r["wall"], 1),
                           fmt(r["cpu"], 1), fmt(r["steps"] / r["wall"], 0), fmt(r["steps"] / r["cpu"], 0),
                           per_iter_ms(r, "sample", args.iters), per_iter_ms(r, "learn", args.iters),
                           per_iter_ms(r, "league", args.iters), "-" if r["pool"] is None else r["pool"],
                           r["load"]])
    return [
        "# League PPO vs plain self-play: env steps/s of training on connect_four_v3",
        "",
        f"Command: `{command_line()}`",
        "",
        *machine_lines([cairn_code_line()]),
        f"- Settings: `league_connect_four.py`'s build (PPO, connect_four_selfplay.py's SETTINGS: 8 env "
        "copies, batch 4096, [256, 256] tanh, 1 torch thread), seed 0; league: snapshot every K iterations, "
        "max_snapshots 20, PFSP, self_play_fraction 0.2, random_legal as fixed opponent. "
        f"Warm-up: self-play {args.warmup} iterations, league "
        f"{', '.join(f'{s}: {w}' for s, (_, w) in SETTINGS.items())} "
        f"(K=1 fills the pool); then {args.reps} turns each of {args.iters} iterations, league first, "
        "interleaved.",
        "",
        f"Ratio: league over self-play per pair of turns, median (goal >= {TARGET}x). met? reads the "
        "CPU-time ratio (env steps per CPU second of the process: both variants run 1 torch thread and "
        "single-threaded BLAS, so on a quiet machine wall and CPU time agree; on this shared one the wall "
        "time of a turn depends mostly on the other jobs).",
        "",
        *table(["setting", "league env steps/s", "self-play env steps/s", "ratio (wall)", "ratio (CPU)",
                "met?", "per-turn ratios (wall)"], summary),
        "",
        "Every turn (sample / learn / league: ms per iteration inside the env runners' sample, the "
        "learners and the league's end_iteration; pool: snapshots at the turn's end):",
        "",
        *table(["setting", "rep", "variant", "env steps", "wall s", "CPU s", "steps/s (wall)", "steps/CPU s",
                "sample ms", "learn ms", "league ms", "pool", "load"], detail),
        "",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--settings", nargs="*", default=["K=10", "K=1"], choices=["K=10", "K=1"])
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--iters", type=int, default=10, help="iterations per timed turn")
    parser.add_argument("--warmup", type=int, default=3, help="self-play's warm-up iterations")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--out", type=Path, default=REPO / "bench/results/league_speed.md")
    args = parser.parse_args()
    if args.quick:
        args.reps, args.iters, args.warmup = 1, 1, 1
        SETTINGS.update({s: (every, min(warmup, 2)) for s, (every, warmup) in SETTINGS.items()})
    from pettingzoo.utils.env_logger import EnvLogger

    EnvLogger.suppress_output()
    rows = [row for setting in args.settings for row in measure(setting, args)]
    lines = report(rows, args)
    print("\n".join(lines))
    write_report(None if args.quick else args.out, lines)


if __name__ == "__main__":
    main()
