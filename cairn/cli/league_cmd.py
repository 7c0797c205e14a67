"""``cairn league RUN_OR_CHECKPOINT``: the league a checkpoint holds (docs/league.md): the
rating table and main's payoff row against each opponent, read from the algorithm state alone
(no policy file is read, nothing is built)."""

from __future__ import annotations

import argparse
import json
from typing import Any

from cairn.cli.common import UsageError, json_safe

__all__ = ["add_parser", "league_table", "run"]


def add_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    """Add ``cairn league``."""
    p = sub.add_parser("league", parents=[common], help="ratings and payoff of a league checkpoint",
                       description="Print the rating table and the payoff matrix (main's wins, draws and "
                                   "losses against each opponent) of a checkpoint of a league run, or of "
                                   "the latest checkpoint of a run directory.")
    p.add_argument("checkpoint", metavar="RUN_OR_CHECKPOINT")
    p.add_argument("--json", action="store_true", help="the table as one JSON document")
    p.set_defaults(run=run)


def league_table(checkpoint: str) -> dict[str, Any]:
    """``{"checkpoint", "iteration", "main", "pool", "games", "self_play_games", "ratings":
    {participant: {"mu", "sigma"}}, "payoff": {opponent: {"wins", "draws", "losses",
    "win_rate"}}}`` of ``checkpoint`` (a run directory: its latest checkpoint)."""
    from cairn.checkpoint import load_algorithm_state
    from cairn.cli.run_checkpoints import checkpoint_or_latest_of_run

    path = checkpoint_or_latest_of_run(checkpoint)
    state = load_algorithm_state(path, policy_ids=[])
    league = state.get("league")
    settings = (state.get("config") or {}).get("league_config")
    if league is None or settings is None:
        raise UsageError(f"{path} holds no league: it was trained without config.league(...) "
                         "(or cairn train --league).")
    recent = league["payoff"]["recent"]
    payoff = {}
    for opponent, (wins, draws, losses) in league["payoff"]["table"].items():
        scores = recent.get(opponent) or []
        payoff[opponent] = {"wins": wins, "draws": draws, "losses": losses,
                            "win_rate": sum(scores) / len(scores) if scores else float("nan")}
    return {"checkpoint": path, "iteration": state["iteration"], "main": settings["main"],
            "pool": league["pool"], "games": league["games"], "self_play_games": league["self_play_games"],
            "ratings": {p: {"mu": r[0], "sigma": r[1]} for p, r in league["ratings"].items()},
            "payoff": payoff}


def run(args: argparse.Namespace) -> int:
    """Run ``cairn league``."""
    table = league_table(args.checkpoint)
    if args.json:
        print(json.dumps(json_safe(table), indent=2))
        return 0
    print(f"{table['checkpoint']}: iteration {table['iteration']}, {table['games']} games "
          f"({table['self_play_games']} self-play), pool {', '.join(table['pool']) or '(empty)'}")
    print(f"{'rating':<24} {'mu':>8} {'sigma':>8}")
    for pid, r in sorted(table["ratings"].items(), key=lambda item: -item[1]["mu"]):
        print(f"{pid:<24} {r['mu']:8.2f} {r['sigma']:8.2f}")
    print(f"{table['main'] + ' against':<24} {'wins':>6} {'draws':>6} {'losses':>6} {'win rate':>9}")
    for opponent, row in table["payoff"].items():
        print(f"{opponent:<24} {row['wins']:6d} {row['draws']:6d} {row['losses']:6d} {row['win_rate']:9.2f}")
    return 0
