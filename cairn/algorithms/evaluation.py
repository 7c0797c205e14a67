"""Evaluation: greedy episodes on a runner of their own, reported as episode metrics."""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from cairn.algorithms.metrics import episode_metrics
from cairn.callbacks.base import Callbacks
from cairn.config.algorithm_config import AlgorithmConfig
from cairn.env_runner.env_runner import EnvRunner
from cairn.errors import ConfigError
from cairn.policy.policy import Policy
from cairn.rng import EVALUATION_SEED_OFFSET, draw_reset_seed, env_runner_rng

__all__ = ["EVALUATION_SEED_OFFSET", "evaluation_runner", "evaluate_episodes", "episode_statistics",
           "check_num_episodes", "first_episode_seed"]

_log = logging.getLogger(__name__)


def evaluation_runner(
    config: AlgorithmConfig, policies: Mapping[str, Policy], state: Mapping[str, Any] | None,
    *, callbacks: Callbacks | None = None,
) -> EnvRunner:
    """The runner that plays evaluation episodes: one environment, its own seed stream, and
    the saved state of an earlier one (from a checkpoint) when there is one. A state whose
    restore raises (an env's ``set_state``) stops the runner (its env is closed) before the
    exception propagates: nobody else holds it.

    ``callbacks``: the instance whose episode hooks run here, the algorithm's (as its local env
    runner shares it), so that what they keep on it is there in ``on_evaluate_end``; None
    builds a new one from the config."""
    runner = EnvRunner(config, policies, worker_index=0, num_envs=1,
                       seed_offset=EVALUATION_SEED_OFFSET, evaluation=True, callbacks=callbacks)
    if state is not None:
        try:
            runner.set_state(state)
        except BaseException:
            runner.stop()  # nobody gets this runner: close its env
            raise
    return runner


def first_episode_seed(seed: int | None) -> int | None:
    """The reset seed of the first episode that ``evaluate_episodes(..., seed=seed)`` plays: the
    first draw of its fresh runner's stream (None for ``seed=None``), e.g. for the CLI's
    ``--render`` to record that episode."""
    if seed is None:
        return None
    return draw_reset_seed(env_runner_rng(seed, 0, EVALUATION_SEED_OFFSET))


def check_num_episodes(num_episodes: Any) -> int | None:
    """``num_episodes`` of ``Algorithm.evaluate``: None, or an int of at least 1."""
    if num_episodes is None:
        return None
    if isinstance(num_episodes, bool) or not isinstance(num_episodes, (int, np.integer)) or num_episodes < 1:
        raise ConfigError(f"evaluate(num_episodes={num_episodes!r}): pass an int of at least 1 "
                          "(or None for config.evaluation_duration).")
    return int(num_episodes)


def episode_statistics(episodes: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Spread of finished episodes: ``episode_return_std/min/max``, ``episode_len_std/min/max``
    (nan when there are none; std is the population standard deviation, ``np.std``) and the
    per-episode ``episode_returns`` and ``episode_lens``, in the order they finished."""
    returns = [float(e["return"]) for e in episodes]
    lens = [int(e["length"]) for e in episodes]
    stats: dict[str, Any] = {}
    for name, values in (("return", returns), ("len", lens)):
        for stat, fn in (("std", np.std), ("min", np.min), ("max", np.max)):
            stats[f"episode_{name}_{stat}"] = float(fn(values)) if values else math.nan
    stats["episode_returns"] = returns
    stats["episode_lens"] = lens
    return stats


def evaluate_episodes(
    runner: EnvRunner | None, config: AlgorithmConfig, policies: Mapping[str, Policy],
    num_episodes: int | None = None, *, seed: int | None = None, callbacks: Callbacks | None = None,
) -> dict[str, Any]:
    """Play ``num_episodes`` (default ``config.evaluation_duration``) episodes with greedy
    actions and return their :func:`episode_metrics` and :func:`episode_statistics`.
    ``policy_episode_return_mean`` has a row only for ``policies``, as ``train()``'s results do:
    a scripted opponent (a league's fixed opponent) is no policy of cairn's, and its games are
    reported in the league section, as wins, draws and losses.

    With ``seed=None`` they are played on ``runner`` (the algorithm's evaluation runner, whose
    seed stream goes on from call to call and is saved in checkpoints), after it follows the
    current policies and mapping. With an int ``seed`` they are played on a fresh runner seeded
    from it (then closed; ``runner`` is left as it was), so that equal seeds give equal episodes:
    ``cairn evaluate --seed`` calls this. ``callbacks``: the fresh runner's (see
    :func:`evaluation_runner`).
    """
    count = check_num_episodes(num_episodes)
    count = config.evaluation_duration if count is None else count
    if seed is not None:
        config = config.copy().debugging(seed=seed)
        fresh = evaluation_runner(config, policies, None, callbacks=callbacks)
        try:
            episodes = fresh.run_episodes(count, explore=False)
        finally:
            fresh.stop()
    elif runner is None:
        raise ValueError("evaluate_episodes needs a runner when seed is None")
    else:
        runner.update_policies(config, policies)
        episodes = runner.run_episodes(count, explore=False)
    result = {**episode_metrics(episodes, policy_ids=policies), **episode_statistics(episodes)}
    _log.debug("evaluated %d episodes: episode_return_mean %.3f",
               len(episodes), result["episode_return_mean"])
    return result
