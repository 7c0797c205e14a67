"""SAC and TD3: cairn against Stable-Baselines3 with the same config and seeds (``--algo``).

Config (both sides; ``--algo sac``, the default): SB3's SAC defaults as rl-zoo runs them on
MuJoCo (hyperparams/sac.yml, ``mujoco-defaults``: the defaults plus ``learning_starts: 10000``):
1 env, actor and twin critics 256x256 ReLU, Adam lr 3e-4 for actor, critics and alpha, replay
1e6, batch 256, one gradient step per env step, tau 0.005, gamma 0.99, alpha tuned from 1.0
towards -dim(A), uniformly random actions before learning starts. One torch thread on both sides.

``--algo td3``: SB3's TD3 defaults with rl-zoo's MuJoCo action noise (hyperparams/td3.yml,
``mujoco-defaults``): actor and twin critics 400x300 ReLU, Adam lr 1e-3, replay 1e6, batch 256,
one gradient step per env step, tau 0.005, gamma 0.99, policy_delay 2, target policy noise 0.2
clipped at 0.5, Gaussian action noise N(0, 0.1) in the [-1, 1] action scale (SB3's
``NormalActionNoise``), uniformly random actions before learning starts.

Two measurements:

``throughput``: env steps/s of short runs (``--steps``, learning from step 100, so that
nearly every step includes its gradient step), the libraries alternating run by run (and
the env order too); medians, over wall time and over the process's CPU time (on a machine
shared with other jobs the second is the steadier measure of what each library costs).

``paired``: the steadier form of the same measurement on a shared machine: both learners in
one process, advanced in alternating chunks after a warm-up, each round's ratio taken between
two chunks that ran back to back; medians over rounds, CPU time and wall time.

``learn``: one process holds both learners for one env and seed and advances them in
alternating chunks of ``--chunk`` env steps (so that at any time both have reached the same
step count and shared the same machine load), evaluating each after every chunk with
``--eval-episodes`` greedy episodes (the mean action; SB3's ``deterministic=True``). Each
point is appended to ``--log`` as one JSON line as soon as it exists, so a run stopped early
still reports how far it got. ``report`` turns the log(s) into the markdown table.

Needs Stable-Baselines3 and MuJoCo (``pip install -c constraints.txt "gymnasium[mujoco]"``);
run it in the bench virtualenv:

    .bench-venv/bin/python bench/sac_mujoco.py throughput [--algo td3] [--envs HalfCheetah-v5 Hopper-v5] \\
        [--steps 1000] [--reps 3] [--out bench/results/sac_mujoco_throughput.md]
    .bench-venv/bin/python bench/sac_mujoco.py paired [--algo td3] [--chunk 256] [--rounds 8] \\
        [--out bench/results/sac_mujoco_paired.md]
    nice -n 10 .bench-venv/bin/python bench/sac_mujoco.py learn [--algo td3] --env HalfCheetah-v5 --seed 0 \\
        [--steps 100000] [--chunk 10000] [--learning-starts 10000] --log bench/results/sac_mujoco_learn.jsonl
    .bench-venv/bin/python bench/sac_mujoco.py report --log bench/results/sac_mujoco_learn.jsonl
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch

import cairn

BUFFER, BATCH, TAU, GAMMA = 1_000_000, 256, 0.005, 0.99
# Per algorithm: learning rate and hidden layers (SB3's defaults for each).
LR = {"sac": 3e-4, "td3": 1e-3}
HIDDEN = {"sac": [256, 256], "td3": [400, 300]}
# TD3's own settings: SB3's TD3 defaults, and rl-zoo's action noise (SB3 adds none by default).
POLICY_DELAY, TARGET_NOISE, TARGET_CLIP, ACTION_NOISE = 2, 0.2, 0.5, 0.1
MUJOCO_STARTS = 10_000  # rl-zoo's mujoco-defaults (SAC and TD3)


def make_cairn(algo: str, env: str, seed: int, starts: int, train_batch_size: int = 1000) -> Any:
    config = cairn.SACConfig() if algo == "sac" else cairn.TD3Config().training(
        policy_delay=POLICY_DELAY, target_policy_noise=TARGET_NOISE, target_noise_clip=TARGET_CLIP,
        exploration_noise=ACTION_NOISE)
    config = (
        config
        .environment(env)
        .env_runners(num_env_runners=0, num_envs_per_env_runner=1)
        .training(lr=LR[algo], minibatch_size=BATCH, train_batch_size=train_batch_size, tau=TAU, gamma=GAMMA,
                  train_freq=1, gradient_steps=1, num_steps_sampled_before_learning_starts=starts,
                  replay_buffer_config={"type": "uniform", "capacity": BUFFER},
                  model={"hidden": HIDDEN[algo], "activation": "relu"})
        .resources(torch_num_threads=1)
        .debugging(seed=seed)
    )
    return config.build()


def make_sb3(algo: str, env: str, seed: int, starts: int) -> Any:
    common = dict(learning_rate=LR[algo], buffer_size=BUFFER, learning_starts=starts, batch_size=BATCH,
                  tau=TAU, gamma=GAMMA, train_freq=1, gradient_steps=1,
                  policy_kwargs={"net_arch": HIDDEN[algo]}, seed=seed, device="cpu", verbose=0)
    if algo == "sac":
        from stable_baselines3 import SAC

        return SAC("MlpPolicy", gym.make(env), ent_coef="auto", **common)
    from stable_baselines3 import TD3
    from stable_baselines3.common.noise import NormalActionNoise

    train_env = gym.make(env)
    size = train_env.action_space.shape[0]
    noise = NormalActionNoise(mean=np.zeros(size), sigma=ACTION_NOISE * np.ones(size))
    return TD3("MlpPolicy", train_env, action_noise=noise, policy_delay=POLICY_DELAY,
               target_policy_noise=TARGET_NOISE, target_noise_clip=TARGET_CLIP, **common)


def advance_cairn(algo: Any, until: int) -> None:
    while algo.counters["num_env_steps_sampled_lifetime"] < until:
        algo.train()


def advance_sb3(model: Any, until: int) -> None:
    model.learn(total_timesteps=until - model.num_timesteps, reset_num_timesteps=False)


def sampled(lib: str, learner: Any) -> int:
    """Env steps ``learner`` (a cairn Algorithm or an SB3 model) has sampled so far."""
    return learner.counters["num_env_steps_sampled_lifetime"] if lib == "cairn" else learner.num_timesteps


def advance_timed(lib: str, learner: Any, until: int) -> tuple[int, float, float]:
    """Advance ``learner`` to ``until`` env steps: (env steps taken, wall s, process CPU s)."""
    before = sampled(lib, learner)
    wall, cpu = time.perf_counter(), time.process_time()
    (advance_cairn if lib == "cairn" else advance_sb3)(learner, until)
    return sampled(lib, learner) - before, time.perf_counter() - wall, time.process_time() - cpu


def eval_sb3(model: Any, env: gym.Env, episodes: int) -> float:
    from stable_baselines3.common.evaluation import evaluate_policy

    mean, _ = evaluate_policy(model, env, n_eval_episodes=episodes, deterministic=True)
    return float(mean)


# ----------------------------------------------------------------------------- throughput
def throughput(args: argparse.Namespace) -> None:
    results: dict[tuple[str, str], list[float]] = {}
    cpu_results: dict[tuple[str, str], list[float]] = {}
    for rep in range(args.reps):
        order = ["sb3", "cairn"] if rep % 2 == 0 else ["cairn", "sb3"]
        for env in args.envs if rep % 2 == 0 else args.envs[::-1]:
            for lib in order:
                if lib == "cairn":
                    # One train() call of exactly --steps env steps: SB3 runs --steps too, so
                    # both take the same number of (cheap) random and (costly) learning steps.
                    algo = make_cairn(args.algo, env, rep, 100, train_batch_size=args.steps)
                    try:
                        steps, wall, cpu = advance_timed(lib, algo, args.steps)
                    finally:
                        algo.stop()
                else:
                    model = make_sb3(args.algo, env, rep, 100)
                    steps, wall, cpu = advance_timed(lib, model, args.steps)
                    model.get_env().close()
                results.setdefault((env, lib), []).append(steps / wall)
                cpu_results.setdefault((env, lib), []).append(steps / cpu)
                log_line(args.log, {"mode": "throughput", "algo": args.algo, "env": env, "lib": lib,
                                    "rep": rep, "steps": steps, "wall_s": wall, "cpu_s": cpu,
                                    "load_avg_1m": os.getloadavg()[0]})
    lines = [
        f"## Throughput (`bench/sac_mujoco.py throughput --algo {args.algo}`)",
        "",
        machine_line(),
        "",
        f"{args.steps} env steps per run (learning from step 100), {args.reps} runs each, "
        "libraries and envs alternating in order; medians.",
        "",
        "| env | library | env steps/s (median) | all runs | vs SB3 | steps per CPU s (median) "
        "| all runs | vs SB3 |",
        "|---|---|---:|---|---:|---:|---|---:|",
    ]
    name = args.algo.upper()
    for env in args.envs:
        base = statistics.median(results[(env, "sb3")])
        cpu_base = statistics.median(cpu_results[(env, "sb3")])
        for lib, label in (("sb3", f"Stable-Baselines3 {name}"), ("cairn", f"cairn {name}")):
            runs, cpu_runs = results[(env, lib)], cpu_results[(env, lib)]
            med, cpu_med = statistics.median(runs), statistics.median(cpu_runs)
            lines.append(f"| {env} | {label} | {med:,.1f} | {', '.join(f'{x:,.1f}' for x in runs)} "
                         f"| {med / base:.2f}x | {cpu_med:,.1f} | {', '.join(f'{x:,.1f}' for x in cpu_runs)} "
                         f"| {cpu_med / cpu_base:.2f}x |")
    table = "\n".join(lines) + "\n"
    print(table)
    if args.out:
        Path(args.out).write_text(table)


def paired(args: argparse.Namespace) -> None:
    """Both learners in one process, advanced in alternating chunks of --chunk env steps after
    a warm-up past learning_starts; each round's ratio compares two chunks that ran back to back
    under the same machine load."""
    lines = [
        f"## Paired throughput (`bench/sac_mujoco.py paired --algo {args.algo}`)",
        "",
        machine_line(),
        "",
        f"Both learners in one process, learning from step 100, warmed up to step {args.warmup}; then "
        f"{args.rounds} rounds of {args.chunk} env steps each (each with its gradient step), the "
        "library that goes first alternating; per-round ratios cairn/SB3 of env steps per second.",
        "",
        "| env | cairn CPU ms per env step (median) | SB3 CPU ms per env step (median) | ratio per CPU s "
        "(median of rounds) | all rounds | ratio wall (median) |",
        "|---|---:|---:|---:|---|---:|",
    ]
    for env in args.envs:
        learners = {"cairn": make_cairn(args.algo, env, 0, 100, train_batch_size=args.chunk),
                    "sb3": make_sb3(args.algo, env, 0, 100)}
        try:
            for lib, learner in learners.items():
                advance_timed(lib, learner, args.warmup)
            per_step: dict[str, list[tuple[float, float]]] = {"cairn": [], "sb3": []}
            for rnd in range(args.rounds):
                for lib in ("cairn", "sb3") if rnd % 2 == 0 else ("sb3", "cairn"):
                    learner = learners[lib]
                    steps, wall, cpu = advance_timed(lib, learner, sampled(lib, learner) + args.chunk)
                    per_step[lib].append((wall / steps, cpu / steps))
                    log_line(args.log, {"mode": "paired", "algo": args.algo, "env": env, "lib": lib,
                                        "round": rnd, "steps": steps, "wall_s": wall, "cpu_s": cpu,
                                        "load_avg_1m": os.getloadavg()[0]})
            cpu_ratios = [s[1] / c[1] for c, s in zip(per_step["cairn"], per_step["sb3"], strict=True)]
            wall_ratios = [s[0] / c[0] for c, s in zip(per_step["cairn"], per_step["sb3"], strict=True)]
            line = (f"| {env} | {statistics.median(c[1] for c in per_step['cairn']) * 1e3:.2f} "
                    f"| {statistics.median(s[1] for s in per_step['sb3']) * 1e3:.2f} "
                    f"| {statistics.median(cpu_ratios):.2f}x | {', '.join(f'{r:.2f}' for r in cpu_ratios)} "
                    f"| {statistics.median(wall_ratios):.2f}x |")
            print(line, flush=True)
            lines.append(line)
        finally:
            learners["cairn"].stop()
            learners["sb3"].get_env().close()
    table = "\n".join(lines) + "\n"
    print(table)
    if args.out:
        Path(args.out).write_text(table)


# -------------------------------------------------------------------------------- learning
def learn(args: argparse.Namespace) -> None:
    # train() samples train_batch_size env steps: one chunk, so that cairn stops at each mark
    # exactly as SB3 does (a chunk of 2500 with 1000-step iterations overshot by 500 steps).
    algo = make_cairn(args.algo, args.env, args.seed, args.learning_starts, train_batch_size=args.chunk)
    model = make_sb3(args.algo, args.env, args.seed, args.learning_starts)
    eval_env = gym.make(args.env)
    eval_env.reset(seed=10_000 + args.seed)
    clocks = {"cairn": [0.0, 0.0], "sb3": [0.0, 0.0]}  # wall s, process CPU s
    try:
        mark = 0
        while mark < args.steps:
            mark = min(mark + args.chunk, args.steps)
            row: dict[str, Any] = {"algo": args.algo, "env": args.env, "seed": args.seed, "steps": mark,
                                   "learning_starts": args.learning_starts}
            for lib in (("sb3", "cairn") if (mark // args.chunk) % 2 else ("cairn", "sb3")):
                _, wall, cpu = advance_timed(lib, algo if lib == "cairn" else model, mark)
                clocks[lib][0] += wall
                clocks[lib][1] += cpu
                if lib == "cairn":
                    ret = float(algo.evaluate(args.eval_episodes)["episode_return_mean"])
                else:
                    ret = eval_sb3(model, eval_env, args.eval_episodes)
                row[lib] = {"return": ret, "train_wall_s": clocks[lib][0], "train_cpu_s": clocks[lib][1],
                            "env_steps": sampled(lib, algo if lib == "cairn" else model)}
            row["load_avg_1m"] = os.getloadavg()[0]
            log_line(args.log, row)
    finally:
        algo.stop()
        eval_env.close()


def log_line(path: str | None, row: dict[str, Any]) -> None:
    """Print ``row`` as one JSON line and append it to ``path`` (if given) at once, so that a
    run stopped early still has every point it reached."""
    text = json.dumps(row)
    print(text, flush=True)
    if path:
        with Path(path).open("a") as fh:
            fh.write(text + "\n")


def report(args: argparse.Namespace) -> None:
    rows: dict[tuple[str, str, int], list[dict[str, Any]]] = {}
    for path in args.log:
        for line in Path(path).read_text().splitlines():
            row = json.loads(line)
            if row.get("mode", "learn") != "learn":
                continue
            # Logs written before --algo existed are SAC's.
            rows.setdefault((row.get("algo", "sac"), row["env"], row["seed"]), []).append(row)
    lines = [
        "## Learning (`bench/sac_mujoco.py learn`)",
        "",
        "Greedy mean return over the evaluation episodes after each chunk. Steps/s: the env "
        "steps since the first point (the random warm-up) over the training time they took "
        "(wall and process CPU, evaluation excluded).",
        "",
        "| algo | env | seed | env steps | cairn return | SB3 return | cairn steps/s (wall, CPU) "
        "| SB3 steps/s (wall, CPU) | vs SB3 (wall, CPU) |",
        "|---|---|---:|---:|---:|---:|---|---|---|",
    ]
    for (algo, env, seed), history in sorted(rows.items()):
        first = history[0]
        for row in history:
            c, s = row["cairn"], row["sb3"]
            head = f"| {algo} | {env} | {seed} | {row['steps']:,} | {c['return']:.1f} | {s['return']:.1f} "
            if row is first:
                lines.append(head + "| (warm-up) | (warm-up) | |")
                continue
            # Each side's own count where the log has it (older logs: the mark).
            nc, ns = (side.get("env_steps", row["steps"]) - start.get("env_steps", first["steps"])
                      for side, start in ((c, first["cairn"]), (s, first["sb3"])))
            cw = nc / (c["train_wall_s"] - first["cairn"]["train_wall_s"])
            cc = nc / (c["train_cpu_s"] - first["cairn"]["train_cpu_s"])
            sw = ns / (s["train_wall_s"] - first["sb3"]["train_wall_s"])
            sc = ns / (s["train_cpu_s"] - first["sb3"]["train_cpu_s"])
            lines.append(head + f"| {cw:.1f}, {cc:.1f} | {sw:.1f}, {sc:.1f} "
                         f"| {cw / sw:.2f}x, {cc / sc:.2f}x |")
    print("\n".join(lines))


def machine_line() -> str:
    import mujoco
    import stable_baselines3

    return (f"Machine: {os.cpu_count()} cores, shared with other jobs (timings vary run to run); "
            f"Python {platform.python_version()}, torch {torch.__version__}, numpy {np.__version__}, "
            f"gymnasium {gym.__version__}, mujoco {mujoco.__version__}, Stable-Baselines3 "
            f"{stable_baselines3.__version__}, cairn {cairn.__version__}; 1 torch thread; "
            f"load average at the end {', '.join(f'{x:.2f}' for x in os.getloadavg())}.")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="mode", required=True)
    algo = argparse.ArgumentParser(add_help=False)
    algo.add_argument("--algo", choices=sorted(LR), default="sac")
    p = sub.add_parser("throughput", parents=[algo])
    p.add_argument("--envs", nargs="+", default=["HalfCheetah-v5", "Hopper-v5"])
    p.add_argument("--steps", type=int, default=1000)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--out", default=None)
    p.add_argument("--log", default=None, help="append every run as one JSON line")
    p = sub.add_parser("paired", parents=[algo])
    p.add_argument("--envs", nargs="+", default=["HalfCheetah-v5", "Hopper-v5"])
    p.add_argument("--warmup", type=int, default=300)
    p.add_argument("--chunk", type=int, default=BATCH,
                   help="env steps per round and library; "
                        "at least the minibatch size (cairn's train_batch_size)")
    p.add_argument("--rounds", type=int, default=8)
    p.add_argument("--out", default=None)
    p.add_argument("--log", default=None, help="append every round as one JSON line")
    p = sub.add_parser("learn", parents=[algo])
    p.add_argument("--env", default="HalfCheetah-v5")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--steps", type=int, default=100_000)
    p.add_argument("--chunk", type=int, default=10_000,
                   help="env steps between evaluations; at least the minibatch size")
    p.add_argument("--eval-episodes", type=int, default=5)
    p.add_argument("--learning-starts", type=int, default=MUJOCO_STARTS,
                   help="random-action steps before learning (both libraries)")
    p.add_argument("--log", required=True)
    p = sub.add_parser("report")
    p.add_argument("--log", nargs="+", required=True)
    args = parser.parse_args()
    torch.set_num_threads(1)
    {"throughput": throughput, "paired": paired, "learn": learn, "report": report}[args.mode](args)


if __name__ == "__main__":
    main()
