"""Env steps per second with a Keras policy against the same algorithm with the torch policy.

``--algo ppo`` (default): CartPole-v1, 1 env, rollout 2048, minibatch 64, 10 epochs, 64x64 tanh
actor and critic (cairn's defaults). ``--algo sac``: Pendulum-v1, 1 env, SAC's defaults (actor
and twin critics 256x256 ReLU, batch 256, one gradient step per env step), learning from step
100, 500 env steps per iteration. ``--algo td3``: the same with TD3's defaults (actor and twin
critics 400x300 ReLU, actor every 2nd gradient step). All: 1 torch thread, seed 0; the only difference is
``config.framework("keras")``: Keras 3 Dense layers on Keras' torch backend, trained by cairn's
torch losses and Adam (docs/keras.md). Goal: the Keras policy at >= 0.8x the torch policy.
Runs alternate (torch first on even repetitions) in one process; each repetition builds a new
algorithm, trains one warm-up iteration (SAC, TD3: past the start of learning), then times
``--iters`` iterations, in wall time and in the process's CPU time (the steadier of the two on
a machine shared with other jobs); medians and the median of the per-repetition ratios.

    .venv/bin/python bench/keras_throughput.py [--algo ppo|sac|td3] [--iters 3] [--reps 3] \\
        [--out bench/results/keras_throughput.md]
"""

from __future__ import annotations

import argparse
import importlib.metadata
import sys
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _util import command_line, load_average, machine_lines, median, ratio

import cairn

TITLES = {"ppo": "PPO CartPole", "sac": "SAC Pendulum", "td3": "TD3 Pendulum"}


def build(algo: str, framework: str) -> Any:
    if algo == "ppo":
        config = cairn.PPOConfig().environment("CartPole-v1")
    else:
        config_class = cairn.SACConfig if algo == "sac" else cairn.TD3Config
        config = (config_class().environment("Pendulum-v1")
                  .training(train_batch_size=500, num_steps_sampled_before_learning_starts=100))
    return config.resources(torch_num_threads=1).debugging(seed=0).framework(framework).build()


def steps_per_second(algo_name: str, framework: str, iters: int) -> tuple[float, float]:
    """(env steps per wall second, per process CPU second) over ``iters`` timed iterations."""
    algo = build(algo_name, framework)
    try:
        algo.train()  # warm-up: first touch of buffers, optimizer construction (SAC: learning starts)
        start_steps = algo.counters["num_env_steps_sampled_lifetime"]
        wall, cpu = time.perf_counter(), time.process_time()
        for _ in range(iters):
            algo.train()
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        steps = algo.counters["num_env_steps_sampled_lifetime"] - start_steps
    finally:
        algo.stop()
    return steps / wall, steps / cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--algo", choices=sorted(TITLES), default="ppo")
    parser.add_argument("--iters", type=int, default=3)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="1 iteration, 1 repetition")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    iters, reps = (1, 1) if args.quick else (args.iters, args.reps)
    torch.set_num_threads(1)
    results: dict[str, list[tuple[float, float]]] = {"torch": [], "keras": []}
    for rep in range(reps):
        order = ["torch", "keras"] if rep % 2 == 0 else ["keras", "torch"]
        for framework in order:
            results[framework].append(steps_per_second(args.algo, framework, iters))
            wall_sps, cpu_sps = results[framework][-1]
            print(f"rep {rep} {framework}: {wall_sps:,.0f} env steps/s, {cpu_sps:,.0f} per CPU s", flush=True)
    rows, verdict = [], ""
    for i, clock in enumerate(("wall", "CPU")):
        t_med, k_med = (median(r[i] for r in results[fw]) for fw in ("torch", "keras"))
        paired = median([k[i] / t[i] for k, t in zip(results["keras"], results["torch"], strict=True)])
        for fw, med in (("torch", t_med), ("keras", k_med)):
            rows.append(f"| {clock} | {fw} | {', '.join(f'{r[i]:,.0f}' for r in results[fw])} | {med:,.0f} |")
        verdict += (f"Keras / torch per {clock} second: {ratio(k_med, t_med):.2f}x (medians); median of "
                    f"paired ratios {paired:.2f}x; goal >= 0.8x: {'met' if paired >= 0.8 else 'not met'}.\n")
    lines = [
        f"# {TITLES[args.algo]} env steps/s: Keras policy vs torch policy", "",
        f"Command: `{command_line()}`", "",
        *machine_lines([f"- keras {importlib.metadata.version('keras')} (torch backend); "
                        f"load average: {load_average()}"]), "",
        "| clock | policy | env steps/s per repetition | median |", "|---|---|---|---|", *rows, "", verdict,
    ]
    text = "\n".join(lines)
    print(text)
    if args.out:
        Path(args.out).write_text(text)


if __name__ == "__main__":
    main()
