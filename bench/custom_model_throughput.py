"""PPO throughput with a user's own network (``cairn.models.ActorCriticModel``) vs the built-in
MLP of the same shape, side by side in one process.

Both: CartPole-v1, 1 env, rollout 2048, minibatch 64, 10 epochs, lr 3e-4, gamma 0.99, GAE 0.95
(train_throughput.py's settings), separate 64x64 tanh actor and critic, 1 torch intra-op thread.
Variants, alternating run by run (the order rotates every repeat):

- ``builtin``: ``model={"hidden": [64, 64], "activation": "tanh", "vf_share_layers": False}``;
- ``custom``: ``model={"custom_model": MLPActorCritic}``, a plain torch module as a user writes
  it (``forward``, ``action_inputs`` and ``value`` overridden so that acting runs the actor only);
- ``custom_numpy`` (diagnosis): the same class plus a ``numpy_action_inputs`` method like the
  built-in network's (numpy on views of the parameters), which cairn's acting path
  (``cairn/policy/acting.py``) takes when a model has it. Not a documented API.

It also times one acting call (a single observation, the sampling loop's batch) through each
network's path, and the learner's forward+backward on a minibatch, to say where a gap comes from.

    .venv/bin/python bench/custom_model_throughput.py              # 5 repeats x 20,480 steps
    .venv/bin/python bench/custom_model_throughput.py --quick
"""

from __future__ import annotations

import argparse
import sys
import time
import timeit
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

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

import cairn
from cairn.models import ActorCriticModel

ENV_ID = "CartPole-v1"
ROLLOUT = 2048
HPARAMS = dict(lr=3e-4, train_batch_size=ROLLOUT, minibatch_size=64, num_epochs=10, gamma=0.99,
               lambda_=0.95, clip_param=0.2, vf_coeff=0.5, entropy_coeff=0.0, grad_clip=0.5)
TARGET = 1.1  # custom steps/s >= built-in / 1.1


class MLPActorCritic(ActorCriticModel):
    """Separate 64x64 tanh actor and critic, as the built-in network (default torch init)."""

    def __init__(self, observation_space, action_space, num_outputs, model_config):
        super().__init__(observation_space, action_space, num_outputs, model_config)
        h = int(model_config.get("hidden", 64))
        self.actor = nn.Sequential(nn.Linear(self.obs_size, h), nn.Tanh(), nn.Linear(h, h), nn.Tanh(),
                                   nn.Linear(h, num_outputs))
        self.critic = nn.Sequential(nn.Linear(self.obs_size, h), nn.Tanh(), nn.Linear(h, h), nn.Tanh(),
                                    nn.Linear(h, 1))

    def forward(self, obs):
        return self.actor(obs), self.critic(obs).squeeze(-1)

    def action_inputs(self, obs):
        return self.actor(obs)

    def value(self, obs):
        return self.critic(obs).squeeze(-1)


class MLPActorCriticNumpy(MLPActorCritic):
    """The same network with a numpy acting path on cached views of the live parameters (as the
    built-in network's ``numpy_action_inputs``; in-place optimizer steps show through them)."""

    _views: list[tuple[np.ndarray, np.ndarray]] | None = None

    def numpy_action_inputs(self, obs: np.ndarray) -> np.ndarray:
        if self._views is None:
            self._views = [(m.weight.detach().numpy().T, m.bias.detach().numpy())
                           for m in self.actor if isinstance(m, nn.Linear)]
        *hidden, (w_out, b_out) = self._views
        x = obs
        for w, b in hidden:
            x = np.tanh(x @ w + b)
        return x @ w_out + b_out  # type: ignore[no-any-return]

    def _apply(self, fn: Any, recurse: bool = True) -> MLPActorCriticNumpy:
        self._views = None  # parameters may be replaced
        return super()._apply(fn, recurse)  # type: ignore[no-any-return]


MODELS: dict[str, dict[str, Any]] = {
    "builtin": {"hidden": [64, 64], "activation": "tanh", "vf_share_layers": False},
    "custom": {"custom_model": MLPActorCritic, "custom_model_config": {"hidden": 64}},
    "custom_numpy": {"custom_model": MLPActorCriticNumpy, "custom_model_config": {"hidden": 64}},
}


