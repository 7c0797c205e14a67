"""PPO self-play on PettingZoo's connect_four_v3, then games against a uniformly random player.

One shared policy plays both sides (``policy_mapping_fn`` maps player_0 and player_1 to
"shared"); the observation is PettingZoo's ``{"observation": 6x7x2, "action_mask": 7}`` dict, so
cairn masks illegal columns by itself (no flag). Training runs until a stated budget of env
steps (one env step = one move) and is timed alone; every ``--eval-every`` steps (outside the
timed loop) and at the end, the policy plays ``--games`` games against a player that picks a
uniformly random legal column, half of them moving first and half second, greedy
(``explore=False``) and sampled (``explore=True``). A move is counted illegal when the action
mask PettingZoo gave for it has a 0 at the chosen column (PettingZoo's TerminateIllegalWrapper
would end the game; the count must be 0).

    .venv/bin/python bench/connect_four_selfplay.py                 # the stated budget
    .venv/bin/python bench/connect_four_selfplay.py --quick         # smoke: 8,192 steps
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

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

TARGET_WIN_RATE = 0.9
SETTINGS = dict(
    num_envs_per_env_runner=8, train_batch_size=4096, minibatch_size=512, num_epochs=4, lr=3e-4,
    gamma=0.99, lambda_=0.95, clip_param=0.2, entropy_coeff=0.01, vf_coeff=0.5, grad_clip=0.5,
    hidden=[256, 256], activation="tanh", torch_num_threads=1,
)


def make_connect_four(env_config: dict[str, Any]) -> Any:
    from pettingzoo.classic import connect_four_v3

    return connect_four_v3.env()


def ppo_config(seed: int, s: dict[str, Any], env: Any, env_config: dict[str, Any] | None = None) -> Any:
    """The PPO config of these settings on ``env`` (no multi-agent section: the caller's)."""
    import cairn

    return (
        cairn.PPOConfig()
        .environment(env, env_config=env_config or {})
        .env_runners(num_envs_per_env_runner=s["num_envs_per_env_runner"])
        .training(train_batch_size=s["train_batch_size"], minibatch_size=s["minibatch_size"],
                  num_epochs=s["num_epochs"], lr=s["lr"], gamma=s["gamma"], lambda_=s["lambda_"],
                  clip_param=s["clip_param"], entropy_coeff=s["entropy_coeff"],
                  vf_coeff=s["vf_coeff"], grad_clip=s["grad_clip"],
                  model={"hidden": s["hidden"], "activation": s["activation"]})
        .resources(torch_num_threads=s["torch_num_threads"])
        .debugging(seed=seed)
    )


def build(seed: int, s: dict[str, Any]) -> Any:
    return (
        ppo_config(seed, s, make_connect_four)
        .multi_agent(policies={"shared"},
                     policy_mapping_fn={"player_0": "shared", "player_1": "shared"})
        .build()
    )


def play_vs_random(policy: Any, games: int, *, explore: bool, seed: int) -> dict[str, Any]:
    """``games`` games of ``policy`` against a uniformly random legal player; the policy moves
    first in the even-numbered games. Returns wins/draws/losses, illegal moves, moves."""
    from pettingzoo.classic import connect_four_v3

    rng = np.random.default_rng(seed)
    env = connect_four_v3.env()
    out = {"wins": 0, "draws": 0, "losses": 0, "illegal": 0, "policy_moves": 0,
           "first": [0, 0], "second": [0, 0]}  # [wins, games]
    for game in range(games):
        env.reset(seed=seed + game)
        me = env.possible_agents[game % 2]
        total = 0.0
        for agent in env.agent_iter():
            obs, reward, terminated, truncated, _ = env.last()
            if agent == me:
                total += reward
            if terminated or truncated:
                env.step(None)
                continue
            mask = obs["action_mask"]
            if agent == me:
                action = int(policy.compute_single_action(obs, explore=explore))
                out["policy_moves"] += 1
                out["illegal"] += int(mask[action] == 0)
            else:
                action = int(rng.choice(np.flatnonzero(mask)))
            env.step(action)
        key = "first" if game % 2 == 0 else "second"
        out[key][1] += 1
        if total > 0:
            out["wins"] += 1
            out[key][0] += 1
        elif total < 0:
            out["losses"] += 1
        else:
            out["draws"] += 1
    env.close()
    out["games"] = games
    out["win_rate"] = out["wins"] / games
    return out


def evaluate(algo: Any, games: int, seed: int) -> dict[str, dict[str, Any]]:
    policy = algo.get_policy("shared")
    return {"greedy": play_vs_random(policy, games, explore=False, seed=seed),
            "sampled": play_vs_random(policy, games, explore=True, seed=seed + 1_000_000)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200_000, help="env-step budget (moves)")
    parser.add_argument("--eval-every", type=int, default=40_960)
    parser.add_argument("--games", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--set", action="append", default=[], metavar="KEY=JSON",
                        help="override a setting, e.g. --set lr=3e-4 --set hidden=[128,128]")
    args = parser.parse_args()
    for item in args.set:
        key, value = item.split("=", 1)
        if key not in SETTINGS:
            parser.error(f"unknown setting {key!r}; settings: {sorted(SETTINGS)}")
        SETTINGS[key] = json.loads(value)
    if args.quick:
        args.steps, args.eval_every, args.games = 8_192, 4_096, 20
    out_path = args.out or (None if args.quick else REPO / "bench/results/connect_four_selfplay.md")

    from pettingzoo.utils.env_logger import EnvLogger

    EnvLogger.suppress_output()
    load_before = load_average()
    algo = build(args.seed, SETTINGS)
    train_s, sampled, next_eval = 0.0, 0, args.eval_every
    s_batch = int(SETTINGS["train_batch_size"])
    curve: list[dict[str, Any]] = []
    iters: list[dict[str, Any]] = []
    while sampled < args.steps:
        start = time.perf_counter()
        result = algo.train()
        train_s += time.perf_counter() - start
        sampled = int(result["num_env_steps_sampled_lifetime"])
        iters.append({"steps": sampled, "s": time.perf_counter() - start,
                      "len": result.get("episode_len_mean")})
        if sampled >= next_eval or sampled >= args.steps:
            next_eval += args.eval_every
            ev = evaluate(algo, args.games, seed=10_000 + sampled)
            curve.append({"steps": sampled, "train_s": train_s, "load": load_average(), **ev})
            g, sm = ev["greedy"], ev["sampled"]
            recent = iters[-max(1, args.eval_every // s_batch):]
            print(f"   iteration s: {[round(i['s'], 2) for i in recent]}", flush=True)
            print(f"{sampled:>8,} steps {train_s:7.1f} s train ({sampled / train_s:,.0f} steps/s) "
                  f"greedy win {g['win_rate']:.3f} (illegal {g['illegal']}), sampled win "
                  f"{sm['win_rate']:.3f} (illegal {sm['illegal']}), episode len "
                  f"{result.get('episode_len_mean')}, load {load_average()}", flush=True)
    algo.stop()
    load_after = load_average()

    final = curve[-1]
    first_hit = next((c for c in curve if c["greedy"]["win_rate"] >= TARGET_WIN_RATE), None)
    met = final["greedy"]["win_rate"] >= TARGET_WIN_RATE and all(
        c[k]["illegal"] == 0 for c in curve for k in ("greedy", "sampled"))
    yes = {True: "**met**", False: "**MISSED**"}
    hit_text = (f"{first_hit['steps']:,} steps, {first_hit['train_s']:.1f} s of training"
                if first_hit else "none")
    s = SETTINGS
    lines = [
        "# PPO self-play on connect_four_v3 vs a uniformly random legal player",
        "",
        f"Command: `{command_line()}`",
        "",
        *machine_lines([cairn_code_line(),
                        f"- Load average (1 min) before / after: {load_before} / {load_after}; "
                        f"OPENBLAS_NUM_THREADS={os.environ.get('OPENBLAS_NUM_THREADS', 'unset')} "
                        "(numpy's BLAS threads: the acting path's matrix products)"]),
        "",
        "Settings: one shared policy for player_0 and player_1 (self-play), action mask from "
        f"PettingZoo's observation dict; {s['num_envs_per_env_runner']} env copies, train batch "
        f"{s['train_batch_size']}, minibatch {s['minibatch_size']}, {s['num_epochs']} epochs, "
        f"lr {s['lr']}, gamma {s['gamma']}, GAE {s['lambda_']}, clip {s['clip_param']}, entropy "
        f"{s['entropy_coeff']}, vf coeff {s['vf_coeff']}, grad clip {s['grad_clip']}, separate "
        f"{s['hidden']} {s['activation']} actor and critic on the flattened 6x7x2 board, "
        f"{s['torch_num_threads']} torch thread; seed {args.seed}; budget {args.steps:,} env "
        "steps (moves of either player).",
        "",
        f"Each evaluation: {args.games} games against a uniformly random legal player, the "
        "policy first in half, second in half; greedy = `explore=False`, sampled = "
        "`explore=True`. Illegal = moves whose action-mask bit was 0. Training wall time "
        "excludes the evaluations.",
        "",
        f"Seconds per training iteration: median {median(i['s'] for i in iters):.2f}, min "
        f"{min(i['s'] for i in iters):.2f}, max {max(i['s'] for i in iters):.2f} "
        f"({len(iters)} iterations).",
        "",
        *table(
            ["env steps", "train wall s", "env steps/s", "greedy win rate (first / second)",
             "greedy draws / losses", "sampled win rate", "illegal moves (greedy + sampled)",
             "load"],
            [[f"{c['steps']:,}", fmt(c["train_s"], 1), fmt(c["steps"] / c["train_s"], 0),
              f"{c['greedy']['win_rate']:.3f} ({c['greedy']['first'][0]}/{c['greedy']['first'][1]}"
              f" / {c['greedy']['second'][0]}/{c['greedy']['second'][1]})",
              f"{c['greedy']['draws']} / {c['greedy']['losses']}",
              f"{c['sampled']['win_rate']:.3f}",
              f"{c['greedy']['illegal']} + {c['sampled']['illegal']} of "
              f"{c['greedy']['policy_moves'] + c['sampled']['policy_moves']:,}",
              c["load"]] for c in curve],
        ),
        "",
        f"Goal: greedy win rate >= {TARGET_WIN_RATE} within {args.steps:,} env steps, 0 illegal "
        f"moves: {yes[met]} (final greedy {final['greedy']['win_rate']:.3f}, sampled "
        f"{final['sampled']['win_rate']:.3f}; first evaluation at or above the goal: "
        f"{hit_text}).",
        "",
    ]
    print("\n".join(lines))
    write_report(out_path, lines)


if __name__ == "__main__":
    main()
