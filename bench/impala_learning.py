"""IMPALA and APPO learning check over several seeds on CartPole-v1 (synchronous path,
``num_env_runners=0``): greedy mean return (``algo.evaluate()``, 10 episodes) every
``--eval-every`` env steps, until the first return >= ``--bar`` or ``--budget`` env steps.
docs/impala.md, section Learning, has the figures and the settings (:func:`learning_config`,
which the slow learning tests use too).

    .venv/bin/python bench/impala_learning.py [--algos IMPALA APPO] [--seeds 0 1 2] \\
        [--bar 475] [--budget 100000] [--eval-every 5000]
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from cairn import APPOConfig, IMPALAConfig

#: The settings of the learning runs, beside RLlib's defaults (docs/impala.md, Learning).
LEARNING_SETTINGS: dict[str, Any] = {
    "lr": 0.001, "num_epochs": 4, "minibatch_size": 128, "entropy_coeff": 0.0,
    "model": {"hidden": [64, 64]},
}
#: Environments stepped by the local runner (fragments of 50 steps each).
NUM_ENVS = 4


def learning_config(algo: str, seed: int) -> Any:
    """The config of a learning run of ``algo`` (``"IMPALA"`` or ``"APPO"``) on CartPole-v1."""
    config_cls = {"IMPALA": IMPALAConfig, "APPO": APPOConfig}[algo]
    return (config_cls().environment("CartPole-v1").env_runners(num_envs_per_env_runner=NUM_ENVS)
            .training(**LEARNING_SETTINGS).resources(torch_num_threads=1).debugging(seed=seed))


def steps_to_bar(algo: str, seed: int, *, bar: float, budget: int, eval_every: int) -> tuple[int | None, list]:
    """The env steps at the first greedy evaluation >= ``bar`` (None: not within ``budget``),
    and every evaluation as ``(steps, return)``."""
    built = learning_config(algo, seed).build()
    points: list[tuple[int, float]] = []
    next_eval = eval_every
    try:
        while built.counters["num_env_steps_sampled_lifetime"] < budget:
            steps = built.train()["num_env_steps_sampled_lifetime"]
            if steps < next_eval:
                continue
            next_eval += eval_every
            ret = built.evaluate()["episode_return_mean"]
            points.append((steps, round(ret, 1)))
            if ret >= bar:
                return steps, points
    finally:
        built.stop()
    return None, points


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--algos", nargs="+", default=["IMPALA", "APPO"])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--bar", type=float, default=475.0)
    parser.add_argument("--budget", type=int, default=100_000)
    parser.add_argument("--eval-every", type=int, default=5_000)
    args = parser.parse_args()
    for algo in args.algos:
        for seed in args.seeds:
            start = time.perf_counter()
            first, points = steps_to_bar(algo, seed, bar=args.bar, budget=args.budget,
                                         eval_every=args.eval_every)
            print(f"{algo} seed {seed}: first greedy >= {args.bar} at {first} steps; {points}; "
                  f"wall {time.perf_counter() - start:.0f}s", flush=True)


if __name__ == "__main__":
    main()
