"""PPO on continuous actions with observation and reward normalisation, cairn vs SB3.

Settings: rl-baselines3-zoo's tuned PPO hyperparameters (``hyperparams/ppo.yml``) for
Pendulum-v1 and MountainCarContinuous-v0, with ``normalize=True`` (SB3: ``VecNormalize`` with
``gamma`` = the algorithm's, clip 10 for observations and rewards; cairn:
``env_runners(observation_filter="MeanStdFilter")`` + ``training(normalize_rewards=True,
reward_clip=10.0)``), identical in both libraries, with two deviations from the zoo that
cairn cannot follow, applied to both: no gSDE (``use_sde=False``; cairn has a
state-independent log-std only) and orthogonal initialisation (the zoo's MountainCar entry
sets ``ortho_init=False``; cairn always initialises orthogonally). 64x64 tanh actor and
critic (SB3's MlpPolicy default), 1 torch thread in both.

Each run trains ``--steps`` env steps (default 100,000), then plays 10 greedy episodes
(deterministic actions; observations normalised with the frozen training statistics, raw
rewards). Env steps/s is the training loop's wall time alone. cairn and SB3 alternate seed by
seed, so that the shared machine's load hits both alike. The results file is rewritten after
every run, so an interrupted run leaves what finished.

    .bench-venv/bin/python bench/ppo_continuous.py            # full: 2 envs x 3 seeds x 2 libs
    .bench-venv/bin/python bench/ppo_continuous.py --quick    # smoke: 1 seed, few steps
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _util import REPO, command_line, fmt, load_average, machine_lines, median, ratio, table, train_until

EVAL_EPISODES = 10

#: rl-zoo's tuned entries (n_timesteps aside), in SB3's names.
ZOO: dict[str, dict[str, Any]] = {
    "Pendulum-v1": dict(n_envs=4, n_steps=1024, batch_size=64, gae_lambda=0.95, gamma=0.9,
                        n_epochs=10, ent_coef=0.0, learning_rate=1e-3, clip_range=0.2,
                        vf_coef=0.5, max_grad_norm=0.5, log_std_init=0.0),
    "MountainCarContinuous-v0": dict(n_envs=1, n_steps=8, batch_size=256, gae_lambda=0.9,
                                     gamma=0.9999, n_epochs=10, ent_coef=0.00429,
                                     learning_rate=7.77e-5, clip_range=0.1, vf_coef=0.19,
                                     max_grad_norm=5.0, log_std_init=-3.29),
}


def run_cairn(env_id: str, seed: int, steps: int) -> dict[str, Any]:
    import cairn

    h = ZOO[env_id]
    batch = h["n_steps"] * h["n_envs"]
    algo = (
        cairn.PPOConfig().environment(env_id)
        .env_runners(num_envs_per_env_runner=h["n_envs"], rollout_fragment_length=h["n_steps"],
                     observation_filter="MeanStdFilter")
        .training(lr=h["learning_rate"], gamma=h["gamma"], lambda_=h["gae_lambda"],
                  train_batch_size=batch, minibatch_size=min(h["batch_size"], batch),
                  num_epochs=h["n_epochs"], clip_param=h["clip_range"], vf_coeff=h["vf_coef"],
                  entropy_coeff=h["ent_coef"], grad_clip=h["max_grad_norm"],
                  normalize_rewards=True, reward_clip=10.0,
                  model={"hidden": [64, 64], "activation": "tanh", "log_std_init": h["log_std_init"]})
        .resources(torch_num_threads=1).debugging(seed=seed).build()
    )
    load = load_average()
    sampled, wall = train_until(algo, steps)
    evaluation = algo.evaluate(EVAL_EPISODES)
    algo.stop()
    return {"steps": sampled, "wall_s": wall, "steps_per_s": sampled / wall,
            "eval_return": evaluation["episode_return_mean"], "load": load}


def run_sb3(env_id: str, seed: int, steps: int) -> dict[str, Any]:
    import torch
    from stable_baselines3 import PPO
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.evaluation import evaluate_policy
    from stable_baselines3.common.vec_env import VecNormalize

    torch.set_num_threads(1)
    h = ZOO[env_id]
    env = VecNormalize(make_vec_env(env_id, n_envs=h["n_envs"], seed=seed), gamma=h["gamma"],
                       norm_obs=True, norm_reward=True, clip_obs=10.0, clip_reward=10.0)
    model = PPO(
        "MlpPolicy", env, n_steps=h["n_steps"], batch_size=min(h["batch_size"], h["n_steps"] * h["n_envs"]),
        gae_lambda=h["gae_lambda"], gamma=h["gamma"], n_epochs=h["n_epochs"], ent_coef=h["ent_coef"],
        learning_rate=h["learning_rate"], clip_range=h["clip_range"], vf_coef=h["vf_coef"],
        max_grad_norm=h["max_grad_norm"], use_sde=False, seed=seed, device="cpu",
        policy_kwargs={"log_std_init": h["log_std_init"], "ortho_init": True,
                       "net_arch": {"pi": [64, 64], "vf": [64, 64]}},
    )
    load = load_average()
    start = time.perf_counter()
    model.learn(total_timesteps=steps)
    wall = time.perf_counter() - start
    eval_env = VecNormalize(make_vec_env(env_id, n_envs=1, seed=seed + 10_000), training=False,
                            norm_reward=False, clip_obs=10.0)
    eval_env.obs_rms = env.obs_rms.copy()
    mean, _ = evaluate_policy(model, eval_env, n_eval_episodes=EVAL_EPISODES, deterministic=True)
    return {"steps": model.num_timesteps, "wall_s": wall, "steps_per_s": model.num_timesteps / wall,
            "eval_return": float(mean), "load": load}


def report(runs: list[dict[str, Any]], args: argparse.Namespace, out: Path) -> None:
    lines = ["# PPO continuous control with normalisation: cairn vs Stable-Baselines3", "",
             f"Command: `{command_line()}`", "", *machine_lines(), "",
             "Settings: rl-zoo's tuned PPO entries (see the script's docstring for the two "
             "deviations, applied to both: no gSDE, orthogonal init), observation and reward "
             f"normalisation on, {args.steps:,} env steps, greedy evaluation over "
             f"{EVAL_EPISODES} episodes with raw rewards.", ""]
    summary = []
    for env_id in args.envs:
        for lib in ("cairn", "sb3"):
            done = [r for r in runs if r["env"] == env_id and r["lib"] == lib]
            if done:
                summary.append((env_id, lib, len(done), median(r["steps"] for r in done),
                                median(r["eval_return"] for r in done),
                                median(r["steps_per_s"] for r in done)))
    lines += ["## Medians over the finished seeds", ""]
    lines += table(["env", "library", "seeds", "env steps", "greedy return", "env steps/s"],
                   [(e, lib, n, f"{s:,.0f}", fmt(ret, 1), fmt(sps, 0)) for e, lib, n, s, ret, sps in summary])
    speed = []
    for env_id in args.envs:
        sps = {lib: s for e, lib, _, _, _, s in summary if e == env_id}
        if "cairn" in sps and "sb3" in sps:
            speed.append((env_id, f"{ratio(sps['cairn'], sps['sb3']):.2f}x"))
    lines += ["", "cairn / SB3 env steps/s (medians): " + ", ".join(f"{e} {r}" for e, r in speed), ""]
    lines += ["## Every run", ""]
    lines += table(["env", "seed", "library", "env steps", "greedy return", "train wall (s)",
                    "env steps/s", "load avg at start"],
                   [(r["env"], r["seed"], r["lib"], f"{r['steps']:,}", fmt(r["eval_return"], 1),
                     fmt(r["wall_s"], 1), fmt(r["steps_per_s"], 0), r["load"]) for r in runs])
    out.write_text("\n".join(lines) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--envs", nargs="+", default=list(ZOO), choices=list(ZOO))
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--steps", type=int, default=100_000)
    parser.add_argument("--libs", nargs="+", default=["cairn", "sb3"], choices=["cairn", "sb3"])
    parser.add_argument("--quick", action="store_true", help="1 seed, 4,096 steps, no results file")
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "ppo_continuous.md")
    args = parser.parse_args()
    if args.quick:
        args.seeds, args.steps = args.seeds[:1], 4096
    runs: list[dict[str, Any]] = []
    for seed in args.seeds:
        for env_id in args.envs:
            for lib in args.libs:
                fn = run_cairn if lib == "cairn" else run_sb3
                result = {"env": env_id, "seed": seed, "lib": lib, **fn(env_id, seed, args.steps)}
                runs.append(result)
                print(f"{env_id} seed {seed} {lib}: return {result['eval_return']:.1f}, "
                      f"{result['steps_per_s']:.0f} steps/s "
                      f"({result['wall_s']:.0f} s, load {result['load']})",
                      flush=True)
                if not args.quick:
                    report(runs, args, args.out)
    if args.quick:
        report(runs, args, Path("/tmp/ppo_continuous_quick.md"))
        print(Path("/tmp/ppo_continuous_quick.md").read_text())


if __name__ == "__main__":
    main()
