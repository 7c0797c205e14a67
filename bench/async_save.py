"""PPO training throughput while checkpointing every iteration: in the background
(``blocking=False``), blocking, and not at all (the anchor), side by side in one process.

Setting (the same in all three, and as in ``train_throughput.py``): CartPole-v1, 1 environment,
rollout 2048 steps, minibatch 64, 10 epochs, separate 64x64 tanh actor and critic, 1 torch
intra-op thread. Each run builds the algorithm, then trains ``--iterations`` iterations; the
two saving modes save after every iteration through a ``cairn.CheckpointManager`` (keep_last=3,
so retention deletes a checkpoint at each save, as a real run does) into a temporary
directory. The wall time covers the training loop and, for the background mode, the final
``manager.wait()``, so no write is left uncounted. The three modes rotate their order rep by
rep after a warm-up, so that the shared machine's load hits them alike; medians over reps.

On a machine shared with other jobs the wall clock mostly measures their load, so the script
also reports env steps per CPU second of the whole process (``time.process_time``: the
training thread plus the writer thread), the cost that saving adds whatever else runs, and
the main thread's CPU seconds alone (``time.thread_time``). From those it also gives a bound
that the machine's load cannot blur: what background saving takes from the training thread
per iteration (the ``save()`` call, during which training waits) plus the writer thread's CPU
(which may compete for a core), over the time of one iteration without saving.

Target (issue 12): background saving keeps >= 95% of the throughput of not saving.

    .venv/bin/python bench/async_save.py             # 5 reps x 3 modes x 8 iterations, ~4 min
    .venv/bin/python bench/async_save.py --quick     # smoke: 1 rep, 2 iterations
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _util import REPO, command_line, fmt, load_average, machine_lines, median, ratio, table

ROLLOUT = 2048
HPARAMS = dict(lr=3e-4, train_batch_size=ROLLOUT, minibatch_size=64, num_epochs=10, gamma=0.99,
               lambda_=0.95, clip_param=0.2, vf_coeff=0.5, entropy_coeff=0.0, grad_clip=0.5)
MODES = ("none", "background", "blocking")
TARGET = 0.95


def build(seed: int) -> Any:
    import cairn

    return (
        cairn.PPOConfig()
        .environment("CartPole-v1")
        .env_runners(num_envs_per_env_runner=1)
        .training(**HPARAMS, model={"hidden": [64, 64], "activation": "tanh", "vf_share_layers": False})
        .resources(torch_num_threads=1)
        .debugging(seed=seed)
        .build()
    )


def run(mode: str, seed: int, iterations: int) -> dict[str, Any]:
    import cairn

    algo = build(seed)
    load = load_average()
    save_calls: list[float] = []
    with tempfile.TemporaryDirectory() as root:
        manager = cairn.CheckpointManager(root, keep_last=3)
        start, cpu, main_cpu = time.perf_counter(), time.process_time(), time.thread_time()
        for _ in range(iterations):
            result = algo.train()
            if mode != "none":
                t = time.perf_counter()
                manager.save(algo, result, blocking=mode == "blocking")
                save_calls.append(time.perf_counter() - t)
        manager.wait()
        wall = time.perf_counter() - start
        cpu, main_cpu = time.process_time() - cpu, time.thread_time() - main_cpu
        kept = len(manager.checkpoints())
    steps = result["num_env_steps_sampled_lifetime"]
    algo.stop()
    return {"mode": mode, "seed": seed, "steps": steps, "wall_s": wall, "steps_per_s": steps / wall,
            "cpu_s": cpu, "steps_per_cpu_s": steps / cpu, "main_cpu_s": main_cpu,
            "save_call_ms": median(save_calls) * 1e3, "kept": kept, "load": load}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--iterations", type=int, default=8)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--out", default=str(REPO / "bench" / "results" / "async_save.md"))
    args = parser.parse_args()
    if args.quick:
        args.reps, args.iterations = 1, 2

    import torch

    torch.set_num_threads(1)
    run("background", 100, 2)  # warm-up: imports, first allocations, the writer thread
    runs: list[dict[str, Any]] = []
    for rep in range(args.reps):
        order = MODES[rep % 3:] + MODES[:rep % 3]
        for mode in order:
            runs.append(run(mode, rep, args.iterations))
            r = runs[-1]
            print(f"rep {rep} {mode:>10}: {r['steps_per_s']:8.1f} steps/s, "
                  f"{r['steps_per_cpu_s']:8.1f} steps/CPU-s, save call "
                  f"{r['save_call_ms']:.2f} ms, load {r['load']}", flush=True)

    speed = {mode: median(r["steps_per_s"] for r in runs if r["mode"] == mode) for mode in MODES}
    per_cpu = {mode: median(r["steps_per_cpu_s"] for r in runs if r["mode"] == mode) for mode in MODES}
    main_cpu = {mode: median(r["main_cpu_s"] for r in runs if r["mode"] == mode) for mode in MODES}
    calls = {mode: median(r["save_call_ms"] for r in runs if r["mode"] == mode) for mode in MODES}
    background, blocking = ratio(speed["background"], speed["none"]), ratio(speed["blocking"], speed["none"])
    cpu_background = ratio(per_cpu["background"], per_cpu["none"])
    bg_runs = [r for r in runs if r["mode"] == "background"]
    writer_ms = median((r["cpu_s"] - r["main_cpu_s"]) / args.iterations * 1e3 for r in bg_runs)
    iteration_ms = median(r["wall_s"] / args.iterations * 1e3 for r in runs if r["mode"] == "none")
    bound = (calls["background"] + writer_ms) / iteration_ms
    cpu_blocking = ratio(per_cpu["blocking"], per_cpu["none"])
    lines = [
        "# Training throughput while checkpointing every iteration",
        "",
        f"Command: `{command_line()}`",
        "",
        *machine_lines([f"- Settings: PPO CartPole-v1, rollout {ROLLOUT}, 10 epochs, minibatch 64, "
                        f"64x64 actor + critic, 1 torch thread; {args.iterations} iterations per run "
                        f"({args.iterations * ROLLOUT:,} env steps), {args.reps} reps per mode, modes "
                        "rotated rep by rep; CheckpointManager(keep_last=3) saving every iteration."]),
        "",
        "## Medians",
        "",
        *table(["mode", "env steps/s (wall)", "vs no saving", "env steps per CPU s", "vs no saving",
                "main-thread CPU s", "save() call (median ms)"],
               [[mode, fmt(speed[mode]), fmt(ratio(speed[mode], speed["none"]), 3), fmt(per_cpu[mode]),
                 fmt(ratio(per_cpu[mode], per_cpu["none"]), 3), fmt(main_cpu[mode]),
                 "-" if mode == "none" else fmt(calls[mode], 2)] for mode in MODES]),
        "",
        f"Background saving keeps **{background:.1%}** of the wall-clock throughput of not saving "
        f"(target >= {TARGET:.0%}: {'met' if background >= TARGET else 'NOT met'}) and "
        f"**{cpu_background:.1%}** per CPU second; blocking saving keeps {blocking:.1%} "
        f"(wall) and {cpu_blocking:.1%} (CPU).",
        "",
        f"Bound: per iteration, background saving holds the training thread for the save() call "
        f"({calls['background']:.2f} ms) and its writer thread uses {writer_ms:.2f} ms of CPU, "
        f"against {iteration_ms:,.0f} ms per iteration without saving: at most "
        f"**{bound:.2%}** of the throughput, i.e. at least {1 - bound:.1%} is kept.",
        "",
        "## Every run",
        "",
        *table(["rep", "mode", "env steps/s", "wall s", "CPU s", "main-thread CPU s", "save() call ms",
                "checkpoints kept", "load avg"],
               [[r["seed"], r["mode"], fmt(r["steps_per_s"]), fmt(r["wall_s"]), fmt(r["cpu_s"]),
                 fmt(r["main_cpu_s"]),
                 "-" if r["mode"] == "none" else fmt(r["save_call_ms"]), r["kept"], r["load"]]
                for r in runs]),
        "",
    ]
    Path(args.out).write_text("\n".join(lines))
    print("\n".join(lines[-(len(runs) + 12):]))


if __name__ == "__main__":
    main()
