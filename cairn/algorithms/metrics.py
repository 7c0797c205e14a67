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
    """Means over finished episodes: ``episode_return_mean``, ``episode_len_mean`` (nan when
    there are none), ``num_episodes`` and ``policy_episode_return_mean`` (per policy, over the
    returns of the agents it controlled).

    ``policy_ids`` limits ``policy_episode_return_mean`` to those policies: the metrics window
    outlives a policy that was removed, or left out of a subset restore, and a policy that is
    gone has no return to report.
    """
    per_policy: dict[str, list[float]] = {}
    for ep in episodes:
        for pid, returns in ep["policy_returns"].items():
            if policy_ids is None or pid in policy_ids:
                per_policy.setdefault(pid, []).extend(returns)
    return {
        "episode_return_mean": float(np.mean([e["return"] for e in episodes])) if episodes else math.nan,
        "episode_len_mean": float(np.mean([e["length"] for e in episodes])) if episodes else math.nan,
        "num_episodes": len(episodes),
        "policy_episode_return_mean": {pid: float(np.mean(r)) for pid, r in per_policy.items()},
    }
