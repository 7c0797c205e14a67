"""PPO with a CNN on pixels, env steps per second: cairn against SB3's CnnPolicy, side by side.

Config (both): Atari Breakout through ``cairn.envs.atari.make_atari_env`` (ale-py; no-op
reset, frame skip 4 with max-pooling, grey 84x84, sign-clipped rewards, 4 stacked frames:
observations uint8 ``(4, 84, 84)``), the same env object type on both sides, ``--envs``
environments stepped in lock step in one process (SB3: DummyVecEnv), rollout ``--n-steps``
per env, minibatch 256, 4 epochs, lr 2.5e-4, clip 0.1, entropy 0.01, value 0.5, gamma 0.99,
GAE 0.95, grad clip 0.5; network: the Nature CNN (32x8x4, 64x4x2, 64x3x1, dense 512, ReLU,
pixels / 255) shared by a linear policy head and a linear value head, orthogonal init (SB3's
CnnPolicy; cairn ``model={"hidden": [], "vf_share_layers": True}``). One torch thread each.
Runs alternate (SB3 first on even repetitions); the table reports medians. The clock covers
learning only (``learn()`` / ``train()`` calls), after both optimizers are built.

``--env pixelcue`` runs the synthetic PixelCue task (84x84, 4 channels) instead, for a
machine where no ROM loads.

Needs Stable-Baselines3 and ale-py; run it in the bench virtualenv:

    .bench-venv/bin/python bench/cnn_throughput.py [--steps 2048] [--reps 3] \\
        [--out bench/results/cnn_throughput.md]
"""

from __future__ import annotations

import argparse
import functools
import importlib.metadata
import sys
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _util import command_line, load_average, machine_lines, median, ratio

import cairn
from cairn.envs import make_pixel_cue
from cairn.envs.atari import make_atari_env

LR, CLIP, ENT, VF, GAMMA, LAMBDA, BATCH, EPOCHS, GRAD_CLIP = 2.5e-4, 0.1, 0.01, 0.5, 0.99, 0.95, 256, 4, 0.5


def _creator(env: str) -> tuple[Any, dict[str, Any]]:
    if env == "breakout":
        return make_atari_env, {"env_id": "ALE/Breakout-v5"}
    return make_pixel_cue, {"size": 84, "channels": 4, "length": 128}


def run_cairn(env: str, steps: int, n_envs: int, n_steps: int, seed: int) -> float:
    creator, env_config = _creator(env)
    config = (
        cairn.PPOConfig()
        .environment(creator, env_config=env_config)
        .env_runners(num_env_runners=0, num_envs_per_env_runner=n_envs)
        .training(lr=LR, train_batch_size=n_envs * n_steps, minibatch_size=BATCH, num_epochs=EPOCHS,
                  clip_param=CLIP, entropy_coeff=ENT, vf_coeff=VF, gamma=GAMMA, lambda_=LAMBDA,
                  grad_clip=GRAD_CLIP, model={"hidden": [], "vf_share_layers": True})
        .resources(torch_num_threads=1)
        .debugging(seed=seed)
    )
    algo = config.build()
    try:
        # SB3 builds its optimizer with the model; cairn on first use (it imports torch._dynamo,
        # about a second): build it before the clock starts on both sides.
        _ = algo.get_policy().optimizer
        start = time.perf_counter()
        while algo.counters["num_env_steps_sampled_lifetime"] < steps:
            algo.train()
        elapsed = time.perf_counter() - start
        return algo.counters["num_env_steps_sampled_lifetime"] / elapsed
    finally:
        algo.stop()


def run_sb3(env: str, steps: int, n_envs: int, n_steps: int, seed: int) -> float:
    from stable_baselines3 import PPO
    from stable_baselines3.common.vec_env import DummyVecEnv

    creator, env_config = _creator(env)
    vec_env = DummyVecEnv([functools.partial(creator, env_config) for _ in range(n_envs)])
    model = PPO(
        "CnnPolicy", vec_env, learning_rate=LR, n_steps=n_steps, batch_size=BATCH, n_epochs=EPOCHS,
        clip_range=CLIP, ent_coef=ENT, vf_coef=VF, gamma=GAMMA, gae_lambda=LAMBDA,
        max_grad_norm=GRAD_CLIP, seed=seed, device="cpu", verbose=0,
    )
    start = time.perf_counter()
    model.learn(total_timesteps=steps)
    elapsed = time.perf_counter() - start
    vec_env.close()
    return model.num_timesteps / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--env", choices=["breakout", "pixelcue"], default="breakout")
    parser.add_argument("--steps", type=int, default=2048)
    parser.add_argument("--envs", type=int, default=4)
    parser.add_argument("--n-steps", type=int, default=128)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    torch.set_num_threads(1)
    results: dict[str, list[float]] = {"sb3": [], "cairn": []}
    loads: list[str] = []
    for rep in range(args.reps):
        runs = [("sb3", functools.partial(run_sb3, args.env, args.steps, args.envs, args.n_steps, rep)),
                ("cairn", functools.partial(run_cairn, args.env, args.steps, args.envs, args.n_steps, rep))]
        for name, fn in runs if rep % 2 == 0 else runs[::-1]:
            loads.append(load_average())
            results[name].append(fn())
            print(f"rep {rep} {name}: {results[name][-1]:.1f} env steps/s (load {loads[-1]})", flush=True)
    table = render(results, args, loads)
    print(table)
    if args.out:
        Path(args.out).write_text(table)


def render(results: dict[str, list[float]], args: argparse.Namespace, loads: list[str]) -> str:
    med = {k: median(v) for k, v in results.items()}
    task = "Atari Breakout (ALE/Breakout-v5, ale-py)" if args.env == "breakout" else "PixelCue 4x84x84"
    lines = [
        "# PPO with the CNN on pixels (`bench/cnn_throughput.py`)",
        "",
        *machine_lines([f"- ale-py {importlib.metadata.version('ale-py')}"]),
        f"- Command: `{command_line()}`; load averages before each run: {', '.join(loads)}.",
        "",
        f"{task}, {args.envs} envs x {args.n_steps} steps per rollout, minibatch {BATCH}, {EPOCHS} "
        f"epochs, Nature CNN shared by the policy and value heads, 1 torch thread; {args.steps} env "
        f"steps per run, {args.reps} runs each, alternating order; medians.",
        "",
        "| library | env steps/s (median) | all runs | vs SB3 |",
        "|---|---:|---|---:|",
    ]
    names = {"sb3": "Stable-Baselines3 PPO CnnPolicy", "cairn": "cairn PPO (CNN encoder)"}
    for key, label in names.items():
        lines.append(f"| {label} | {med[key]:,.1f} | {', '.join(f'{x:,.1f}' for x in results[key])} | "
                     f"{ratio(med[key], med['sb3']):.2f}x |")
    lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
