"""IMPALA and APPO learning check over several seeds on CartPole-v1 (synchronous path,
``num_env_runners=0``): greedy mean return (``algo.evaluate()``, 10 episodes) every
``--eval-every`` env steps, until the first return >= ``--bar`` or ``--budget`` env steps.
docs/impala.md, section Learning, has the figures; the settings are
``tests/algorithms/impala/small.py``'s ``learning_config``, which the slow learning test uses too.

    .venv/bin/python bench/impala_learning.py [--algos IMPALA APPO] [--seeds 0 1 2] \\
        [--bar 475] [--budget 30000] [--eval-every 2000] [--num-env-runners 0] [--entropy-coeff 0.01]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the repository root: tests/

from tests.algorithms.impala.small import steps_to_bar


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--algos", nargs="+", default=["IMPALA", "APPO"])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--bar", type=float, default=475.0)
    parser.add_argument("--budget", type=int, default=30_000)
    parser.add_argument("--eval-every", type=int, default=2_000)
    parser.add_argument("--num-env-runners", type=int, default=0,
                        help="remote runners sampling asynchronously (2 envs each); 0: 4 envs in-process")
    parser.add_argument("--entropy-coeff", type=float, default=None,
                        help="instead of the learning settings' 0.0 (RLlib's default: 0.01)")
    args = parser.parse_args()
    for algo in args.algos:
        for seed in args.seeds:
            start = time.perf_counter()
            training = {} if args.entropy_coeff is None else {"entropy_coeff": args.entropy_coeff}
            first, points = steps_to_bar(algo, seed, bar=args.bar, budget=args.budget,
                                         eval_every=args.eval_every, num_env_runners=args.num_env_runners,
                                         **training)
            print(f"{algo} seed {seed}: first greedy >= {args.bar} at {first} steps; {points}; "
                  f"wall {time.perf_counter() - start:.0f}s", flush=True)


if __name__ == "__main__":
    main()
