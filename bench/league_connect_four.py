"""League PPO against plain self-play on PettingZoo's connect_four_v3, at one env-step budget.

Both variants train the same PPO (``connect_four_selfplay.py``'s settings: 8 env copies, batch
4096, [256, 256] tanh actor and critic) for ``--steps`` env steps (one env step = one move of
either player, ``num_env_steps_sampled_lifetime``):

* ``selfplay``: one shared policy plays both seats (``policy_mapping_fn``);
* ``league``: ``config.league(...)``: main trains against frozen snapshots of itself (one every
  ``--snapshot-every`` iterations, at most ``--max-snapshots``), drawn per game by PFSP, against
  itself in a fifth of the games, and against the fixed opponents of ``--league-opponents``
  (default: ``random_legal`` only, as ``cairn train --league``).

Every ``--eval-every`` steps (outside the timed training) main plays ``--games`` greedy games
(``cairn.league.play_games``: first in half, second in half) against the shipped heuristic
(``cairn.envs.connect_four:connect_four_heuristic``: win if it can, else block, else random legal)
and against a uniformly random legal player; illegal moves are counted. Each evaluation is one
JSON line appended to ``--jsonl``; ``report`` turns the lines of every run into a markdown table.

    .venv/bin/python bench/league_connect_four.py run --variant league --seed 0 --steps 1000000
    .venv/bin/python bench/league_connect_four.py run --variant selfplay --seed 0 --steps 1000000
    .venv/bin/python bench/league_connect_four.py report     # -> bench/results/league_connect_four.md
    .venv/bin/python bench/league_connect_four.py run --variant league --quick   # smoke test
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _util import REPO, cairn_code_line, command_line, fmt, load_average, machine_lines, table, write_report
from connect_four_selfplay import SETTINGS, ppo_config

HEURISTIC = "cairn.envs.connect_four:connect_four_heuristic"
ENV_CONFIG = {"env_module": "pettingzoo.classic.connect_four_v3"}
GOALS = {"heuristic": 0.7, "random_legal": 0.95}
JSONL = REPO / "bench/results/league_connect_four.jsonl"


def build(variant: str, seed: int, args: argparse.Namespace) -> Any:
    from cairn.envs.pettingzoo_env import make_pettingzoo_env

    config = ppo_config(seed, SETTINGS, make_pettingzoo_env, ENV_CONFIG)
    if variant == "selfplay":
        config = config.multi_agent(policies={"main"},
                                    policy_mapping_fn={"player_0": "main", "player_1": "main"})
    else:
        opponents = {name: ("random_legal" if name == "random_legal" else HEURISTIC)
                     for name in args.league_opponents}
        config = config.league(snapshot_every_iterations=args.snapshot_every,
                               max_snapshots=args.max_snapshots, matchmaking="pfsp",
                               self_play_fraction=0.2, opponents=opponents)
    return config.build()


def evaluate(algo: Any, games: int, seed: int) -> dict[str, dict[str, Any]]:
    from cairn.env_runner.make_env import create_env
    from cairn.env_runner.scripted_opponents import resolve_opponent
    from cairn.envs.pettingzoo_env import make_pettingzoo_env
    from cairn.league.games import play_games

    main = algo.get_policy("main")
    out = {}
    for name, spec in (("heuristic", HEURISTIC), ("random_legal", "random_legal")):
        r = play_games(lambda: create_env(make_pettingzoo_env, ENV_CONFIG), main, resolve_opponent(spec),
                       games=games, seed=seed)
        out[name] = {"win_rate": r.win_rate, "wins": r.wins, "draws": r.draws, "losses": r.losses,
                     "illegal_moves": r.illegal_moves}
    return out


def run(args: argparse.Namespace) -> None:
    from pettingzoo.utils.env_logger import EnvLogger

    EnvLogger.suppress_output()
    if args.quick:
        args.steps, args.eval_every, args.games = 8_192, 8_192, 10
    algo = build(args.variant, args.seed, args)
    train_s, steps, next_eval = 0.0, 0, args.eval_every
    while steps < args.steps:
        start = time.perf_counter()
        result = algo.train()
        train_s += time.perf_counter() - start
        steps = int(result["num_env_steps_sampled_lifetime"])
        if steps >= next_eval or steps >= args.steps:
            next_eval += args.eval_every
            variant = args.variant if args.variant == "selfplay" else (
                f"league (fixed: {', '.join(args.league_opponents) or 'none'})")
            line = {"variant": variant, "seed": args.seed, "steps": steps, "budget": args.steps,
                    "train_s": round(train_s, 2), "iterations": int(result["training_iteration"]),
                    "load": load_average(), "eval": evaluate(algo, args.games, seed=10_000),
                    "pool_size": result.get("league", {}).get("pool_size"),
                    "rating_main": result.get("league", {}).get("rating", {}).get("main"),
                    "command": command_line(), "code": cairn_code_line()}
            print(json.dumps(line), flush=True)
            if not args.quick:
                with open(args.jsonl, "a") as f:
                    f.write(json.dumps(line) + "\n")
    algo.stop()


def report(args: argparse.Namespace) -> None:
    lines_in = [json.loads(x) for path in args.jsonl for x in path.read_text().splitlines() if x.strip()]
    rows = []
    for r in lines_in:
        h, rl = r["eval"]["heuristic"], r["eval"]["random_legal"]
        rows.append([r["variant"], r["seed"], f"{r['steps']:,}", fmt(r["train_s"], 0),
                     fmt(r["steps"] / r["train_s"], 0),
                     f"{h['win_rate']:.3f} ({h['wins']}-{h['draws']}-{h['losses']})",
                     f"{rl['win_rate']:.3f} ({rl['wins']}-{rl['draws']}-{rl['losses']})",
                     h["illegal_moves"] + rl["illegal_moves"],
                     "-" if r["pool_size"] is None else r["pool_size"], r["load"]])
    finals = {}
    for r in lines_in:
        if r["steps"] >= r["budget"]:
            finals[(r["variant"], r["seed"])] = r
    summary = []
    for (variant, seed), r in sorted(finals.items()):
        h, rl = r["eval"]["heuristic"]["win_rate"], r["eval"]["random_legal"]["win_rate"]
        illegal = sum(e["illegal_moves"] for e in r["eval"].values())
        summary.append(f"- {variant}, seed {seed}, {r['steps']:,} steps: vs heuristic {h:.3f} "
                       f"(goal {GOALS['heuristic']}: {'met' if h >= GOALS['heuristic'] else 'missed'}), "
                       f"vs random legal {rl:.3f} (goal {GOALS['random_legal']}: "
                       f"{'met' if rl >= GOALS['random_legal'] else 'missed'}), illegal moves {illegal}, "
                       f"{r['steps'] / r['train_s']:,.0f} env steps/s of training")
    speed = []
    for (variant, seed), r in sorted(finals.items()):
        plain = finals.get(("selfplay", seed))
        if variant.startswith("league") and plain and plain["budget"] == r["budget"] and (
                abs(plain["train_s"] - r["train_s"]) < 0.25 * plain["train_s"]):
            speed.append(f"- seed {seed}, {variant} / selfplay (run side by side, {r['steps']:,} steps): "
                         f"{(r['steps'] / r['train_s']) / (plain['steps'] / plain['train_s']):.2f}x")
    lines = [
        "# League PPO vs plain self-play on connect_four_v3",
        "",
        f"Command: `{command_line()}` over the JSON lines of "
        f"{', '.join(f'`{p.resolve().relative_to(REPO)}`' for p in args.jsonl)} "
        "(each run's command and code are in its lines).",
        "",
        *machine_lines([]),
        "",
        f"Settings: PPO with `connect_four_selfplay.py`'s settings ({SETTINGS}); league: "
        "`config.league(snapshot_every_iterations=10, max_snapshots=20, matchmaking=\"pfsp\", "
        "self_play_fraction=0.2, opponents=...)` with the fixed opponents the variant names (the "
        "variant with the heuristic trains against the opponent it is then measured against); "
        "selfplay: one policy in both seats. Runs of one budget started together and shared the "
        "machine.",
        "",
        "Each row: one evaluation, greedy games of main (first in half, second in half) against "
        "the shipped heuristic and a random legal player, as wins-draws-losses; steps/s is env "
        "steps over training wall time (evaluations excluded); load is the 1-minute load average "
        "(the machine is shared, so steps/s compares only runs that ran side by side).",
        "",
        *table(["variant", "seed", "env steps", "train s", "env steps/s", "vs heuristic",
                "vs random legal", "illegal", "pool", "load"], rows),
        "",
        "Final evaluations:",
        *summary,
        "",
        "League env steps/s over plain self-play's (final lines of runs that shared the machine):",
        *speed,
        "",
    ]
    print("\n".join(lines))
    write_report(args.out, lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("--variant", choices=["league", "selfplay"], required=True)
    r.add_argument("--seed", type=int, default=0)
    r.add_argument("--steps", type=int, default=1_000_000, help="env-step budget (moves)")
    r.add_argument("--eval-every", type=int, default=200_000)
    r.add_argument("--games", type=int, default=200)
    r.add_argument("--snapshot-every", type=int, default=10)
    r.add_argument("--max-snapshots", type=int, default=20)
    r.add_argument("--league-opponents", nargs="*", default=["random_legal"],
                   choices=["random_legal", "heuristic"])
    r.add_argument("--quick", action="store_true")
    r.add_argument("--jsonl", type=Path, default=JSONL)
    p = sub.add_parser("report")
    p.add_argument("--jsonl", type=Path, nargs="+", default=[JSONL])
    p.add_argument("--out", type=Path, default=REPO / "bench/results/league_connect_four.md")
    args = parser.parse_args()
    run(args) if args.cmd == "run" else report(args)


if __name__ == "__main__":
    main()
