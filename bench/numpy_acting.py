"""Acting speed of the built-in networks' numpy path, this tree against another (the anchor).

Times one call of each network's numpy acting method (the sampling loop's per-step cost) in a
fresh process per tree, alternating the trees ``--reps`` times, and reports each case's median
time and the median of the paired ratios (this tree over the anchor). Usage::

    .venv/bin/python bench/numpy_acting.py --anchor /path/to/other/checkout [--reps 7]

Cases: the PPO MLP (64x64, Discrete(2) and Box(2) actions, 1 observation), the shared LSTM (64 units
+ 256 cell, 8 rows) and DQN's Q network (64x64, dueling, 1 observation and a 32-row batch).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

CHILD = r"""
import json, timeit, sys
import gymnasium as gym, numpy as np, torch
torch.set_num_threads(1)
import cairn
from cairn.algorithms.dqn.dqn_policy import DQNPolicy
box = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)
rng = np.random.default_rng(0)
one, eight, batch = (rng.standard_normal((n, 4)).astype(np.float32) for n in (1, 8, 32))
mlp_d = cairn.Policy(box, gym.spaces.Discrete(2), seed=0).model
mlp_b = cairn.Policy(box, gym.spaces.Box(-1, 1, (2,)), seed=0).model
lstm_config = {"model": {"use_lstm": True, "lstm_cell_size": 256, "vf_share_layers": True}}
lstm = cairn.Policy(box, gym.spaces.Discrete(2), lstm_config, seed=0).model
state = [np.zeros((8, 256), np.float32)] * 2
q = DQNPolicy(box, gym.spaces.Discrete(2), {"dueling": True}, seed=0).model
cases = {
    "mlp_discrete_1": lambda: mlp_d.numpy_action_inputs(one),
    "mlp_box_1": lambda: mlp_b.numpy_action_inputs(one),
    "lstm_8": lambda: lstm.numpy_step(eight, state),
    "q_1": lambda: q.numpy_q_values(one),
    "q_32": lambda: q.numpy_q_values(batch),
}
out = {}
for name, fn in cases.items():
    fn()
    number = 2000
    out[name] = min(timeit.repeat(fn, number=number, repeat=5)) / number * 1e6
print(json.dumps(out))
"""


def run(tree: Path) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": str(tree), "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-c", CHILD], env=env, cwd=tree, check=True,
                          capture_output=True, text=True)
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--anchor", type=Path, required=True)
    parser.add_argument("--reps", type=int, default=7)
    args = parser.parse_args()
    here = Path(__file__).resolve().parent.parent
    ours: list[dict[str, float]] = []
    theirs: list[dict[str, float]] = []
    for _ in range(args.reps):
        theirs.append(run(args.anchor))
        ours.append(run(here))
    print("| case | anchor us | this tree us | ratio (paired median) |\n|---|---|---|---|")
    for case in ours[0]:
        ratio = statistics.median(o[case] / t[case] for o, t in zip(ours, theirs))
        print(f"| {case} | {statistics.median(t[case] for t in theirs):.2f} | "
              f"{statistics.median(o[case] for o in ours):.2f} | {ratio:.3f} |")


if __name__ == "__main__":
    main()
