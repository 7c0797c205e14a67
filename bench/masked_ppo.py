"""Masked PPO, cairn vs sb3-contrib's MaskablePPO, side by side in one process.

The env (``PickLegal``, the idea of tests/models/masked_env.py copied here): ``Discrete(n)``
actions; at every step a random subset of 1..n-1 actions is legal and one legal action pays
reward 1; the observation is the one-hot of the paying action. cairn reads it as PettingZoo's
convention ``{"observation": one-hot, "action_mask": mask}`` and masks by itself; MaskablePPO
gets the same env with the plain one-hot observation and the mask from ``env.action_masks()``
(sb3-contrib's protocol), so both networks see the same input. Illegal actions are counted
by the env (never punished); the count must be 0 for both.

Settings (identical): 1 env, rollout 2048, minibatch 64, 10 epochs, lr 3e-4, gamma 0.99, GAE
0.95, clip 0.2, vf coeff 0.5, entropy 0, grad clip 0.5, separate 64x64 tanh actor and critic,
1 torch intra-op thread (set by this script for both). Each run trains ``--steps`` env steps;
env steps/s = steps / wall time of the training loop alone (also per CPU second of the
process); then 20 greedy episodes. cairn and MaskablePPO alternate seed by seed (the order
swaps every seed) after one warm-up iteration of each.

Run with a venv that has sb3-contrib (see bench/results/history.md, section "Masked PPO"):

    /tmp/benchvenv27/bin/python bench/masked_ppo.py            # 3 seeds x 20,480 steps
    /tmp/benchvenv27/bin/python bench/masked_ppo.py --quick
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

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
    sb3_ppo_kwargs,
    table,
    write_report,
)

N_ACTIONS = 8
LENGTH = 20
ROLLOUT = 2048
HPARAMS = dict(lr=3e-4, train_batch_size=ROLLOUT, minibatch_size=64, num_epochs=10, gamma=0.99,
               lambda_=0.95, clip_param=0.2, vf_coeff=0.5, entropy_coeff=0.0, grad_clip=0.5)
HIDDEN = [64, 64]
EVAL_EPISODES = 20
ILLEGAL = {"count": 0, "steps": 0}  # every PickLegal instance adds to these


# ---------------------------------------------------------------------------------- the env
class PickLegal(gym.Env):
    """A random legal subset each step; the observation names the paying legal action."""

    def __init__(self, env_config: dict[str, Any] | None = None) -> None:
        config = dict(env_config or {})
        self.n = int(config.get("n", N_ACTIONS))
        self.length = int(config.get("length", LENGTH))
        self.observation_space = gym.spaces.Dict({
            "observation": gym.spaces.Box(0.0, 1.0, (self.n,), np.float32),
            "action_mask": gym.spaces.Box(0, 1, (self.n,), np.int8),
        })
        self.action_space = gym.spaces.Discrete(self.n)
        self._t = 0

    def _observe(self) -> dict[str, np.ndarray]:
        k = int(self.np_random.integers(1, self.n))
        legal = self.np_random.choice(self.n, size=k, replace=False)
        mask = np.zeros(self.n, dtype=np.int8)
        mask[legal] = 1
        self._mask, self._pays = mask, int(self.np_random.choice(legal))
        observation = np.zeros(self.n, dtype=np.float32)
        observation[self._pays] = 1.0
        return {"observation": observation, "action_mask": mask.copy()}

    def reset(self, *, seed: int | None = None, options: Any = None) -> tuple[Any, dict]:
        super().reset(seed=seed)
        self._t = 0
        return self._observe(), {}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        action = int(action)
        ILLEGAL["steps"] += 1
        ILLEGAL["count"] += int(not self._mask[action])
        reward = float(action == self._pays)
        self._t += 1
        return self._observe(), reward, False, self._t >= self.length, {}


class PickLegalSB3(PickLegal):
    """The same env for sb3-contrib: the one-hot observation alone, the mask via action_masks()."""

    def __init__(self, env_config: dict[str, Any] | None = None) -> None:
        super().__init__(env_config)
        self.observation_space = self.observation_space["observation"]

    def reset(self, *, seed: int | None = None, options: Any = None) -> tuple[Any, dict]:
        obs, info = super().reset(seed=seed, options=options)
        return obs["observation"], info

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        obs, *rest = super().step(action)
        return (obs["observation"], *rest)  # type: ignore[return-value]

    def action_masks(self) -> np.ndarray:
        return self._mask.astype(bool)


def make_pick_legal(env_config: dict[str, Any]) -> PickLegal:
    return PickLegal(env_config)


def random_legal_return() -> float:
    """Expected return of a uniformly random legal player: LENGTH * E[1/k], k ~ U{1..n-1}."""
    return LENGTH * float(np.mean([1.0 / k for k in range(1, N_ACTIONS)]))


# ------------------------------------------------------------------------------------ cairn
def run_cairn(seed: int, steps: int) -> dict[str, Any]:
    import cairn

    algo = (cairn.PPOConfig().environment(make_pick_legal)
            .env_runners(num_envs_per_env_runner=1)
            .training(**HPARAMS, model={"hidden": HIDDEN, "activation": "tanh",
                                        "vf_share_layers": False})
            .evaluation(evaluation_duration=EVAL_EPISODES)
            .resources(torch_num_threads=1)
            .debugging(seed=seed).build())
    load = load_average()
    before = dict(ILLEGAL)
    start, cpu = time.perf_counter(), time.process_time()
    sampled, last = 0, {}
    while sampled < steps:
        last = algo.train()
        sampled = int(last["num_env_steps_sampled_lifetime"])
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu
    illegal = ILLEGAL["count"] - before["count"]
    ret = float(algo.evaluate()["episode_return_mean"])
    algo.stop()
    return {"steps": sampled, "wall_s": wall, "cpu_s": cpu, "steps_per_s": sampled / wall,
            "steps_per_cpu_s": sampled / cpu, "eval_return": ret,
            "train_return": float(last.get("episode_return_mean", float("nan"))),
            "illegal": ILLEGAL["count"] - before["count"] - illegal, "load": load,
            "illegal_train": illegal}


# -------------------------------------------------------------------------------- MaskablePPO
def run_sb3(seed: int, steps: int) -> dict[str, Any]:
    import torch
    from sb3_contrib import MaskablePPO
    from sb3_contrib.common.maskable.evaluation import evaluate_policy
    from stable_baselines3.common.monitor import Monitor
    from stable_baselines3.common.vec_env import DummyVecEnv

    env = DummyVecEnv([lambda: Monitor(PickLegalSB3())])
    env.seed(seed)
    model = MaskablePPO(
        "MlpPolicy", env, n_steps=ROLLOUT, **sb3_ppo_kwargs(HPARAMS),
        policy_kwargs=dict(net_arch=dict(pi=HIDDEN, vf=HIDDEN), activation_fn=torch.nn.Tanh),
        seed=seed, device="cpu", verbose=0,
    )
    load = load_average()
    before = ILLEGAL["count"]
    start, cpu = time.perf_counter(), time.process_time()
    model.learn(total_timesteps=steps)
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu
    illegal = ILLEGAL["count"] - before
    sampled = int(model.num_timesteps)
    episodes = [e["r"] for e in model.ep_info_buffer]
    train_return = float(np.mean(episodes)) if episodes else float("nan")
    eval_env = DummyVecEnv([lambda: Monitor(PickLegalSB3())])
    eval_env.seed(seed + 10_000)
    before = ILLEGAL["count"]
    mean, _ = evaluate_policy(model, eval_env, n_eval_episodes=EVAL_EPISODES, deterministic=True,
                              use_masking=True)
    eval_env.close()
    env.close()
    return {"steps": sampled, "wall_s": wall, "cpu_s": cpu, "steps_per_s": sampled / wall,
            "steps_per_cpu_s": sampled / cpu, "eval_return": float(mean),
            "train_return": train_return, "illegal": ILLEGAL["count"] - before, "load": load,
            "illegal_train": illegal}


# ------------------------------------------------------------------------------------ main
def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=10 * ROLLOUT)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    if args.quick:
        args.seeds, args.steps = 1, 2 * ROLLOUT
    out_path = args.out or (None if args.quick else REPO / "bench/results/masked_ppo.md")

    import torch

    torch.set_num_threads(1)
    load_before = load_average()
    run_cairn(100, ROLLOUT)  # warm-up of both, not recorded
    run_sb3(100, ROLLOUT)
    runs: dict[str, list[dict[str, Any]]] = {"cairn": [], "sb3": []}
    for seed in range(args.seeds):
        for lib in (("cairn", "sb3") if seed % 2 == 0 else ("sb3", "cairn")):
            res = (run_cairn if lib == "cairn" else run_sb3)(seed, args.steps)
            res["seed"] = seed
            runs[lib].append(res)
            print(f"{lib:5s} seed {seed}: {res['steps_per_s']:7.0f} steps/s "
                  f"({res['steps_per_cpu_s']:.0f} per CPU s), greedy return "
                  f"{res['eval_return']:.2f}, last training episodes {res['train_return']:.2f}, "
                  f"illegal {res['illegal_train']} + {res['illegal']}, load {res['load']}",
                  flush=True)
    load_after = load_average()

    med = {lib: {k: median(r[k] for r in rs) for k in
                 ("steps_per_s", "steps_per_cpu_s", "eval_return", "train_return")}
           for lib, rs in runs.items()}
    speed = ratio(med["cairn"]["steps_per_s"], med["sb3"]["steps_per_s"])
    speed_cpu = ratio(med["cairn"]["steps_per_cpu_s"], med["sb3"]["steps_per_cpu_s"])
    pairs = list(zip(runs["cairn"], runs["sb3"], strict=True))
    illegal_total = sum(r["illegal"] + r["illegal_train"] for rs in runs.values() for r in rs)
    print(f"median steps/s cairn {med['cairn']['steps_per_s']:.0f}, MaskablePPO "
          f"{med['sb3']['steps_per_s']:.0f}: {speed:.2f}x (per CPU s {speed_cpu:.2f}x); greedy "
          f"return {med['cairn']['eval_return']:.2f} vs {med['sb3']['eval_return']:.2f}; "
          f"illegal {illegal_total}")
    lines = [
        "# Masked PPO: cairn vs sb3-contrib MaskablePPO",
        "",
        f"Command: `{command_line()}`",
        "",
        *machine_lines([cairn_code_line(),
                        f"- sb3-contrib {__import__('sb3_contrib').__version__}; load average "
                        f"(1 min) before / after: {load_before} / {load_after}"]),
        "",
        f"Env: PickLegal, Discrete({N_ACTIONS}), {LENGTH} steps per episode, a random legal "
        f"subset of 1..{N_ACTIONS - 1} actions each step, reward 1 for the legal action the "
        f"one-hot observation names (max return {LENGTH}; a uniformly random legal player "
        f"gets {random_legal_return():.2f}, a random player ignoring the mask "
        f"{LENGTH / N_ACTIONS:.2f}). Settings identical in both: 1 env, rollout {ROLLOUT}, "
        "minibatch 64, 10 epochs, lr 3e-4, gamma 0.99, GAE 0.95, clip 0.2, vf 0.5, entropy 0, "
        "grad clip 0.5, separate 64x64 tanh actor and critic, 1 torch thread, "
        f"{args.steps:,} env steps per run; greedy return = mean of {EVAL_EPISODES} "
        "deterministic episodes after training (MaskablePPO: sb3-contrib's masked "
        "`evaluate_policy`). Runs alternate (order swapped every seed) after a warm-up.",
        "",
        *table(
            ["seed", "cairn steps/s", "MaskablePPO steps/s", "ratio", "ratio per CPU s",
             "cairn greedy / last training return", "MaskablePPO greedy / last training return",
             "illegal actions (cairn / MaskablePPO)", "load (cairn / MaskablePPO)"],
            [[c["seed"], fmt(c["steps_per_s"], 0), fmt(s["steps_per_s"], 0),
              fmt(ratio(c["steps_per_s"], s["steps_per_s"])),
              fmt(ratio(c["steps_per_cpu_s"], s["steps_per_cpu_s"])),
              f"{c['eval_return']:.2f} / {c['train_return']:.2f}",
              f"{s['eval_return']:.2f} / {s['train_return']:.2f}",
              f"{c['illegal'] + c['illegal_train']} / {s['illegal'] + s['illegal_train']}",
              f"{c['load']} / {s['load']}"] for c, s in pairs],
        ),
        "",
        *table(
            ["median", "cairn", "MaskablePPO", "cairn / MaskablePPO"],
            [["env steps/s", fmt(med["cairn"]["steps_per_s"], 0), fmt(med["sb3"]["steps_per_s"], 0),
              f"{speed:.2f}x"],
             ["env steps per CPU s", fmt(med["cairn"]["steps_per_cpu_s"], 0),
              fmt(med["sb3"]["steps_per_cpu_s"], 0), f"{speed_cpu:.2f}x"],
             ["greedy return", f"{med['cairn']['eval_return']:.2f}",
              f"{med['sb3']['eval_return']:.2f}", ""],
             ["mean return of the last 100 training episodes", f"{med['cairn']['train_return']:.2f}",
              f"{med['sb3']['train_return']:.2f}", ""]],
        ),
        "",
        f"Illegal actions taken in all runs (training and evaluation): {illegal_total}.",
        "",
    ]
    write_report(out_path, lines)


if __name__ == "__main__":
    main()
