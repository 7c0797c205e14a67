"""Small IMPALA and APPO configs for unit tests (module-level, so subprocesses can build them)."""

from __future__ import annotations

from typing import Any

import cairn
from tests.helpers import make_ma_cartpole, map_by_index

CONFIGS = {"IMPALA": cairn.IMPALAConfig, "APPO": cairn.APPOConfig}


def small(algo: str, **training: Any) -> Any:
    """CartPole ``algo`` (``"IMPALA"`` or ``"APPO"``): fragments of 20 steps of 2 envs, train
    batches of 80 env steps in minibatches of 32, 2 epochs, a 16x16 network."""
    defaults: dict[str, Any] = {"train_batch_size": 80, "minibatch_size": 32, "num_epochs": 2,
                                "model": {"hidden": [16, 16]}}
    return (CONFIGS[algo]().environment("CartPole-v1")
            .env_runners(num_envs_per_env_runner=2, rollout_fragment_length=20)
            .training(**{**defaults, **training}).debugging(seed=0))


def small_ma(algo: str, **training: Any) -> Any:
    """Multi-agent CartPole ``algo`` with two policies, p0 and p1, one per agent."""
    return (small(algo, **training).environment(make_ma_cartpole, env_config={"num_agents": 2})
            .multi_agent(policies={"p0", "p1"}, policy_mapping_fn=map_by_index))


#: The settings of the learning runs (tests and bench/impala_learning.py), beside RLlib's
#: defaults; docs/impala.md, section Learning, has the figures.
LEARNING_SETTINGS: dict[str, Any] = {
    "lr": 0.001, "num_epochs": 4, "minibatch_size": 128, "entropy_coeff": 0.0,
    "model": {"hidden": [64, 64]},
}


def learning_config(algo: str, seed: int, num_env_runners: int = 0, **training: Any) -> Any:
    """A CartPole-v1 learning run of ``algo``: 4 envs (fragments of 50 steps) in this process,
    or 2 in each of ``num_env_runners`` remote runners sampling asynchronously; train batches of
    500 env steps, :data:`LEARNING_SETTINGS` updated by ``training``."""
    envs = 4 if num_env_runners == 0 else 2
    return (CONFIGS[algo]().environment("CartPole-v1")
            .env_runners(num_env_runners=num_env_runners, num_envs_per_env_runner=envs)
            .training(**{**LEARNING_SETTINGS, **training}).resources(torch_num_threads=1)
            .debugging(seed=seed))


def steps_to_bar(algo: str, seed: int, *, bar: float, budget: int,
                 eval_every: int, num_env_runners: int = 0, **training: Any) -> tuple[int | None, list]:
    """Train :func:`learning_config` (``training``: settings beside :data:`LEARNING_SETTINGS`)
    and evaluate greedily (10 episodes) every ``eval_every`` env steps: the env steps at the
    first return >= ``bar`` (None: not within ``budget``), and every evaluation as
    ``(steps, return)``."""
    built = learning_config(algo, seed, num_env_runners, **training).build()
    points: list[tuple[int, float]] = []
    next_eval = eval_every
    try:
        while built.counters["num_env_steps_sampled_lifetime"] < budget:
            steps = built.train()["num_env_steps_sampled_lifetime"]
            if steps < next_eval:
                continue
            next_eval += eval_every
            ret = built.evaluate()["episode_return_mean"]
            points.append((steps, round(ret, 1)))
            if ret >= bar:
                return steps, points
    finally:
        built.stop()
    return None, points
