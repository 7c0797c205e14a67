"""PPO CartPole env steps per second with a Keras policy against the same PPO with the torch policy.

Config (both): CartPole-v1, 1 env, rollout 2048, minibatch 64, 10 epochs, 64x64 tanh actor and
critic (cairn's defaults), 1 torch thread, seed 0; the only difference is
``config.framework("keras")``: Keras 3 Dense layers on Keras' torch backend, trained by cairn's
torch loss and Adam (docs/keras.md). Goal: the Keras policy at >= 0.8x the torch policy.
Runs alternate (torch first on even repetitions) in one process; each repetition builds a new
algorithm, trains one warm-up iteration, then times ``--iters`` iterations; medians reported.

    .venv/bin/python bench/keras_throughput.py [--iters 3] [--reps 3] [--out bench/results/keras_throughput.md]
"""

from __future__ import annotations

import argparse
import importlib.metadata
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _util import command_line, load_average, machine_lines, median, ratio

import cairn


def steps_per_second(framework: str, iters: int) -> float:
    config = cairn.PPOConfig().environment("CartPole-v1").debugging(seed=0).framework(framework)
    algo = config.build()
    algo.train()  # warm-up: first touch of buffers, optimizer construction
    start_steps = algo.counters["num_env_steps_sampled_lifetime"]
    start = time.perf_counter()
    for _ in range(iters):
        algo.train()
    elapsed = time.perf_counter() - start
    steps = algo.counters["num_env_steps_sampled_lifetime"] - start_steps
    algo.stop()
    return steps / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iters", type=int, default=3)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="1 iteration, 1 repetition")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    iters, reps = (1, 1) if args.quick else (args.iters, args.reps)
    torch.set_num_threads(1)
    results: dict[str, list[float]] = {"torch": [], "keras": []}
    for rep in range(reps):
        order = ["torch", "keras"] if rep % 2 == 0 else ["keras", "torch"]
        for framework in order:
            results[framework].append(steps_per_second(framework, iters))
            print(f"rep {rep} {framework}: {results[framework][-1]:,.0f} env steps/s", flush=True)
    torch_sps, keras_sps = median(results["torch"]), median(results["keras"])
    paired = median([k / t for k, t in zip(results["keras"], results["torch"], strict=True)])
    lines = [
        "# PPO CartPole env steps/s: Keras policy vs torch policy", "",
        f"Command: `{command_line()}`", "", *machine_lines([f"- keras {importlib.metadata.version('keras')} (torch backend); load average: {load_average()}"]), "",
        "| policy | env steps/s per repetition | median |", "|---|---|---|",
        f"| torch | {', '.join(f'{x:,.0f}' for x in results['torch'])} | {torch_sps:,.0f} |",
        f"| keras | {', '.join(f'{x:,.0f}' for x in results['keras'])} | {keras_sps:,.0f} |", "",
        f"Keras / torch: {ratio(keras_sps, torch_sps):.2f}x (medians); median of paired ratios "
        f"{paired:.2f}x; goal >= 0.8x: {'met' if paired >= 0.8 else 'not met'}.",
    ]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        Path(args.out).write_text(text)


if __name__ == "__main__":
    main()
