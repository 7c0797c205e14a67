"""Which policy each agent of a multi-agent env acts with, as saved in an env runner's state."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from cairn.config.algorithm_config import AlgorithmConfig

__all__ = ["agent_ids_by_name", "restore_agent_pids"]


def agent_ids_by_name(env: Any) -> dict[str, Any]:
    """``{str(agent_id): agent_id}`` of ``env``'s possible agents: a state names agents by
    string (JSON keys), the env by its own IDs."""
    return {str(a): a for a in env.possible_agents}


def restore_agent_pids(
    env: Any, saved: Mapping[str, str], config: AlgorithmConfig, policies: Mapping[str, Any]
) -> dict[Any, str] | None:
    """The saved ``{agent name: policy ID}`` keyed by ``env``'s agent IDs, or None when it no
    longer fits: an agent the env does not have, one that ``config`` now maps elsewhere, or a
    policy not in ``policies``. Observations in flight were processed by the saved policies'
    filters, so a runner that gets None starts fresh episodes."""
    ids = agent_ids_by_name(env)
    pids = {ids.get(k, k): p for k, p in saved.items()}
    known = set(ids.values())
    if any(a not in known or config.map_agent(a) != p or p not in policies for a, p in pids.items()):
        return None
    return pids
