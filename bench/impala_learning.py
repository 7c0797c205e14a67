"""IMPALA and APPO learning check over several seeds on CartPole-v1 (synchronous path,
``num_env_runners=0``): greedy mean return (``algo.evaluate()``, 10 episodes) every
``--eval-every`` env steps, until the first return >= ``--bar`` or ``--budget`` env steps.
docs/impala.md, section Learning, has the figures; the settings are
``tests/algorithms/impala/small.py``'s ``learning_config``, which the slow learning test uses too.

    .venv/bin/python bench/impala_learning.py [--algos IMPALA APPO] [--seeds 0 1 2] \\
        [--bar 475] [--budget 30000] [--eval-every 2000] [--num-env-runners 0] [--entropy-coeff 0.01] \\
        [--num-epochs 1] [--repeats 1] [--lstm]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the repository root: tests/

from tests.algorithms.impala.small import steps_to_bar

#: The recurrent policy of ``--lstm``: one 64-unit layer, then a 64-cell LSTM, sequences of 20.
LSTM_MODEL = {"hidden": [64], "use_lstm": True, "lstm_cell_size": 64, "max_seq_len": 20}


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
    parser.add_argument("--num-epochs", type=int, default=None,
                        help="instead of the learning settings' 4 (RLlib's default: 1)")
    parser.add_argument("--repeats", type=int, default=1,
                        help="runs of each seed (asynchronous runs, --num-env-runners >= 1, differ)")
    parser.add_argument("--lstm", action="store_true",
                        help=f"a recurrent policy: model={LSTM_MODEL} instead of the 64x64 MLP")
    args = parser.parse_args()
    training: dict = {} if args.entropy_coeff is None else {"entropy_coeff": args.entropy_coeff}
    if args.num_epochs is not None:
        training["num_epochs"] = args.num_epochs
    if args.lstm:
        training["model"] = LSTM_MODEL
    for algo in args.algos:
        for seed in [seed for seed in args.seeds for _ in range(args.repeats)]:
            start = time.perf_counter()
            first, points = steps_to_bar(algo, seed, bar=args.bar, budget=args.budget,
                                         eval_every=args.eval_every, num_env_runners=args.num_env_runners,
                                         **training)
            print(f"{algo} seed {seed}: first greedy >= {args.bar} at {first} steps; {points}; "
                  f"wall {time.perf_counter() - start:.0f}s", flush=True)


if __name__ == "__main__":
    main()
