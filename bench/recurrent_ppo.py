"""Recurrent PPO, cairn (``model={"use_lstm": True}``) vs sb3-contrib's RecurrentPPO, side by side.

The task: CartPole-v1 with the velocities hidden (``cairn.envs.StatelessCartPole``, sb3-contrib's
``CartPoleNoVel``: cart position and pole angle only), which a feed-forward policy does not
solve; cairn's feed-forward PPO runs once on it too, as the control.

Settings (identical where both have the knob): 8 envs, 64 steps per env per rollout (512 per
iteration), minibatch 128 env steps, 10 epochs, lr 1e-3, gamma 0.98, GAE 0.8, clip 0.2, vf coeff
0.5, entropy 0, grad clip 0.5, normalised advantages, one LSTM of 64 units read directly from
the observation (cairn: ``hidden=[]``; sb3-contrib: ``net_arch=[]``), its output shared by the
linear policy and value heads, the value loss's gradient stopped at the LSTM (sb3-contrib:
``shared_lstm=True, enable_critic_lstm=False``; cairn: ``vf_share_layers=True,
vf_stop_gradient=True``; ``--sharing`` picks another of cairn's), tanh, orthogonal init, 1 torch
thread. Sequences: sb3-contrib trains on each env's whole rollout cut at episode starts; cairn
with ``max_seq_len=64`` (the rollout length) cuts at the same places. Env steps/s = steps / wall
time of the training loop alone (also per CPU second of the process); the greedy return (mean of
20 deterministic episodes) is taken after each quarter of the budget, outside the timed loop,
since PPO with a constant learning rate can lose what it learned on this task. cairn and
RecurrentPPO alternate seed by seed (the order swaps every seed) after a warm-up.

Run with a venv that has sb3-contrib (bench/setup_env.sh):

    /tmp/benchvenv27/bin/python bench/recurrent_ppo.py            # 2 seeds x 100,352 steps
    /tmp/benchvenv27/bin/python bench/recurrent_ppo.py --quick
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

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

N_ENVS = 8
N_STEPS = 64
CELL = 64
HPARAMS = dict(lr=1e-3, train_batch_size=N_ENVS * N_STEPS, minibatch_size=128, num_epochs=10,
               gamma=0.98, lambda_=0.8, clip_param=0.2, vf_coeff=0.5, entropy_coeff=0.0, grad_clip=0.5)
EVAL_EPISODES = 20
#: cairn's value sharing: the network sb3-contrib builds here (shared_lstm=True, enable_critic_lstm=False).
SHARINGS: dict[str, dict[str, bool]] = {
    "stopped": {"vf_share_layers": True, "vf_stop_gradient": True},
    "shared": {"vf_share_layers": True, "vf_stop_gradient": False},
    "separate": {"vf_share_layers": False, "vf_stop_gradient": False},  # cairn's default: own critic LSTM
}


# ------------------------------------------------------------------------------------ cairn
def run_cairn(seed: int, steps: int, *, lstm: bool = True, sharing: str = "stopped") -> dict[str, Any]:
    import cairn
    from cairn.envs import make_stateless_cartpole

    model = ({"use_lstm": True, "lstm_cell_size": CELL, "max_seq_len": N_STEPS, "hidden": [],
              **SHARINGS[sharing]} if lstm else {"hidden": [64, 64]})
    algo = (cairn.PPOConfig().environment(make_stateless_cartpole)
            .env_runners(num_envs_per_env_runner=N_ENVS)
            .training(**HPARAMS, model=model)
            .evaluation(evaluation_duration=EVAL_EPISODES)
            .resources(torch_num_threads=1)
            .debugging(seed=seed).build())
    load = load_average()
    wall = cpu = 0.0
    sampled, last, curve = 0, {}, []
    for quarter in range(1, 5):
        start, cpu_start = time.perf_counter(), time.process_time()
        while sampled < steps * quarter // 4:
            last = algo.train()
            sampled = int(last["num_env_steps_sampled_lifetime"])
        wall, cpu = wall + time.perf_counter() - start, cpu + time.process_time() - cpu_start
        curve.append(float(algo.evaluate()["episode_return_mean"]))
    algo.stop()
    return {"steps": sampled, "wall_s": wall, "cpu_s": cpu, "steps_per_s": sampled / wall,
            "steps_per_cpu_s": sampled / cpu, "eval_return": curve[-1], "curve": curve,
            "train_return": float(last.get("episode_return_mean", float("nan"))), "load": load}


# ------------------------------------------------------------------------------- RecurrentPPO
def run_sb3(seed: int, steps: int) -> dict[str, Any]:
    import torch
    from sb3_contrib import RecurrentPPO
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.evaluation import evaluate_policy

    from cairn.envs import StatelessCartPole

    env = make_vec_env(StatelessCartPole, n_envs=N_ENVS, seed=seed)
    model = RecurrentPPO(
        "MlpLstmPolicy", env, n_steps=N_STEPS, **sb3_ppo_kwargs(HPARAMS),
        policy_kwargs=dict(lstm_hidden_size=CELL, n_lstm_layers=1, shared_lstm=True,
                           enable_critic_lstm=False, net_arch=[], activation_fn=torch.nn.Tanh),
        seed=seed, device="cpu", verbose=0,
    )
    load = load_average()
    wall = cpu = 0.0
    curve = []
    eval_env = make_vec_env(StatelessCartPole, n_envs=1, seed=seed + 10_000)
    for quarter in range(1, 5):
        start, cpu_start = time.perf_counter(), time.process_time()
        # learn() continues the rollout (last observations, LSTM states) when not reset.
        model.learn(total_timesteps=steps * quarter // 4 - model.num_timesteps, reset_num_timesteps=False)
        wall, cpu = wall + time.perf_counter() - start, cpu + time.process_time() - cpu_start
        mean, _ = evaluate_policy(model, eval_env, n_eval_episodes=EVAL_EPISODES, deterministic=True)
        curve.append(float(mean))
    sampled = int(model.num_timesteps)
    episodes = [e["r"] for e in model.ep_info_buffer]
    eval_env.close()
    env.close()
    return {"steps": sampled, "wall_s": wall, "cpu_s": cpu, "steps_per_s": sampled / wall,
            "steps_per_cpu_s": sampled / cpu, "eval_return": curve[-1], "curve": curve,
            "train_return": float(np.mean(episodes)) if episodes else float("nan"), "load": load}


# ------------------------------------------------------------------------------------ main
def _line(lib: str, res: dict[str, Any]) -> str:
    return (f"{lib:12s} seed {res['seed']}: {res['steps_per_s']:7.0f} steps/s "
            f"({res['steps_per_cpu_s']:.0f} per CPU s), greedy return per quarter "
            f"{' / '.join(f'{x:.1f}' for x in res['curve'])}, "
            f"last training episodes {res['train_return']:.1f}, load {res['load']}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--steps", type=int, default=196 * N_ENVS * N_STEPS)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--sharing", choices=sorted(SHARINGS), default="stopped",
                        help="cairn's value sharing (default: sb3-contrib's shared_lstm, as RecurrentPPO "
                             "here)")
    args = parser.parse_args()
    if args.quick:
        args.seeds, args.steps = 1, 8 * N_ENVS * N_STEPS
    out_path = args.out or (None if args.quick else REPO / "bench/results/recurrent_ppo.md")

    import torch

    torch.set_num_threads(1)
    load_before = load_average()
    run_cairn(100, 2 * N_ENVS * N_STEPS)  # warm-up of both, not recorded
    run_sb3(100, 2 * N_ENVS * N_STEPS)
    runs: dict[str, list[dict[str, Any]]] = {"cairn": [], "sb3": []}
    for seed in range(args.seeds):
        for lib in (("cairn", "sb3") if seed % 2 == 0 else ("sb3", "cairn")):
            res = (run_cairn(seed, args.steps, sharing=args.sharing) if lib == "cairn"
                   else run_sb3(seed, args.steps))
            res["seed"] = seed
            runs[lib].append(res)
            print(_line(lib, res), flush=True)
    mlp = run_cairn(0, args.steps, lstm=False)
    mlp["seed"] = 0
    print(_line("cairn MLP", mlp), flush=True)
    load_after = load_average()

    med = {lib: {k: median(r[k] for r in rs) for k in
                 ("steps_per_s", "steps_per_cpu_s", "eval_return", "train_return")}
           for lib, rs in runs.items()}
    speed = ratio(med["cairn"]["steps_per_s"], med["sb3"]["steps_per_s"])
    speed_cpu = ratio(med["cairn"]["steps_per_cpu_s"], med["sb3"]["steps_per_cpu_s"])
    print(f"median steps/s cairn {med['cairn']['steps_per_s']:.0f}, RecurrentPPO "
          f"{med['sb3']['steps_per_s']:.0f}: {speed:.2f}x (per CPU s {speed_cpu:.2f}x); greedy "
          f"return {med['cairn']['eval_return']:.1f} vs {med['sb3']['eval_return']:.1f}")
    pairs = list(zip(runs["cairn"], runs["sb3"], strict=True))
    lines = [
        "# Recurrent PPO: cairn use_lstm vs sb3-contrib RecurrentPPO (CartPole, velocities hidden)",
        "",
        f"Command: `{command_line()}`",
        "",
        *machine_lines([cairn_code_line(),
                        f"- sb3-contrib {__import__('sb3_contrib').__version__}; load average "
                        f"(1 min) before / after: {load_before} / {load_after}"]),
        "",
        "Settings: see the docstring of bench/recurrent_ppo.py (8 envs x 64 steps, minibatch 128, "
        f"10 epochs, one shared 64-unit LSTM, 1 torch thread), {args.steps:,} env steps per run; "
        f"greedy return = mean of {EVAL_EPISODES} deterministic episodes after each quarter of the "
        "budget (max 500), not timed.",
        "",
        *table(
            ["seed", "cairn steps/s", "RecurrentPPO steps/s", "ratio", "ratio per CPU s",
             "cairn greedy per quarter (last training return)",
             "RecurrentPPO greedy per quarter (last training return)", "load (cairn / RecurrentPPO)"],
            [[c["seed"], fmt(c["steps_per_s"], 0), fmt(s["steps_per_s"], 0),
              fmt(ratio(c["steps_per_s"], s["steps_per_s"])),
              fmt(ratio(c["steps_per_cpu_s"], s["steps_per_cpu_s"])),
              f"{' / '.join(f'{x:.1f}' for x in c['curve'])} ({c['train_return']:.1f})",
              f"{' / '.join(f'{x:.1f}' for x in s['curve'])} ({s['train_return']:.1f})",
              f"{c['load']} / {s['load']}"] for c, s in pairs],
        ),
        "",
        *table(
            ["median", "cairn", "RecurrentPPO", "cairn / RecurrentPPO"],
            [["env steps/s", fmt(med["cairn"]["steps_per_s"], 0), fmt(med["sb3"]["steps_per_s"], 0),
              f"{speed:.2f}x"],
             ["env steps per CPU s", fmt(med["cairn"]["steps_per_cpu_s"], 0),
              fmt(med["sb3"]["steps_per_cpu_s"], 0), f"{speed_cpu:.2f}x"],
             ["greedy return", f"{med['cairn']['eval_return']:.1f}",
              f"{med['sb3']['eval_return']:.1f}", ""]],
        ),
        "",
        f"Control, cairn's feed-forward PPO (64x64 tanh, same settings, seed 0): greedy return per "
        f"quarter {' / '.join(f'{x:.1f}' for x in mlp['curve'])}, last training episodes "
        f"{mlp['train_return']:.1f}, "
        f"{mlp['steps_per_s']:.0f} env steps/s.",
        "",
    ]
    write_report(out_path, lines)


if __name__ == "__main__":
    main()
