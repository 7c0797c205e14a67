"""CPU cost of one acting call of the league's env runner on connect_four_v3 (issue 39's full-pool
gap: a league step makes ~3.7 such calls on ~2 rows, self-play one on 8).

The call is what the turn-based sampler makes per policy to move:
``cairn.env_runner.inference.compute_raw_actions(policy, rows, explore=True, record=True)`` (mask
check, numpy forward pass on views of the live weights, masked scores, categorical draw and its
log-probability, legal-action check), for ``league_connect_four.py``'s policy ([256, 256] tanh).
Rows are the processed first observation of a game, repeated. Two cases per batch size: one policy
called again and again, and 21 policies in turn (a full pool: each call's weights, ~350 KB, are
not the previous call's). Figures are the minimum over 7 repeats of ``time.process_time`` per call,
with one BLAS thread (run it with ``OPENBLAS_NUM_THREADS=1``, as the env runners act).

To compare two code versions, run it from each checkout in turns (``--label`` names the line):

    OPENBLAS_NUM_THREADS=1 PYTHONPATH=$PWD .venv/bin/python bench/league_acting_call.py --label main
"""

from __future__ import annotations

import argparse
import sys
import time
import timeit
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--label", default="this checkout")
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    import pettingzoo.classic.connect_four_v3 as connect_four
    import torch
    from league_connect_four import build
    from pettingzoo.utils.env_logger import EnvLogger

    from cairn.env_runner.inference import compute_raw_actions
    from cairn.policy.policy import Policy

    EnvLogger.suppress_output()
    torch.set_num_threads(1)
    settings = argparse.Namespace(snapshot_every=1, max_snapshots=20, league_opponents=["random_legal"])
    algo = build("selfplay", 0, settings)
    main_policy = algo.get_policy("main")
    pool = [Policy.from_spec(main_policy.spec, seed=s) for s in range(21)]
    env = connect_four.env()
    env.reset(seed=0)
    obs = env.observe(env.agents[0])
    figures = {}
    for rows in (2, 8):
        batch = main_policy.process_observations([obs] * rows, update=False)

        def act(policy: Policy, batch=batch) -> None:  # type: ignore[no-untyped-def]
            compute_raw_actions(policy, batch, explore=True, policy_id="p", origin=lambda r: ("a", 0, 0),
                                record=True)

        one = timeit.repeat(lambda: act(main_policy), number=2000, repeat=args.repeat,
                            timer=time.process_time)
        turns = timeit.repeat(lambda: [act(p) for p in pool], number=100, repeat=args.repeat,
                              timer=time.process_time)
        figures[f"{rows} rows, one policy"] = min(one) / 2000
        figures[f"{rows} rows, 21 in turn"] = min(turns) / (100 * len(pool))
    algo.stop()
    print(f"{args.label}: " + "; ".join(f"{k} {v * 1e6:.1f} us" for k, v in figures.items()), flush=True)


if __name__ == "__main__":
    main()
