"""Episode metrics as reported by ``Algorithm.train()`` and ``evaluate()``."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

__all__ = ["episode_metrics"]


def episode_metrics(episodes: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Means over finished episodes: ``episode_return_mean``, ``episode_len_mean`` (nan when
    there are none), ``num_episodes`` and ``policy_episode_return_mean`` (per policy, over the
    returns of the agents it controlled)."""
    per_policy: dict[str, list[float]] = {}
    for ep in episodes:
        for pid, returns in ep["policy_returns"].items():
            per_policy.setdefault(pid, []).extend(returns)
    return {
        "episode_return_mean": float(np.mean([e["return"] for e in episodes])) if episodes else math.nan,
        "episode_len_mean": float(np.mean([e["length"] for e in episodes])) if episodes else math.nan,
        "num_episodes": len(episodes),
        "policy_episode_return_mean": {pid: float(np.mean(r)) for pid, r in per_policy.items()},
    }
