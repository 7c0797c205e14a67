"""SAC env steps per second: cairn against Stable-Baselines3, same Pendulum config, side by side.

Config (both): Pendulum-v1, 1 env, actor and twin critics 256x256 ReLU, Adam lr 3e-4 for
actor, critics and alpha, replay 1e6, learning starts at 100 steps (uniformly random actions
before), one gradient step of 256 transitions per env step, tau 0.005, gamma 0.99, alpha
tuned from 1.0 towards -dim(A). Both run with one torch thread on the CPU. Runs alternate;
the table reports medians.

Needs Stable-Baselines3, which cairn does not depend on; run it in the bench virtualenv:

    .bench-venv/bin/python bench/sac_throughput.py [--steps 3000] [--reps 3] \\
        [--out bench/results/sac_throughput.md]
"""

from __future__ import annotations

import argparse
import functools
import os
import platform
import statistics
import time
from pathlib import Path

import gymnasium as gym
import numpy as np
import torch

import cairn

LR, BUFFER, STARTS, BATCH, TAU, GAMMA, HIDDEN = 3e-4, 1_000_000, 100, 256, 0.005, 0.99, [256, 256]


def run_cairn(steps: int, seed: int) -> tuple[float, float]:
    config = (
        cairn.SACConfig()
        .environment("Pendulum-v1")
        .env_runners(num_env_runners=0, num_envs_per_env_runner=1)
        # One train() call of exactly `steps` env steps, as many as SB3 runs (train_batch_size
        # 1000 ran 2,000 steps against SB3's 1,100, a larger share of them learning steps).
        .training(lr=LR, minibatch_size=BATCH, train_batch_size=steps, tau=TAU, gamma=GAMMA,
                  train_freq=1, gradient_steps=1, num_steps_sampled_before_learning_starts=STARTS,
                  replay_buffer_config={"type": "uniform", "capacity": BUFFER},
                  model={"hidden": HIDDEN, "activation": "relu"})
        .resources(torch_num_threads=1)
        .debugging(seed=seed)
    )
    algo = config.build()
    try:
        start, cpu = time.perf_counter(), time.process_time()
        while algo.counters["num_env_steps_sampled_lifetime"] < steps:
            algo.train()
        elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu
        done = algo.counters["num_env_steps_sampled_lifetime"]
        return done / elapsed, done / cpu
    finally:
        algo.stop()


def run_sb3(steps: int, seed: int) -> tuple[float, float]:
    from stable_baselines3 import SAC

    env = gym.make("Pendulum-v1")
    model = SAC(
        "MlpPolicy", env, learning_rate=LR, buffer_size=BUFFER, learning_starts=STARTS,
        batch_size=BATCH, tau=TAU, gamma=GAMMA, train_freq=1, gradient_steps=1,
        ent_coef="auto", policy_kwargs={"net_arch": HIDDEN}, seed=seed, device="cpu", verbose=0,
    )
    start, cpu = time.perf_counter(), time.process_time()
    model.learn(total_timesteps=steps)
    elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu
    env.close()
    return steps / elapsed, steps / cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=3000)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    torch.set_num_threads(1)
    results: dict[str, list[float]] = {"sb3": [], "cairn": []}
    cpu_results: dict[str, list[float]] = {"sb3": [], "cairn": []}
    for rep in range(args.reps):
        runs = [("sb3", functools.partial(run_sb3, args.steps, rep)),
                ("cairn", functools.partial(run_cairn, args.steps, rep))]
        for name, fn in runs if rep % 2 == 0 else runs[::-1]:
            wall, cpu = fn()
            results[name].append(wall)
            cpu_results[name].append(cpu)
            print(f"rep {rep} {name}: {wall:.1f} env steps/s, {cpu:.1f} per CPU s", flush=True)
    table = render(results, cpu_results, args)
    print(table)
    if args.out:
        Path(args.out).write_text(table)


def render(
    results: dict[str, list[float]], cpu_results: dict[str, list[float]], args: argparse.Namespace
) -> str:
    import stable_baselines3

    med = {k: statistics.median(v) for k, v in results.items()}
    cpu_med = {k: statistics.median(v) for k, v in cpu_results.items()}
    lines = [
        "# SAC throughput (`bench/sac_throughput.py`)",
        "",
        f"Machine: {os.cpu_count()} cores, shared with other jobs (timings vary run to run); "
        f"Python {platform.python_version()}, torch {torch.__version__}, numpy {np.__version__}, "
        f"gymnasium {gym.__version__}, Stable-Baselines3 {stable_baselines3.__version__}, "
        f"cairn {cairn.__version__}.",
        "",
        f"{args.steps} env steps per run (learning from step {STARTS}), {args.reps} runs each, "
        "alternating order; medians, over wall time and over the process's CPU time (on a "
        "machine shared with other jobs the second is the steadier measure). Same config on both "
        "sides (see the script's docstring): Pendulum-v1, 1 env, 256x256 ReLU actor and twin "
        "critics, batch 256 every step, 1 torch thread.",
        "",
        "| library | env steps/s (median) | all runs | vs SB3 "
        "| steps per CPU s (median) | all runs | vs SB3 |",
        "|---|---:|---|---:|---:|---|---:|",
    ]
    names = {"sb3": "Stable-Baselines3 SAC", "cairn": "cairn SAC"}
    for key, label in names.items():
        lines.append(f"| {label} | {med[key]:,.1f} | {', '.join(f'{x:,.1f}' for x in results[key])} | "
                     f"{med[key] / med['sb3']:.2f}x | {cpu_med[key]:,.1f} | "
                     f"{', '.join(f'{x:,.1f}' for x in cpu_results[key])} | "
                     f"{cpu_med[key] / cpu_med['sb3']:.2f}x |")
    lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
