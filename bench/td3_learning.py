"""TD3 learning check over several seeds on Pendulum-v1, with SB3's TD3 defaults except the
network size: greedy mean return (10 episodes, ``algo.evaluate()``) after every 1000-step
iteration from 3k steps, until ``--extra`` steps after the first return >= ``--bar`` (or
``--budget`` steps). docs/td3.md, section Learning, has the figures.

    .venv/bin/python bench/td3_learning.py [--seeds 0 1 2] [--hidden 64x64] [--bar -250] \\
        [--budget 30000] [--extra 2000]
"""

from __future__ import annotations

import argparse
import time

from cairn import TD3Config


def curve(seed: int, hidden: list[int], bar: float, budget: int, extra: int) -> tuple[int | None, list]:
    algo = (TD3Config().environment("Pendulum-v1").training(model={"hidden": hidden})
            .resources(torch_num_threads=1).debugging(seed=seed).build())
    first: int | None = None
    points = []
    try:
        while algo.counters["num_env_steps_sampled_lifetime"] < budget:
            steps = algo.train()["num_env_steps_sampled_lifetime"]
            if steps < 3000:
                continue
            ret = algo.evaluate()["episode_return_mean"]
            points.append((steps, round(ret, 1)))
            if first is None and ret >= bar:
                first = steps
            if first is not None and steps >= first + extra:
                break
    finally:
        algo.stop()
    return first, points


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--hidden", default="64x64")
    parser.add_argument("--bar", type=float, default=-250.0)
    parser.add_argument("--budget", type=int, default=30_000)
    parser.add_argument("--extra", type=int, default=2000)
    args = parser.parse_args()
    hidden = [int(h) for h in args.hidden.split("x")]
    for seed in args.seeds:
        start = time.perf_counter()
        first, points = curve(seed, hidden, args.bar, args.budget, args.extra)
        print(f"seed {seed}: first greedy >= {args.bar} at {first} steps; {points}; "
              f"wall {time.perf_counter() - start:.0f}s", flush=True)


if __name__ == "__main__":
    main()
