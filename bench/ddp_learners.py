"""DDP learners on Ray (``config.learners(num_learners=N)``) against one learner, on a
learner-bound PPO config (issue 28 item 5, CPU).

PPO on CartPole-v1 with a large network (``--hidden``, actor and critic), large minibatches and
many epochs, so that the gradient updates dominate ``train()``. Layouts, all with the same seed
and global batch: ``local-1t`` (``num_learners=0``, 1 torch thread: one learner on one core),
``local-2t`` (``num_learners=0``, 2 torch threads: one process using both cores),
``ddp-1`` (``num_learners=1``: one Ray learner actor, 1 CPU: the transport's cost) and
``ddp-2`` (``num_learners=2``: two gloo learners, 1 CPU each, each half of every minibatch).
Reported: seconds per ``train()`` iteration (and, separately timed, one iteration's
sampling, which is the same work in every layout) and env steps/s, medians over ``--iters`` timed
iterations after one warm-up, per interleaved repetition, with the 1-minute load average;
``ray.init(num_cpus=2)``. The weights of all layouts after the warm-up iteration are checked
to agree within the documented tolerance (rtol=1e-4, atol=1e-5); the script fails otherwise.

Ray starts its worker processes, the learner actors included, at nice 15 (Ray's
``worker_niceness``); on a machine that other jobs keep busy they then get less CPU than the
driver-only layouts. ``RAY_worker_niceness=0`` in the environment starts them at nice 0; the
report says which.

Run: ``.venv/bin/python bench/ddp_learners.py`` (``--quick`` for a smoke run);
``RAY_worker_niceness=0 .venv/bin/python bench/ddp_learners.py`` for un-niced learners.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _util import (
    REPO,
    cairn_code_line,
    command_line,
    fmt,
    load_average,
    machine_lines,
    median,
    ratio,
    table,
    write_report,
)

#: name -> (num_learners, torch threads in the driver)
LAYOUTS = {"local-1t": (0, 1), "local-2t": (0, 2), "ddp-1": (1, 1), "ddp-2": (2, 1)}


def build(layout: str, args: Any) -> Any:
    import cairn

    num_learners, threads = LAYOUTS[layout]
    if args.algo == "sac":  # SB3's defaults (256x256, minibatch 256): one gradient step per env step
        return (cairn.SACConfig().environment("Pendulum-v1")
                .training(train_batch_size=args.batch, num_steps_sampled_before_learning_starts=100)
                .learners(num_learners=num_learners, num_cpus_per_learner=1)
                .resources(torch_num_threads=threads).debugging(seed=0).build())
    return (cairn.PPOConfig().environment("CartPole-v1")
            .training(train_batch_size=args.batch, minibatch_size=args.minibatch, num_epochs=args.epochs,
                      model={"hidden": [args.hidden, args.hidden]})
            .env_runners(num_envs_per_env_runner=4)
            .learners(num_learners=num_learners, num_cpus_per_learner=1)
            .resources(torch_num_threads=threads).debugging(seed=0).build())


def measure(layout: str, args: Any) -> dict[str, Any]:
    algo = build(layout, args)
    try:
        algo.train()  # warm-up: actors' first update, optimizer state built
        weights = algo.get_policy().get_weights()
        times = []
        for _ in range(args.iters):
            start = time.perf_counter()
            algo.train()
            times.append(time.perf_counter() - start)
        start = time.perf_counter()
        algo.env_runner_group.sample()  # the sampling share of an iteration (same in every layout)
        sample_s = time.perf_counter() - start
    finally:
        algo.stop()
    return {"s_per_iter": median(times), "sample_s": sample_s, "weights": weights, "load": load_average()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batch", type=int, default=4096)
    parser.add_argument("--minibatch", type=int, default=2048)
    parser.add_argument("--epochs", type=int, default=8)
    parser.add_argument("--hidden", type=int, default=512)
    parser.add_argument("--iters", type=int, default=2)
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--layouts", nargs="+", default=list(LAYOUTS), choices=list(LAYOUTS))
    parser.add_argument("--algo", choices=["ppo", "sac"], default="ppo",
                        help="sac: Pendulum-v1 with SB3's defaults, --batch env steps (= gradient "
                             "steps) per iteration; the weights are compared, not required to agree")
    parser.add_argument("--quick", action="store_true", help="1 repetition, 1 iteration, small net")
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "ddp_learners.md")
    args = parser.parse_args()
    if args.quick:
        args.reps, args.iters, args.hidden, args.batch, args.minibatch = 1, 1, 64, 512, 256

    import numpy as np
    import ray

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    runs: dict[str, list[dict[str, Any]]] = {}
    try:
        for rep in range(args.reps):
            for layout in args.layouts if rep % 2 == 0 else args.layouts[::-1]:
                runs.setdefault(layout, []).append(measure(layout, args))
                print(layout, {k: v for k, v in runs[layout][-1].items() if k != "weights"}, flush=True)
    finally:
        ray.shutdown()
    reference = runs[args.layouts[0]][0]["weights"]
    deviation = max(float(np.max(np.abs(rs[0]["weights"][name] - value)))
                    for rs in runs.values() for name, value in reference.items())
    for layout, layout_runs in runs.items():
        for name, value in reference.items():
            if args.algo == "ppo" and not np.allclose(layout_runs[0]["weights"][name], value,
                                                      rtol=1e-4, atol=1e-5):
                raise SystemExit(f"{layout} trained {name} to other weights than {args.layouts[0]}")

    base = args.layouts[0]
    secs = {layout: median(r["s_per_iter"] for r in rs) for layout, rs in runs.items()}
    sample = {layout: median(r["sample_s"] for r in rs) for layout, rs in runs.items()}
    rows = [[layout, LAYOUTS[layout][0], LAYOUTS[layout][1], fmt(secs[layout]), fmt(sample[layout]),
             fmt(args.batch / secs[layout]), f"{ratio(secs[base], secs[layout]):.2f}x",
             " / ".join(fmt(r["s_per_iter"]) for r in runs[layout])] for layout in runs]
    loads = [r["load"] for rs in runs.values() for r in rs]
    setting = (f"PPO CartPole-v1, {args.hidden}x{args.hidden} actor and critic, batch {args.batch}, "
               f"minibatch {args.minibatch}, {args.epochs} epochs, 4 envs in the local env runner"
               if args.algo == "ppo" else
               f"SAC Pendulum-v1, SB3's defaults (256x256, minibatch 256, 1 gradient step per env "
               f"step), {args.batch} env steps per iteration")
    lines = [f"# DDP learners (num_learners) vs one learner, {args.algo.upper()}", "",
             f"Command: `{command_line()}`", "",
             *machine_lines([cairn_code_line(),
                             "- RAY_worker_niceness="
                             f"{os.environ.get('RAY_worker_niceness', 'unset (learner actors at nice 15)')}",
                             f"- Load average (1 min) after each measurement: {', '.join(loads)}"]), "",
             f"{setting}; ray.init(num_cpus=2); {args.iters} timed iterations after 1 warm-up, "
             f"{args.reps} interleaved repetitions; largest difference of any weight between layouts "
             f"after the warm-up: {deviation:.2e}"
             + (" (PPO: checked within rtol=1e-4, atol=1e-5)." if args.algo == "ppo" else "."), "",
             *table(["layout", "num_learners", "driver torch threads", "s / train()",
                     "of which sampling (s)", "env steps/s",
                     f"speed vs {base}", "s / train() per repetition"], rows), ""]
    write_report(args.out, lines)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