def build(variant: str, seed: int) -> Any:
    return (cairn.PPOConfig().environment(ENV_ID).env_runners(num_envs_per_env_runner=1)
            .training(**HPARAMS, model=MODELS[variant])
            .resources(torch_num_threads=1).debugging(seed=seed).build())


def run(variant: str, seed: int, steps: int) -> dict[str, Any]:
    algo = build(variant, seed)
    load = load_average()
    start, cpu = time.perf_counter(), time.process_time()
    sampled, sample_s, learn_s = 0, 0.0, 0.0
    while sampled < steps:
        result = algo.train()
        sampled = int(result["num_env_steps_sampled_lifetime"])
        timers = result.get("timers", {})
        sample_s += float(timers.get("sample_time_s", timers.get("sample", 0.0)) or 0.0)
        learn_s += float(timers.get("learn_time_s", timers.get("learn", 0.0)) or 0.0)
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu
    ret = float(algo.evaluate(10)["episode_return_mean"])
    algo.stop()
    return {"variant": variant, "seed": seed, "steps": sampled, "wall_s": wall, "cpu_s": cpu,
            "steps_per_s": sampled / wall, "steps_per_cpu_s": sampled / cpu, "eval_return": ret,
            "load": load}


def micro(variant: str, number: int = 2000) -> dict[str, float]:
    """Microseconds of one acting call (1 observation) and of one learner minibatch step."""
    algo = build(variant, 0)
    policy = algo.get_policy()
    obs1 = np.zeros((1, 4), np.float32) + 0.1
    act_us = min(timeit.repeat(lambda: policy.compute_action_inputs(obs1), number=number,
                               repeat=5)) / number * 1e6
    model = policy.model
    obs = torch.randn(64, 4)
    opt = torch.optim.Adam(model.parameters(), lr=1e-4)

    def step() -> None:
        inputs, values = model(obs)
        loss = inputs.logsumexp(-1).mean() + values.pow(2).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    learn_us = min(timeit.repeat(step, number=number // 4, repeat=5)) / (number // 4) * 1e6
    algo.stop()
    return {"act_us": act_us, "learn_us": learn_us}


def act_breakdown(number: int = 3000) -> dict[str, float]:
    """Microseconds of the pieces of the torch acting path for one observation (custom model)."""
    algo = build("custom", 0)
    model = algo.get_policy().model
    x = np.full((1, 4), 0.1, np.float32)
    weights = [(m.weight, m.bias) for m in model.actor if isinstance(m, nn.Linear)]
    linear = torch.nn.functional.linear

    def enter_only() -> Any:
        with torch.inference_mode():
            return torch.from_numpy(x)

    def module_call() -> Any:
        with torch.inference_mode():
            return model.action_inputs(torch.from_numpy(x)).numpy()

    def functional() -> Any:
        with torch.inference_mode():
            h = torch.from_numpy(x)
            h = torch.tanh(linear(h, *weights[0]))
            h = torch.tanh(linear(h, *weights[1]))
            return linear(h, *weights[2]).numpy()

    def numpy_only() -> Any:
        h = x
        views = [(w.detach().numpy().T, b.detach().numpy()) for w, b in weights]
        for w, b in views[:-1]:
            h = np.tanh(h @ w + b)
        return h @ views[-1][0] + views[-1][1]

    out = {}
    for name, fn in (("inference_mode + from_numpy only", enter_only),
                     ("inference_mode + model.action_inputs (nn.Module calls)", module_call),
                     ("inference_mode + the same as F.linear/torch.tanh calls", functional),
                     ("numpy, views taken per call", numpy_only)):
        out[name] = min(timeit.repeat(fn, number=number, repeat=5)) / number * 1e6
    algo.stop()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--steps", type=int, default=10 * ROLLOUT)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    if args.quick:
        args.repeats, args.steps = 1, 2 * ROLLOUT
    out_path = args.out or (None if args.quick else REPO / "bench/results/custom_model_throughput.md")
    torch.set_num_threads(1)
    load_before = load_average()
    variants = list(MODELS)
    for v in variants:  # warm-up, not recorded
        run(v, 100, ROLLOUT)
    runs: dict[str, list[dict[str, Any]]] = {v: [] for v in variants}
    for rep in range(args.repeats):
        order = variants[rep % 3:] + variants[: rep % 3]
        for v in order:
            res = run(v, rep, args.steps)
            runs[v].append(res)
            print(f"{v:12s} rep {rep}: {res['steps_per_s']:7.0f} steps/s "
                  f"({res['steps_per_cpu_s']:.0f} per CPU s), greedy {res['eval_return']:.0f}, "
                  f"load {res['load']}", flush=True)
    micros: dict[str, list[dict[str, float]]] = {v: [] for v in variants}
    for _ in range(3):
        for v in variants:
            micros[v].append(micro(v))
    mic = {v: {k: median(m[k] for m in ms) for k in ("act_us", "learn_us")} for v, ms in micros.items()}
    parts = [act_breakdown() for _ in range(3)]
    breakdown = {k: median(p[k] for p in parts) for k in parts[0]}
    load_after = load_average()

    med = {v: {k: median(r[k] for r in rs) for k in ("steps_per_s", "steps_per_cpu_s", "eval_return")}
           for v, rs in runs.items()}
    # Per-repeat ratios: both sides of a ratio ran within a minute of each other.
    per_rep = {v: [ratio(c["steps_per_s"], b["steps_per_s"]) for c, b in zip(runs[v], runs["builtin"])]
               for v in variants}
    per_rep_cpu = {v: [ratio(c["steps_per_cpu_s"], b["steps_per_cpu_s"])
                       for c, b in zip(runs[v], runs["builtin"])] for v in variants}
    r_custom = median(per_rep["custom"])
    met = r_custom >= 1 / TARGET
    for v in variants:
        print(f"{v}: median {med[v]['steps_per_s']:.0f} steps/s, vs builtin {median(per_rep[v]):.3f} "
              f"(per CPU s {median(per_rep_cpu[v]):.3f}); act {mic[v]['act_us']:.1f} us, learn step "
              f"{mic[v]['learn_us']:.1f} us")
    yes = {True: "**met**", False: "**MISSED**"}
    lines = [
        "# PPO throughput: a custom ActorCriticModel vs the built-in MLP of the same shape",
        "",
        f"Command: `{command_line()}`",
        "",
        *machine_lines([cairn_code_line(),
                        f"- Load average (1 min) before / after: {load_before} / {load_after}"]),
        "",
        "CartPole-v1, 1 env, rollout 2048, minibatch 64, 10 epochs, lr 3e-4, separate 64x64 tanh "
        f"actor and critic, 1 torch thread, {args.steps:,} env steps per run, variants "
        f"alternating (order rotated every repeat), {args.repeats} repeats. Ratios: per repeat "
        "(variant / builtin of the same repeat), then their median.",
        "",
        *table(
            ["variant", "env steps/s (median)", "all runs", "vs builtin (median of per-repeat)",
             "per CPU s vs builtin", "greedy return (median)", "acting call, 1 obs (us)",
             "learner minibatch fwd+bwd+Adam (us)"],
            [[v, fmt(med[v]["steps_per_s"], 0), ", ".join(fmt(r["steps_per_s"], 0) for r in runs[v]),
              f"{median(per_rep[v]):.3f} ({', '.join(f'{x:.2f}' for x in per_rep[v])})",
              f"{median(per_rep_cpu[v]):.3f}", fmt(med[v]["eval_return"], 0),
              f"{mic[v]['act_us']:.1f}", f"{mic[v]['learn_us']:.1f}"] for v in variants],
        ),
        "",
        f"Goal: custom >= builtin / {TARGET} (ratio >= {1 / TARGET:.3f}): {yes[met]} "
        f"({r_custom:.3f}).",
        "",
        "Where the custom model's acting call goes (one observation, medians of 3 x best of 5):",
        "",
        *table(["piece", "us"], [[k, f"{v:.1f}"] for k, v in breakdown.items()]),
        "",
    ]
    print("\n".join(f"{k}: {v:.1f} us" for k, v in breakdown.items()))
    write_report(out_path, lines)


if __name__ == "__main__":
    main()
