"""DQN env steps per second: cairn against Stable-Baselines3, same CartPole config, side by side.

Config (both): CartPole-v1, 1 env, MLP 64x64 ReLU, plain DQN heads (no double Q, no dueling,
as SB3's DQN has neither), Adam lr 5e-4, replay 50k, learning starts at 1000 steps, one
gradient update of 64 transitions every 4 env steps, target sync every 500 steps, epsilon
1.0 -> 0.05 over 10k steps, grad-norm clip 10, gamma 0.99, Huber loss. Both run with one torch
thread (the faster setting for such small networks on this machine). cairn is also timed with
its defaults of double Q + dueling, and with ``update_backend="torch"`` (autograd and
torch.optim.Adam instead of the numpy update that ``"auto"`` picks for this network). Runs
alternate; the table reports medians.

Needs Stable-Baselines3, which cairn does not depend on; run it in the bench virtualenv:

    .bench-venv/bin/python bench/dqn_throughput.py [--steps 20000] [--reps 3] \\
        [--out bench/results/dqn_throughput.md]
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

LR, BUFFER, STARTS, BATCH, TRAIN_FREQ, TARGET, EPS_STEPS, CLIP = 5e-4, 50_000, 1000, 64, 4, 500, 10_000, 10.0


def run_cairn(steps: int, seed: int, *, double_dueling: bool, update_backend: str = "auto") -> float:
    config = (
        cairn.DQNConfig()
        .environment("CartPole-v1")
        .env_runners(num_env_runners=0, num_envs_per_env_runner=1, rollout_fragment_length=TRAIN_FREQ)
        # One update of BATCH transitions per TRAIN_FREQ env steps, as SB3's train_freq=4,
        # gradient_steps=1: a replay ratio of BATCH / TRAIN_FREQ replayed per sampled step.
        .training(lr=LR, minibatch_size=BATCH, train_batch_size=1000, grad_clip=CLIP,
                  training_intensity=BATCH / TRAIN_FREQ,
                  replay_buffer_config={"type": "uniform", "capacity": BUFFER},
                  num_steps_sampled_before_learning_starts=STARTS, target_network_update_freq=TARGET,
                  epsilon=[[0, 1.0], [EPS_STEPS, 0.05]], double_q=double_dueling,
                  dueling=double_dueling, model={"hidden": [64, 64], "activation": "relu"},
                  update_backend=update_backend)
        .resources(torch_num_threads=1)
        .debugging(seed=seed)
    )
    algo = config.build()
    try:
        start = time.perf_counter()
        while algo.counters["num_env_steps_sampled_lifetime"] < steps:
            result = algo.train()
        elapsed = time.perf_counter() - start
        ran = result["learners"]["default_policy"]["update_backend"]
        if update_backend != "auto" and ran != update_backend:
            raise RuntimeError(f"asked for update_backend={update_backend!r}, {ran!r} ran")
        return algo.counters["num_env_steps_sampled_lifetime"] / elapsed
    finally:
        algo.stop()


def run_sb3(steps: int, seed: int) -> float:
    from stable_baselines3 import DQN

    env = gym.make("CartPole-v1")
    model = DQN(
        "MlpPolicy", env, learning_rate=LR, buffer_size=BUFFER, learning_starts=STARTS,
        batch_size=BATCH, gamma=0.99, train_freq=TRAIN_FREQ, gradient_steps=1,
        target_update_interval=TARGET, exploration_fraction=EPS_STEPS / steps,
        exploration_initial_eps=1.0, exploration_final_eps=0.05, max_grad_norm=CLIP,
        policy_kwargs={"net_arch": [64, 64], "activation_fn": torch.nn.ReLU},
        seed=seed, device="cpu", verbose=0,
    )
    start = time.perf_counter()
    model.learn(total_timesteps=steps)
    elapsed = time.perf_counter() - start
    env.close()
    return steps / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=20_000)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    torch.set_num_threads(1)
    results: dict[str, list[float]] = {"sb3": [], "cairn": [], "cairn_double_dueling": [], "cairn_torch": []}
    for rep in range(args.reps):
        runs = [("sb3", functools.partial(run_sb3, args.steps, rep)),
                ("cairn", functools.partial(run_cairn, args.steps, rep, double_dueling=False)),
                ("cairn_double_dueling", functools.partial(run_cairn, args.steps, rep, double_dueling=True)),
                ("cairn_torch", functools.partial(run_cairn, args.steps, rep, double_dueling=False,
                                                  update_backend="torch"))]
        for name, fn in runs if rep % 2 == 0 else runs[::-1]:
            results[name].append(fn())
            print(f"rep {rep} {name}: {results[name][-1]:.0f} env steps/s", flush=True)
    table = render(results, args)
    print(table)
    if args.out:
        Path(args.out).write_text(table)


def render(results: dict[str, list[float]], args: argparse.Namespace) -> str:
    import stable_baselines3

    med = {k: statistics.median(v) for k, v in results.items()}
    lines = [
        "# DQN throughput (`bench/dqn_throughput.py`)",
        "",
        f"Machine: {os.cpu_count()} cores, shared with other jobs (timings vary run to run); "
        f"Python {platform.python_version()}, torch {torch.__version__}, numpy {np.__version__}, "
        f"gymnasium {gym.__version__}, Stable-Baselines3 {stable_baselines3.__version__}, "
        f"cairn {cairn.__version__}.",
        "",
        f"{args.steps} env steps per run (learning from step {STARTS}), {args.reps} runs each, "
        "alternating order; medians. Same config on both sides (see the script's docstring): "
        "CartPole-v1, 1 env, 64x64 ReLU, batch 64 every 4 steps, target sync every 500, "
        "1 torch thread.",
        "",
        "| library | env steps/s (median) | all runs | vs SB3 |",
        "|---|---:|---|---:|",
    ]
    names = {"sb3": "Stable-Baselines3 DQN", "cairn": "cairn DQN (plain heads, as SB3)",
             "cairn_double_dueling": "cairn DQN (double Q + dueling)",
             "cairn_torch": 'cairn DQN (plain heads, update_backend="torch")'}
    for key, label in names.items():
        lines.append(f"| {label} | {med[key]:,.0f} | {', '.join(f'{x:,.0f}' for x in results[key])} | "
                     f"{med[key] / med['sb3']:.2f}x |")
    lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
