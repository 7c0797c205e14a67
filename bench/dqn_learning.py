"""DQN learning check over several seeds: the env steps at which greedy evaluation first
reaches 475 on CartPole-v1 (within a 50k budget), with cairn's default DQN config.

    .venv/bin/python bench/dqn_learning.py [--seeds 0 1 2] [--budget 50000]

Evaluation (10 greedy episodes) every 2 iterations of 1,000 env steps, from 10k steps on, as
in tests/algorithms/dqn/test_dqn_learning.py.
"""

from __future__ import annotations

import argparse
import statistics
import time

from cairn import DQNConfig


def steps_to_solve(seed: int, budget: int, target: float) -> tuple[int | None, float, float]:
    algo = DQNConfig().environment("CartPole-v1").debugging(seed=seed).build()
    start = time.perf_counter()
    best = 0.0
    try:
        while algo.counters["num_env_steps_sampled_lifetime"] < budget:
            result = algo.train()
            steps = result["num_env_steps_sampled_lifetime"]
            if steps >= 10_000 and result["training_iteration"] % 2 == 0:
                best = max(best, algo.evaluate()["episode_return_mean"])
                if best >= target:
                    return steps, best, time.perf_counter() - start
        return None, best, time.perf_counter() - start
    finally:
        algo.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--budget", type=int, default=50_000)
    parser.add_argument("--target", type=float, default=475.0)
    args = parser.parse_args()
    solved = []
    for seed in args.seeds:
        steps, best, seconds = steps_to_solve(seed, args.budget, args.target)
        print(f"seed {seed}: {'solved at ' + str(steps) if steps else 'not solved'} env steps, "
              f"best greedy return {best:.1f}, {seconds:.1f} s", flush=True)
        solved.append(steps if steps is not None else float("inf"))
    print(f"median env steps to greedy >= {args.target}: {statistics.median(solved)}")


if __name__ == "__main__":
    main()
