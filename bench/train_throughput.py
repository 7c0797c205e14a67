"""PPO training throughput, cairn vs Stable-Baselines3, side by side in one process.

Setting (identical in both, and equal to SB3's PPO defaults): CartPole-v1, 1 environment,
rollout 2048 steps, minibatch 64, 10 epochs, lr 3e-4, gamma 0.99, GAE lambda 0.95, clip 0.2,
value coefficient 0.5, entropy 0, grad-norm clip 0.5, per-minibatch advantage normalisation,
separate 64x64 tanh actor and critic. Each run trains 51,200 env steps (25 iterations); the
wall time of the training loop alone (after building) gives env steps/s. Afterwards each run
plays 10 greedy (deterministic) episodes. cairn and SB3 alternate seed by seed after a warm-up,
so that the shared machine's load hits both alike.

It also times ``import cairn`` on top of ``import torch, gymnasium`` in fresh interpreters.

Run with the bench virtualenv (``bench/setup_env.sh``):

    .bench-venv/bin/python bench/train_throughput.py            # full: 3 seeds, ~5 min
    .bench-venv/bin/python bench/train_throughput.py --quick    # smoke: 1 seed, 4,096 steps
    .bench-venv/bin/python bench/train_throughput.py --profile  # also cProfile one cairn train()
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import pstats
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _util import (
    REPO,
    command_line,
    fmt,
    load_average,
    machine_lines,
    median,
    ratio,
    sb3_ppo_kwargs,
    table,
    train_until,
    write_report,
)

ENV_ID = "CartPole-v1"
ROLLOUT = 2048
HPARAMS = dict(lr=3e-4, train_batch_size=ROLLOUT, minibatch_size=64, num_epochs=10, gamma=0.99,
               lambda_=0.95, clip_param=0.2, vf_coeff=0.5, entropy_coeff=0.0, grad_clip=0.5)
HIDDEN = [64, 64]
EVAL_EPISODES = 10
TARGET_SPEEDUP = 2.0
TARGET_RETURN = 475.0
TARGET_IMPORT_S = 0.3


# ------------------------------------------------------------------------------------ cairn
def build_cairn(seed: int) -> Any:
    import cairn

    return (
        cairn.PPOConfig()
        .environment(ENV_ID)
        .env_runners(num_envs_per_env_runner=1)
        .training(**HPARAMS, model={"hidden": HIDDEN, "activation": "tanh",
                                    "vf_share_layers": False})
        .evaluation(evaluation_duration=EVAL_EPISODES)
        .debugging(seed=seed)
        .build()
    )


def run_cairn(seed: int, steps: int) -> dict[str, Any]:
    algo = build_cairn(seed)
    load = load_average()
    sampled, wall = train_until(algo, steps)
    ret = float(algo.evaluate()["episode_return_mean"])
    algo.stop()
    return {"steps": sampled, "wall_s": wall, "steps_per_s": sampled / wall, "eval_return": ret,
            "load": load}


# --------------------------------------------------------------------------------------- SB3
def build_sb3(seed: int) -> Any:
    import torch
    from stable_baselines3 import PPO

    return PPO(
        "MlpPolicy", ENV_ID, n_steps=ROLLOUT, **sb3_ppo_kwargs(HPARAMS),
        policy_kwargs=dict(net_arch=dict(pi=HIDDEN, vf=HIDDEN), activation_fn=torch.nn.Tanh),
        seed=seed, device="cpu", verbose=0,
    )


def run_sb3(seed: int, steps: int) -> dict[str, Any]:
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.evaluation import evaluate_policy

    model = build_sb3(seed)
    load = load_average()
    start = time.perf_counter()
    model.learn(total_timesteps=steps)
    wall = time.perf_counter() - start
    sampled = int(model.num_timesteps)
    eval_env = make_vec_env(ENV_ID, n_envs=1, seed=seed + 10_000)
    mean, _ = evaluate_policy(model, eval_env, n_eval_episodes=EVAL_EPISODES, deterministic=True)
    eval_env.close()
    model.env.close()
    return {"steps": sampled, "wall_s": wall, "steps_per_s": sampled / wall,
            "eval_return": float(mean), "load": load}


# ----------------------------------------------------------------------------- import time
_IMPORT_SNIPPETS = {
    # Each prints seconds measured inside a fresh interpreter (startup itself excluded).
    "torch+gymnasium": "import time;t=time.perf_counter();import torch, gymnasium;"
                       "print(time.perf_counter()-t)",
    "cairn": "import time;t=time.perf_counter();import cairn;print(time.perf_counter()-t)",
    "cairn after torch+gymnasium": "import time;import torch, gymnasium;t=time.perf_counter();"
                                   "import cairn;print(time.perf_counter()-t)",
    "stable_baselines3 after torch+gymnasium": "import time;import torch, gymnasium;"
                                               "t=time.perf_counter();import stable_baselines3;"
                                               "print(time.perf_counter()-t)",
}


def import_times(repeats: int) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {k: [] for k in _IMPORT_SNIPPETS}
    for _ in range(repeats + 1):  # the first round warms the page cache and is dropped
        for name, code in _IMPORT_SNIPPETS.items():
            res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                 check=True, cwd=REPO)
            out[name].append(float(res.stdout.strip().splitlines()[-1]))
    return {k: v[1:] for k, v in out.items()}


def ray_modules_after_import() -> list[str]:
    code = ("import json, sys, cairn; print(json.dumps(sorted({m.split('.')[0] for m in "
            "sys.modules} & {'ray', 'stable_baselines3', 'onnx', 'onnxruntime', 'fsspec'})))")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return list(json.loads(res.stdout.strip().splitlines()[-1]))


# -------------------------------------------------------------------------------- profile
def profile_cairn(top: int = 25) -> str:
    algo = build_cairn(0)
    algo.train()  # warm-up
    prof = cProfile.Profile()
    prof.enable()
    algo.train()
    prof.disable()
    algo.stop()
    buf = io.StringIO()
    stats = pstats.Stats(prof, stream=buf)
    stats.sort_stats("tottime").print_stats(top)
    buf.write("\n--- by cumulative time ---\n")
    stats.sort_stats("cumulative").print_stats(top)
    lines = [ln for ln in buf.getvalue().splitlines() if ln.strip()]
    return "\n".join(ln.replace(str(REPO) + "/", "") for ln in lines)


# ------------------------------------------------------------------------------------ main
def alt_section(alt_runs: dict[str, list[dict[str, Any]]] | None, args: Any) -> list[str]:
    if not alt_runs:
        return []
    c, s = alt_runs["cairn"][0], alt_runs["sb3"][0]
    return [
        f"## Contrast: torch threads `{args.alt_threads}` (intra-op {c['threads']}), seed 0, "
        f"{args.alt_steps:,} steps",
        "",
        *table(
            ["cairn steps/s", "SB3 steps/s", "ratio cairn/SB3", "load avg (cairn / SB3)"],
            [[fmt(c["steps_per_s"]), fmt(s["steps_per_s"]),
              fmt(ratio(c["steps_per_s"], s["steps_per_s"])), f"{c['load']} / {s['load']}"]],
        ),
        "",
    ]


def set_threads(setting: str, default: int) -> None:
    """Apply a torch intra-op thread setting to the whole process (both libraries alike)."""
    import torch

    torch.set_num_threads(default if setting == "default" else int(setting))


def run_seeds(seeds: Any, steps: int) -> dict[str, list[dict[str, Any]]]:
    import torch

    runs: dict[str, list[dict[str, Any]]] = {"cairn": [], "sb3": []}
    for seed in seeds:
        order = ("cairn", "sb3") if seed % 2 == 0 else ("sb3", "cairn")
        for lib in order:
            res = (run_cairn if lib == "cairn" else run_sb3)(seed, steps)
            res["seed"], res["threads"] = seed, torch.get_num_threads()
            runs[lib].append(res)
            print(f"{lib:5s} seed {seed}: {res['steps_per_s']:8.0f} steps/s "
                  f"({res['wall_s']:.1f} s), greedy return {res['eval_return']:.1f}, "
                  f"load {res['load']}, torch threads {res['threads']}", flush=True)
    return runs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smoke mode: 1 seed, 2 iterations")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=51_200)
    parser.add_argument("--import-repeats", type=int, default=5)
    parser.add_argument("--threads", default="default",
                        help="torch intra-op threads for both libraries: 'default' (torch's "
                             "choice) or an int")
    parser.add_argument("--alt-threads", default="none",
                        help="also run 1 seed with this thread setting ('default', an int, or "
                             "'none') for contrast")
    parser.add_argument("--alt-steps", type=int, default=2 * ROLLOUT)
    parser.add_argument("--profile", action="store_true", help="cProfile one cairn train()")
    parser.add_argument("--out", type=Path, default=None,
                        help="Markdown results file (default: bench/results/train_throughput.md; "
                             "--quick writes none unless given)")
    parser.add_argument("--json", type=Path, default=None, help="also dump raw numbers here")
    args = parser.parse_args()
    if args.quick:
        args.seeds, args.steps, args.import_repeats = 1, 2 * ROLLOUT, 2
    out_path = args.out or (None if args.quick else REPO / "bench/results/train_throughput.md")

    import torch

    default_threads = torch.get_num_threads()
    threads = (default_threads, torch.get_num_interop_threads())
    print(f"torch default threads: intra-op {threads[0]}, inter-op {threads[1]}", flush=True)

    # Warm-up: one iteration of each (imports, allocator, first-touch memory), not recorded.
    set_threads(args.threads, default_threads)
    run_cairn(100, ROLLOUT)
    run_sb3(100, ROLLOUT)
    threads_after = (torch.get_num_threads(), torch.get_num_interop_threads())

    set_threads(args.threads, default_threads)
    runs = run_seeds(range(args.seeds), args.steps)
    alt_runs = None
    if args.alt_threads != "none":
        print(f"-- alternative torch threads: {args.alt_threads}", flush=True)
        set_threads(args.alt_threads, default_threads)
        alt_runs = run_seeds([0], args.alt_steps)
        set_threads(args.threads, default_threads)

    imports = import_times(args.import_repeats)
    for name, values in imports.items():
        print(f"import {name}: median {median(values):.3f} s  {[round(v, 3) for v in values]}")
    heavy = ray_modules_after_import()

    med = {lib: {k: median(r[k] for r in rs) for k in ("steps_per_s", "eval_return", "wall_s")}
           for lib, rs in runs.items()}
    speedup = ratio(med["cairn"]["steps_per_s"], med["sb3"]["steps_per_s"])
    per_seed_ratio = [ratio(c["steps_per_s"], s["steps_per_s"])
                      for c, s in zip(runs["cairn"], runs["sb3"], strict=True)]
    import_delta = median(imports["cairn after torch+gymnasium"])
    import_delta_alt = median(imports["cairn"]) - median(imports["torch+gymnasium"])
    met = {
        "speed": speedup >= TARGET_SPEEDUP,
        "return": med["cairn"]["eval_return"] >= TARGET_RETURN,
        "import": import_delta <= TARGET_IMPORT_S,
    }
    print(f"median steps/s: cairn {med['cairn']['steps_per_s']:.0f}, "
          f"SB3 {med['sb3']['steps_per_s']:.0f}, ratio {speedup:.2f}; targets met: {met}")

    profile_text = profile_cairn() if args.profile else None
    if profile_text:
        print(profile_text)

    yes = {True: "**met**", False: "**MISSED**"}
    lines = [
        "# Training throughput: cairn PPO vs Stable-Baselines3 PPO",
        "",
        f"Command: `{command_line()}` (environment: `bash bench/setup_env.sh`).",
        "",
        *machine_lines([
            f"- torch threads: default on this machine intra-op {threads[0]}, inter-op "
            f"{threads[1]}; neither cairn nor SB3 changes them. Main tables: `--threads "
            f"{args.threads}` -> intra-op {threads_after[0]} for both libraries, set by this "
            "script with `torch.set_num_threads` (cairn's code was not modified).",
        ]),
        "",
        "Setting, identical in both: PPO on CartPole-v1, 1 env, rollout 2048, minibatch 64, "
        "10 epochs, lr 3e-4, gamma 0.99, GAE 0.95, clip 0.2, vf coeff 0.5, entropy 0, grad clip "
        "0.5, separate 64x64 tanh actor and critic (SB3: `net_arch=dict(pi=[64, 64], "
        "vf=[64, 64])`, `activation_fn=torch.nn.Tanh`), "
        f"{args.steps:,} env steps per run. Env steps/s = steps / wall time of the training "
        "loop only (`algo.train()` until the step count is reached vs `model.learn()`), "
        "measured after one warm-up iteration of each library in the same process; cairn and "
        f"SB3 alternate seed by seed. Greedy return: mean of {EVAL_EPISODES} deterministic "
        "episodes after training (cairn: `algo.evaluate()`; SB3: `evaluate_policy(..., "
        "deterministic=True)`).",
        "",
        "## Per seed",
        "",
        *table(
            ["seed", "cairn steps/s", "SB3 steps/s", "ratio cairn/SB3", "cairn greedy return",
             "SB3 greedy return", "load avg (cairn / SB3)"],
            [[c["seed"], fmt(c["steps_per_s"]), fmt(s["steps_per_s"]),
              fmt(ratio(c["steps_per_s"], s["steps_per_s"])),
              fmt(c["eval_return"], 1), fmt(s["eval_return"], 1), f"{c['load']} / {s['load']}"]
             for c, s in zip(runs["cairn"], runs["sb3"], strict=True)],
        ),
        "",
        "## Medians and targets",
        "",
        *table(
            ["metric", "cairn", "SB3", "cairn / SB3", "target", "met?"],
            [
                ["env steps/s (median over seeds)", fmt(med["cairn"]["steps_per_s"]),
                 fmt(med["sb3"]["steps_per_s"]), f"{speedup:.2f}x (per seed: "
                 + ", ".join(f"{r:.2f}" for r in per_seed_ratio) + ")",
                 f">= {TARGET_SPEEDUP:.0f}x SB3", yes[met["speed"]]],
                [f"wall time for {args.steps:,} steps (s, median)", fmt(med["cairn"]["wall_s"], 1),
                 fmt(med["sb3"]["wall_s"], 1), fmt(ratio(med["cairn"]["wall_s"], med["sb3"]["wall_s"])),
                 "", ""],
                ["greedy return (median over seeds)", fmt(med["cairn"]["eval_return"], 1),
                 fmt(med["sb3"]["eval_return"], 1), "", f">= {TARGET_RETURN:.0f}",
                 yes[met["return"]]],
            ],
        ),
        "",
        *alt_section(alt_runs, args),
        f"## Import time (fresh interpreters, {args.import_repeats} repeats after one "
        "dropped warm-up round, medians)",
        "",
        *table(
            ["what", "median (s)", "all (s)"],
            [[name, f"{median(v):.3f}", ", ".join(f"{x:.3f}" for x in v)]
             for name, v in imports.items()],
        ),
        "",
        f"`import cairn` costs {import_delta:.3f} s on top of `import torch, gymnasium` "
        f"(difference of the separate medians: {import_delta_alt:.3f} s); target <= "
        f"{TARGET_IMPORT_S} s: {yes[met['import']]}. Optional heavy modules loaded by "
        f"`import cairn`: {heavy or 'none'}.",
        "",
    ]
    if profile_text:
        lines += ["## cProfile of one cairn `algo.train()` (after one warm-up iteration)", "",
                  "```", profile_text, "```", ""]
    write_report(out_path, lines)
    if args.json:
        args.json.write_text(json.dumps({"runs": runs, "imports": imports, "threads": threads,
                                         "medians": med, "met": met}, indent=1))


if __name__ == "__main__":
    main()
