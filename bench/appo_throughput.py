"""APPO with remote env runners sampling while the learner learns: cairn's APPO against cairn's
PPO (sample, then learn) and RLlib's APPO, side by side in one run.

The env is ``ray_throughput.py``'s (CartPole-v1 burning ``--burn-us`` microseconds of CPU per
step, from ``_util``). The three run the same settings as far as the algorithms allow: 1 remote
env runner with 1 env, 64x64 tanh actor and critic (no shared layers), 1 torch thread, an
iteration of ``--batch`` env steps, learnt in ``--epochs`` passes (1 by default) of one gradient
step on the whole batch each, or of minibatches of ``--minibatch`` rows (the same SGD steps per
sampled step in all three):

- cairn PPO: ``train_batch_size=batch``, ``minibatch_size=batch``, ``num_epochs=epochs`` (after
  the runner sampled the whole batch);
- cairn APPO: ``rollout_fragment_length=--fragment``, ``train_batch_size=batch``,
  ``minibatch_size=None`` (the whole batch), ``num_epochs=epochs``, ``broadcast_interval=1``,
  ``max_requests_in_flight_per_env_runner=--requests-in-flight``;
- RLlib APPO: the same fragment and requests in flight, ``train_batch_size_per_learner=batch``,
  ``minibatch_size=None``,
  ``num_epochs=epochs``, ``broadcast_interval=1``, ``circular_buffer_iterations_per_batch=1`` (its
  default 2 would learn each batch twice), ``num_learners=0`` (the learner in the driver, as
  cairn's), and ``min_time_s_per_iteration=0`` with ``min_sample_timesteps_per_iteration=batch``
  (its default is at least 10 s per ``train()``) so that its iteration is also one batch.

Reported: env steps/s sampled (and trained) over ``--iters`` iterations after ``--warmup``,
medians over ``--reps`` repetitions in rotating order, the ratios cairn APPO / cairn PPO and
cairn APPO / RLlib APPO, cairn APPO's mean policy lag (learner updates between the acting and
the learning weights, over the timed iterations), and the load average after each measurement.
The overlap only pays where sampling and learning each get a core: on a machine whose 2 cores
are busy with other jobs, the APPO / PPO ratio measures the load as much as cairn.

Run: ``PYTHONPATH=$PWD /work/bench-venv/bin/python bench/appo_throughput.py`` (RLlib lives in the
bench venv; ``PYTHONPATH`` makes it and Ray's workers import this checkout's cairn).
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
    BURN_US,
    REPO,
    cairn_code_line,
    command_line,
    fmt,
    load_average,
    machine_lines,
    make_burning_cartpole,
    median,
    ratio,
    start_ray,
    table,
    write_report,
)

KINDS = ("cairn PPO", "cairn APPO", "RLlib APPO")


def build(kind: str, args: Any) -> Any:
    """The algorithm ``kind`` on the burning CartPole with the shared settings (module docstring)."""
    env_config = {"burn_us": args.burn_us}
    if kind.startswith("cairn"):
        import cairn

        if kind == "cairn PPO":
            config: Any = (cairn.PPOConfig()
                           .env_runners(num_env_runners=1, num_envs_per_env_runner=1)
                           .training(train_batch_size=args.batch, minibatch_size=args.minibatch or args.batch,
                                     num_epochs=args.epochs, model={"hidden": [64, 64]}))
        else:
            config = (cairn.APPOConfig()
                      .env_runners(num_env_runners=1, num_envs_per_env_runner=1,
                                   rollout_fragment_length=args.fragment,
                                   max_requests_in_flight_per_env_runner=args.requests_in_flight)
                      .training(train_batch_size=args.batch, minibatch_size=args.minibatch,
                                num_epochs=args.epochs, broadcast_interval=1, model={"hidden": [64, 64]}))
        return (config.environment(make_burning_cartpole, env_config=env_config)
                .resources(torch_num_threads=1).debugging(seed=0).build())

    from ray.rllib.algorithms.appo import APPOConfig
    from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig
    from ray.tune.registry import register_env

    register_env("burning_cartpole", lambda cfg: make_burning_cartpole(env_config))
    return (APPOConfig().environment("burning_cartpole")
            .env_runners(num_env_runners=1, num_envs_per_env_runner=1,
                         rollout_fragment_length=args.fragment,
                         max_requests_in_flight_per_env_runner=args.requests_in_flight)
            .learners(num_learners=0)
            .training(train_batch_size_per_learner=args.batch, minibatch_size=args.minibatch,
                      num_epochs=args.epochs, broadcast_interval=1, circular_buffer_iterations_per_batch=1)
            .reporting(min_time_s_per_iteration=0, min_sample_timesteps_per_iteration=args.batch)
            .rl_module(model_config=DefaultModelConfig(fcnet_hiddens=[64, 64], fcnet_activation="tanh",
                                                       vf_share_layers=False))
            .debugging(seed=0, log_level="ERROR").build_algo())


def counts(kind: str, result: dict[str, Any], epochs: int) -> tuple[float, float]:
    """(env steps sampled, env steps trained) so far, from one ``train()`` result. RLlib counts a
    step once per epoch that learnt on it; divided by ``epochs`` here, to count it once as cairn."""
    if kind.startswith("cairn"):
        return result["num_env_steps_sampled_lifetime"], result["num_env_steps_trained_lifetime"]
    learners = result.get("learners", {}).get("__all_modules__", {})
    return (result["env_runners"]["num_env_steps_sampled_lifetime"],
            learners.get("num_env_steps_trained_lifetime", 0) / epochs)


def measure(kind: str, args: Any) -> dict[str, float]:
    """Build, ``--warmup`` iterations, then ``--iters`` timed ones: steps/s, lag, CPU."""
    import torch

    torch.set_num_threads(1)
    algo = build(kind, args)
    for _ in range(args.warmup):
        result = algo.train()
    sampled0, trained0 = counts(kind, result, args.epochs)
    lags = []
    cpu0, start = time.process_time(), time.perf_counter()
    for _ in range(args.iters):
        result = algo.train()
        lag = result.get("learners", {}).get("default_policy", {}).get("policy_lag_mean")
        if lag is not None and kind == "cairn APPO":
            lags.append(float(lag))
    elapsed, driver_cpu = time.perf_counter() - start, time.process_time() - cpu0
    sampled, trained = counts(kind, result, args.epochs)
    algo.stop()
    return {"sampled_per_s": (sampled - sampled0) / elapsed, "trained_per_s": (trained - trained0) / elapsed,
            "lag": sum(lags) / len(lags) if lags else float("nan"), "driver_cpu_share": driver_cpu / elapsed,
            "load": float(load_average())}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batch", type=int, default=500)
    parser.add_argument("--fragment", type=int, default=50)
    parser.add_argument("--minibatch", type=int, default=None,
                        help="rows per gradient step in all three (None: the whole batch)")
    parser.add_argument("--requests-in-flight", type=int, default=1,
                        help="APPO's max_requests_in_flight_per_env_runner (cairn and RLlib)")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=1,
                        help="passes over each batch, one gradient step on the whole batch each")
    parser.add_argument("--burn-us", type=float, default=BURN_US)
    parser.add_argument("--kinds", nargs="+", default=list(KINDS), choices=KINDS)
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "appo_throughput.md")
    args = parser.parse_args()

    start_ray(num_cpus=2)
    import ray

    kinds = [kind for kind in KINDS if kind in args.kinds]
    runs: dict[str, list[dict[str, float]]] = {kind: [] for kind in KINDS}
    loads_before = [load_average()]
    for rep in range(args.reps):
        for i in range(len(kinds)):
            kind = kinds[(rep + i) % len(kinds)]  # rotate which runs first
            runs[kind].append(measure(kind, args))
            print(rep, kind, runs[kind][-1], flush=True)
    ray.shutdown()

    def med(kind: str, key: str) -> float:
        return median(r[key] for r in runs[kind])

    rows = [[kind, fmt(med(kind, "sampled_per_s")), fmt(med(kind, "trained_per_s")),
             " / ".join(fmt(r["sampled_per_s"]) for r in runs[kind]),
             fmt(med(kind, "driver_cpu_share")), fmt(med(kind, "lag"))] for kind in KINDS]
    named = ("cairn PPO", "cairn APPO", "RLlib APPO")  # by name, not KINDS' order
    ppo, appo, rllib = (med(kind, "sampled_per_s") for kind in named)
    ppo_t, appo_t, rllib_t = (med(kind, "trained_per_s") for kind in named)
    loads = [f"{r['load']:.2f}" for rep in range(args.reps) for r in (runs[k][rep] for k in kinds)]
    lines = ["# APPO with 1 remote runner: cairn APPO vs cairn PPO vs RLlib APPO", "",
             f"Command: `{command_line()}`", "",
             *machine_lines([cairn_code_line(),
                             f"- Ray started with num_cpus=2; os.cpu_count()={os.cpu_count()}",
                             f"- Load average (1 min) before: {loads_before[0]}; after each measurement: "
                             f"{', '.join(loads)}"]), "",
             f"CartPole-v1 burning {args.burn_us:g} us of CPU per step; 1 remote env runner, 1 env; "
             f"iteration = {args.batch} env steps, {args.epochs} epoch(s) of minibatches of "
             f"{args.minibatch or args.batch} rows; APPO fragments of "
             f"{args.fragment} steps, {args.requests_in_flight} request(s) in flight per runner, "
             f"broadcast_interval=1; 64x64 tanh, 1 torch thread; {args.warmup} "
             f"warm-up and {args.iters} timed iterations, {args.reps} repetitions in rotating order. "
             "Settings per library: the script's docstring.", "",
             "## Env steps/s (medians)", "",
             *table(["algorithm", "sampled/s", "trained/s", "sampled/s per run", "driver CPU s / wall s",
                     "mean policy lag"], rows), "",
             f"- cairn APPO / cairn PPO: {ratio(appo, ppo):.2f}x sampled, {ratio(appo_t, ppo_t):.2f}x "
             "trained (target >= 1.6x, which assumes 2 free cores)",
             f"- cairn APPO / RLlib APPO: {ratio(appo, rllib):.2f}x sampled, {ratio(appo_t, rllib_t):.2f}x "
             "trained (target >= 2x)", ""]
    write_report(args.out, lines)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
