"""Remote env runners on Ray, cairn vs RLlib, side by side in one run.

An env with a real per-step cost (CartPole-v1 that burns ``--burn-us`` microseconds of CPU per
step), PPO with the same batch (``--batch`` env steps per iteration, one epoch, one minibatch
of the whole batch, 64x64 networks) in both libraries, 1 env per runner, 0, 1 and 2 remote
runners. Reported: env steps/s over ``--iters`` iterations after one warm-up iteration (medians
over ``--reps`` interleaved repetitions), and the time from the first ``train()`` call to its
return with 2 runners (the first sample and one update) plus the build time before it.

Run: ``.bench-venv/bin/python bench/ray_throughput.py`` (RLlib lives in ``.bench-venv``).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _util import (
    BURN_US,
    REPO,
    command_line,
    fmt,
    load_average,
    machine_lines,
    make_burning_cartpole,
    median,
    ratio,
    start_ray,
    table,
)


def build_cairn(n: int, batch: int, burn_us: float) -> Any:
    import cairn

    return (cairn.PPOConfig().environment(make_burning_cartpole, env_config={"burn_us": burn_us})
            .env_runners(num_env_runners=n, num_envs_per_env_runner=1)
            .training(train_batch_size=batch, minibatch_size=batch, num_epochs=1,
                      model={"hidden": [64, 64]})
            .resources(torch_num_threads=1).debugging(seed=0).build())


def build_rllib(n: int, batch: int, burn_us: float) -> Any:
    from ray.rllib.algorithms.ppo import PPOConfig
    from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig
    from ray.tune.registry import register_env

    register_env("burning_cartpole", lambda cfg: make_burning_cartpole({"burn_us": burn_us}))
    return (PPOConfig().environment("burning_cartpole")
            .env_runners(num_env_runners=n, num_envs_per_env_runner=1, rollout_fragment_length="auto")
            .learners(num_learners=0)
            .training(train_batch_size_per_learner=batch, minibatch_size=batch, num_epochs=1)
            .rl_module(model_config=DefaultModelConfig(fcnet_hiddens=[64, 64], fcnet_activation="tanh",
                                                       vf_share_layers=False))
            .debugging(seed=0, log_level="ERROR").build_algo())


def steps_of(lib: str, result: dict[str, Any]) -> int:
    if lib == "cairn":
        return int(result["num_env_steps_sampled_lifetime"])
    return int(result["env_runners"]["num_env_steps_sampled_lifetime"])


def measure(lib: str, n: int, args: Any) -> dict[str, float]:
    import torch

    torch.set_num_threads(1)
    build = build_cairn if lib == "cairn" else build_rllib
    start = time.perf_counter()
    algo = build(n, args.batch, args.burn_us)
    built = time.perf_counter()
    result = algo.train()  # warm-up; with 2 runners also the "first train()" figure
    first = time.perf_counter()
    steps0 = steps_of(lib, result)
    for _ in range(args.iters):
        result = algo.train()
    elapsed = time.perf_counter() - first
    steps = steps_of(lib, result) - steps0
    algo.stop()
    return {"build_s": built - start, "first_train_s": first - built, "steps_per_s": steps / elapsed}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument("--iters", type=int, default=3)
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--burn-us", type=float, default=BURN_US)
    parser.add_argument("--runners", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "ray_throughput.md")
    args = parser.parse_args()

    ray = start_ray(num_cpus=2)
    runs: dict[tuple[str, int], list[dict[str, float]]] = {}
    loads = []
    for rep in range(args.reps):
        for n in args.runners:
            for lib in ("cairn", "rllib") if rep % 2 == 0 else ("rllib", "cairn"):
                runs.setdefault((lib, n), []).append(measure(lib, n, args))
                loads.append(load_average())
                print(lib, n, runs[(lib, n)][-1], flush=True)
    ray.shutdown()

    rows = []
    for n in args.runners:
        c = median(r["steps_per_s"] for r in runs[("cairn", n)])
        r = median(r["steps_per_s"] for r in runs[("rllib", n)])
        rows.append([n, fmt(c), fmt(r), f"{ratio(c, r):.2f}x",
                     " / ".join(fmt(x["steps_per_s"]) for x in runs[("cairn", n)]),
                     " / ".join(fmt(x["steps_per_s"]) for x in runs[("rllib", n)])])
    first_rows = []
    for n in args.runners:
        for lib in ("cairn", "rllib"):
            first_rows.append([lib, n, fmt(median(x["build_s"] for x in runs[(lib, n)])),
                               fmt(median(x["first_train_s"] for x in runs[(lib, n)]))])
    lines = ["# Remote env runners on Ray: cairn vs RLlib", "", f"Command: `{command_line()}`", "",
             *machine_lines([f"- Load average (1 min) after each measurement: {', '.join(loads)}"]), "",
             f"CartPole-v1 burning {args.burn_us:g} us of CPU per step; PPO, batch {args.batch} env steps, "
             f"1 epoch, 1 minibatch, 64x64, 1 env per runner; Ray started with num_cpus=2; "
             f"{args.iters} timed iterations after 1 warm-up, {args.reps} interleaved repetitions.", "",
             "## Env steps/s (medians)", "",
             *table(["remote runners", "cairn", "RLlib", "cairn / RLlib", "cairn runs", "RLlib runs"],
                    rows), "",
             "## Build, and the first train() call (medians, s)", "",
             *table(["library", "remote runners", "build", "first train()"], first_rows), ""]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
