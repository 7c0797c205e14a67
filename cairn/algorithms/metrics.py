"""Episode metrics as reported by ``Algorithm.train()`` and ``evaluate()``."""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence
from typing import Any

import numpy as np

__all__ = ["episode_metrics"]


def episode_metrics(
    episodes: Sequence[Mapping[str, Any]], *, policy_ids: Collection[str] | None = None
) -> dict[str, Any]:
    """Over finished episodes: ``episode_return_mean``, ``episode_return_min``,
    ``episode_return_max`` and ``episode_len_mean`` (RLlib's keys; nan when there are none),
    ``num_episodes``, ``policy_episode_return_mean`` (per policy, over the
    returns of the agents it controlled) and ``custom_metrics`` (:func:`custom_metrics`).

    ``policy_ids`` limits ``policy_episode_return_mean`` to those policies: the metrics window
    outlives a policy that was removed, or left out of a subset restore, and a policy that is
    gone has no return to report.
    """
    per_policy: dict[str, list[float]] = {}
    for ep in episodes:
        for pid, returns in ep["policy_returns"].items():
            if policy_ids is None or pid in policy_ids:
                per_policy.setdefault(pid, []).extend(returns)
    returns = [float(e["return"]) for e in episodes]
    return {
        "episode_return_mean": float(np.mean(returns)) if returns else math.nan,
        "episode_return_min": min(returns) if returns else math.nan,
        "episode_return_max": max(returns) if returns else math.nan,
        "episode_len_mean": float(np.mean([e["length"] for e in episodes])) if episodes else math.nan,
        "num_episodes": len(episodes),
        "policy_episode_return_mean": {pid: float(np.mean(r)) for pid, r in per_policy.items()},
        "custom_metrics": custom_metrics(episodes),
    }


def custom_metrics(episodes: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    """``{f"{name}_mean" | "_min" | "_max": value}`` over the episodes whose callbacks set
    ``episode.custom_metrics[name]`` to a number (RLlib's layout; a bool is 0 or 1, so that a
    ``success`` flag averages to a success rate, as in RLlib); other values are skipped.

    An episode whose value is nan has none (as in RLlib): the others are aggregated, and the
    three are nan only when no episode of the window has a number. One nan would otherwise make
    them nan for the window's next 100 episodes."""
    values: dict[str, list[float]] = {}
    for ep in episodes:
        for name, value in (ep.get("custom_metrics") or {}).items():
            if isinstance(value, (int, float, np.number, np.bool_)):
                values.setdefault(str(name), []).append(float(value))
    out: dict[str, float] = {}
    for name, found in sorted(values.items()):
        numbers = [v for v in found if not math.isnan(v)]
        for stat, fn in (("mean", np.mean), ("min", np.min), ("max", np.max)):
            out[f"{name}_{stat}"] = float(fn(numbers)) if numbers else math.nan
    return out
