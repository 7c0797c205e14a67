"""Environments in child processes (``gym_env_vectorize_mode="async"``) against "sync", one run.

PPO on CartPole-v1 whose step costs ``--step-ms`` milliseconds, two ways: ``burn`` (a busy loop:
CPU work, so "async" needs free cores) and ``sleep`` (waiting, as for a simulator or a remote
service: no core needed). ``--envs`` environments in one local env runner, "sync" (stepped one
after another in the runner's process) against "async" (each in its own child, stepped at the
same time). Reported: env steps/s of ``train()`` (sampling and learning) over ``--iters``
iterations after one warm-up iteration, and of sampling alone (``EnvRunner.sample``), as
medians over ``--reps`` interleaved repetitions, with the 1-minute load average after each.
Both modes train to the same weights (checked: the script fails otherwise).

Run: ``.venv/bin/python bench/async_envs.py`` (``--quick`` for a smoke run).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _util import REPO, command_line, fmt, load_average, machine_lines, median, ratio, table

MODES = ("sync", "async")


def make_slow_cartpole(env_config: dict[str, Any]) -> Any:
    """CartPole-v1 whose step burns (``kind="burn"``) or sleeps (``"sleep"``) ``step_ms``."""
    import gymnasium as gym

    seconds, kind = env_config["step_ms"] * 1e-3, env_config["kind"]

    class Slow(gym.Wrapper):
        def step(self, action: Any) -> Any:
            if kind == "sleep":
                time.sleep(seconds)
            else:
                end = time.perf_counter() + seconds
                while time.perf_counter() < end:
                    pass
            return self.env.step(action)

    return Slow(gym.make("CartPole-v1"))


def build(kind: str, mode: str, args: Any) -> Any:
    import cairn

    return (cairn.PPOConfig()
            .environment(make_slow_cartpole, env_config={"kind": kind, "step_ms": args.step_ms})
            .env_runners(num_envs_per_env_runner=args.envs, gym_env_vectorize_mode=mode)
            .training(train_batch_size=args.batch, minibatch_size=args.minibatch,
                      num_epochs=args.epochs, model={"hidden": [64, 64]})
            .resources(torch_num_threads=1).debugging(seed=0).build())


def weights_digest(algo: Any) -> str:
    """A hash of the policy's weights, to check that both modes train the same."""
    import hashlib

    digest = hashlib.sha256()
    for name, array in sorted(algo.get_policy().get_weights().items()):
        digest.update(name.encode() + array.tobytes())
    return digest.hexdigest()


def measure(kind: str, mode: str, args: Any) -> dict[str, Any]:
    algo = build(kind, mode, args)
    algo.train()  # warm-up (and the children's first steps)
    start = time.perf_counter()
    for _ in range(args.iters):
        algo.train()
    train_rate = args.iters * args.batch / (time.perf_counter() - start)
    digest = weights_digest(algo)
    runner = algo.env_runner_group.local
    steps = args.batch // args.envs
    start = time.perf_counter()
    runner.sample(steps)
    sample_rate = steps * args.envs / (time.perf_counter() - start)
    algo.stop()
    return {"train": train_rate, "sample": sample_rate, "digest": digest, "load": load_average()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--envs", type=int, default=2)
    parser.add_argument("--step-ms", type=float, default=1.0)
    parser.add_argument("--kinds", nargs="+", default=["burn", "sleep"], choices=["burn", "sleep"])
    parser.add_argument("--batch", type=int, default=1024)
    parser.add_argument("--minibatch", type=int, default=256)
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--iters", type=int, default=3)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="1 repetition, 1 iteration")
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "async_envs.md")
    args = parser.parse_args()
    if args.quick:
        args.reps, args.iters = 1, 1

    runs: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for rep in range(args.reps):
        for kind in args.kinds:
            for mode in MODES if rep % 2 == 0 else MODES[::-1]:
                runs.setdefault((kind, mode), []).append(measure(kind, mode, args))
                print(kind, mode, runs[(kind, mode)][-1], flush=True)
    for kind in args.kinds:
        digests = {r["digest"] for mode in MODES for r in runs[(kind, mode)]}
        if len(digests) != 1:
            raise SystemExit(f"{kind}: 'async' and 'sync' trained to different weights: {digests}")

    rows = []
    for kind in args.kinds:
        med = {(mode, what): median(r[what] for r in runs[(kind, mode)])
               for mode in MODES for what in ("train", "sample")}
        rows.append([kind, fmt(med[("sync", "train")]), fmt(med[("async", "train")]),
                     f"{ratio(med[('async', 'train')], med[('sync', 'train')]):.2f}x",
                     fmt(med[("sync", "sample")]), fmt(med[("async", "sample")]),
                     f"{ratio(med[('async', 'sample')], med[('sync', 'sample')]):.2f}x",
                     " / ".join(f"{ratio(a['train'], s['train']):.2f}"
                                for a, s in zip(runs[(kind, 'async')], runs[(kind, 'sync')]))])
    loads = [r["load"] for rs in runs.values() for r in rs]
    lines = ["# Environments in child processes: gym_env_vectorize_mode 'async' vs 'sync'", "",
             f"Command: `{command_line()}`", "",
             *machine_lines([f"- Load average (1 min) after each measurement: {', '.join(loads)}"]), "",
             f"CartPole-v1 whose step burns or sleeps {args.step_ms:g} ms; PPO, {args.envs} envs in the "
             f"local env runner, batch {args.batch}, minibatch {args.minibatch}, {args.epochs} epochs, "
             f"64x64, 1 torch thread; {args.iters} timed iterations after 1 warm-up, {args.reps} "
             "interleaved repetitions; both modes trained to the same weights.", "",
             "## Env steps/s (medians)", "",
             *table(["step", "sync train()", "async train()", "async / sync", "sync sample()",
                     "async sample()", "async / sync", "train() ratio per repetition"], rows), ""]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
