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
