"""What recording episode data for callbacks costs: ``EnvRunner.sample()`` env steps/s on
CartPole-v1 without callbacks (the fast path: nothing is recorded) and with an episode hook
(``tests.callbacks.hooks:EpisodeLength``, an ``on_episode_step`` override: every step is
recorded for the getters), "sync" with 1 and 8 envs and "async" with 2. Reported per case:
the median env steps/s (wall clock) and the median CPU microseconds of this process per env
step (``time.process_time``: steadier than the wall clock on a shared machine; for "async" it
leaves out the children's work).

Run it against two checkouts (e.g. main and a branch) in alternation, each from its root:
``PYTHONPATH=$PWD .venv/bin/python bench/episode_data.py --json out.json``; the medians of the
repetitions are printed (and written as JSON).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _util import median

CASES = [("sync", 1), ("sync", 8), ("async", 2)]
HOOKS = {"none": None, "step_hook": "tests.callbacks.hooks:EpisodeLength"}


def rate(mode: str, envs: int, hook: str | None, steps: int, reps: int) -> tuple[list[float], list[float]]:
    import cairn

    config = (cairn.PPOConfig().environment("CartPole-v1").debugging(seed=0)
              .env_runners(num_envs_per_env_runner=envs, gym_env_vectorize_mode=mode))
    if hook is not None:
        config = config.callbacks(hook)
    algo = config.build()
    try:
        runner = algo.env_runner_group.local
        runner.sample(max(1, 256 // envs))  # warm-up
        rates, cpu_us = [], []
        for _ in range(reps):
            start, cpu = time.perf_counter(), time.process_time()
            runner.sample(steps // envs)
            n = steps // envs * envs
            rates.append(n / (time.perf_counter() - start))
            cpu_us.append((time.process_time() - cpu) / n * 1e6)
        return rates, cpu_us
    finally:
        algo.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=4096, help="env steps per timed sample()")
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    results: dict[str, Any] = {}
    for mode, envs in CASES:
        for name, hook in HOOKS.items():
            rates, cpu_us = rate(mode, envs, hook, args.steps, args.reps)
            key = f"{mode} x{envs} {name}"
            results[key] = {"steps_per_s": median(rates), "cpu_us_per_step": median(cpu_us)}
            print(f"{key:24s} {median(rates):10,.0f} env steps/s  {median(cpu_us):6.1f} CPU us/step",
                  flush=True)
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
