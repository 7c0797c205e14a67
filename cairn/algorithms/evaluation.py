"""Evaluation: greedy episodes on a runner of their own, reported as episode metrics."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from cairn.algorithms.metrics import episode_metrics
from cairn.config.algorithm_config import AlgorithmConfig
from cairn.env_runner.env_runner import EnvRunner
from cairn.policy.policy import Policy

__all__ = ["EVALUATION_SEED_OFFSET", "evaluation_runner", "evaluate_episodes"]

#: Added to the evaluation runner's seed stream, to keep its envs apart from the training ones.
EVALUATION_SEED_OFFSET = 1_000_003


def evaluation_runner(
    config: AlgorithmConfig, policies: Mapping[str, Policy], state: Mapping[str, Any] | None
) -> EnvRunner:
    """The runner that plays evaluation episodes: one environment, its own seed stream, and
    the saved state of an earlier one (from a checkpoint) when there is one."""
    runner = EnvRunner(config, policies, worker_index=0, num_envs=1,
                       seed_offset=EVALUATION_SEED_OFFSET)
    if state is not None:
        runner.set_state(state)
    return runner


def evaluate_episodes(
    runner: EnvRunner, config: AlgorithmConfig, policies: Mapping[str, Policy]
) -> dict[str, Any]:
    """Play ``config.evaluation_duration`` episodes with greedy actions on ``runner`` (after it
    follows the current policies and mapping) and return their :func:`episode_metrics`."""
    runner.update_policies(config, policies)
    return episode_metrics(runner.run_episodes(config.evaluation_duration, explore=False))
