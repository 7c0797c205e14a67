"""SAC learning check over several seeds on Pendulum-v1: greedy mean return (10 episodes,
``algo.evaluate()``) at fixed env-step marks, with SB3's SAC defaults except the options given.

    .venv/bin/python bench/sac_learning.py [--seeds 0 1 2] [--hidden 64x64] [--lr 1e-3] \\
        [--marks 5000 10000 20000]
"""

from __future__ import annotations

import argparse
import statistics
import time

from cairn import SACConfig


def returns_at(seed: int, hidden: list[int], lr: float, marks: list[int]) -> list[float]:
    algo = (SACConfig().environment("Pendulum-v1").training(lr=lr, model={"hidden": hidden})
            .resources(torch_num_threads=1).debugging(seed=seed).build())
    out = []
    try:
        for mark in marks:
            while algo.counters["num_env_steps_sampled_lifetime"] < mark:
                algo.train()
            out.append(algo.evaluate()["episode_return_mean"])
    finally:
        algo.stop()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--hidden", default="256x256")
    parser.add_argument("--lr", type=float, default=3e-4)
    parser.add_argument("--marks", type=int, nargs="+", default=[5_000, 10_000, 20_000])
    args = parser.parse_args()
    hidden = [int(h) for h in args.hidden.split("x")]
    rows = []
    for seed in args.seeds:
        start = time.perf_counter()
        rows.append(returns_at(seed, hidden, args.lr, args.marks))
        print(f"seed {seed}: {[round(r, 1) for r in rows[-1]]} ({time.perf_counter() - start:.0f} s)",
              flush=True)
    medians = [statistics.median(col) for col in zip(*rows, strict=True)]
    print("| config | " + " | ".join(f"{m} steps" for m in args.marks) + " |")
    print(f"| {args.hidden}, lr {args.lr:g}, seeds {args.seeds} (median) | "
          + " | ".join(f"{m:.1f}" for m in medians) + " |")


if __name__ == "__main__":
    main()
