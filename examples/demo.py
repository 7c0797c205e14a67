"""`make demo`: train PPO on CartPole-v1, evaluate greedily, save, restore, and check that the
restored policy acts the same.

    python examples/demo.py [--target 475] [--max-iters 50] [--out DIR]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np

import cairn


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", type=float, default=475.0, help="greedy return to reach")
    parser.add_argument("--max-iters", type=int, default=50, help="iterations of 2048 env steps")
    parser.add_argument("--out", default=None, help="checkpoint directory (default: a temp dir)")
    args = parser.parse_args()

    config = (
        cairn.PPOConfig()
        .environment("CartPole-v1")
        .training(lr=3e-4, train_batch_size=2048, minibatch_size=64, num_epochs=10)
        .evaluation(evaluation_duration=10)
        .debugging(seed=0)
    )
    algo = config.build()
    start = time.perf_counter()
    evaluation = {"episode_return_mean": float("nan")}
    for _ in range(args.max_iters):
        result = algo.train()
        line = (f"iter {result['training_iteration']:3d}  env steps "
                f"{result['num_env_steps_sampled_lifetime']:7d}  return_mean "
                f"{result['episode_return_mean']:7.1f}")
        if result["training_iteration"] % 5 == 0 or result["episode_return_mean"] >= args.target:
            evaluation = algo.evaluate()
            line += f"  greedy eval {evaluation['episode_return_mean']:6.1f}"
            print(line, flush=True)
            if evaluation["episode_return_mean"] >= args.target:
                break
        else:
            print(line, flush=True)
    elapsed = time.perf_counter() - start
    steps = algo.counters["num_env_steps_sampled_lifetime"]
    print(f"\ntrained {steps} env steps in {elapsed:.1f} s ({steps / elapsed:.0f} steps/s)")
    print(f"greedy evaluation over 10 episodes: return {evaluation['episode_return_mean']:.1f}")

    out = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="cairn-demo-")) / "checkpoint"
    path = algo.save(out)
    info = cairn.get_checkpoint_info(path)
    print(f"saved {info['type']} checkpoint (format {info['checkpoint_version']}) to {path}")

    restored = cairn.Algorithm.from_checkpoint(path)
    obs = np.random.default_rng(0).uniform(-0.2, 0.2, size=(1000, 4)).astype(np.float32)
    same = np.array_equal(
        algo.get_policy().compute_actions(obs, explore=False),
        restored.get_policy().compute_actions(obs, explore=False),
    )
    print(f"restored with Algorithm.from_checkpoint: same greedy actions on 1000 observations: {same}")
    algo.stop()
    restored.stop()
    return 0 if same and evaluation["episode_return_mean"] >= 450 else 1


if __name__ == "__main__":
    raise SystemExit(main())
