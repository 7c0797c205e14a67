"""Running totals of the episode each environment is in, and the episodes an env runner has
completed since its metrics were last taken."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["EpisodeTotals", "EpisodeBook"]


class EpisodeTotals:
    """Running totals of one environment's current episode."""

    __slots__ = ("agent_returns", "length", "ret")

    def __init__(self) -> None:
        self.ret = 0.0
        self.length = 0
        self.agent_returns: dict[Any, float] = defaultdict(float)

    def to_state(self) -> dict[str, Any]:
        # float(): rewards may be numpy scalars (Pendulum's), which JSON restores as floats.
        return {"return": float(self.ret), "length": self.length,
                "agent_returns": {str(k): float(v) for k, v in self.agent_returns.items()}}

    @classmethod
    def from_state(cls, state: Mapping[str, Any], agent_ids: Mapping[str, Any]) -> EpisodeTotals:
        ep = cls()
        ep.ret, ep.length = float(state["return"]), int(state["length"])
        for key, value in state["agent_returns"].items():
            ep.agent_returns[agent_ids.get(key, key)] = float(value)
        return ep


class EpisodeBook:
    """Each environment's current episode, and the episodes completed since they were taken.

    A completed episode is reported as ``{"return", "length", "policy_returns"}``, its agents'
    returns grouped by the policy each agent was mapped to.
    """

    def __init__(self, num_envs: int) -> None:
        self.current = [EpisodeTotals() for _ in range(num_envs)]
        self.completed: list[dict[str, Any]] = []
        self.num_episodes = 0

    def restart_all(self) -> None:
        """Every environment starts a new episode (after a reset of them all)."""
        self.current = [EpisodeTotals() for _ in self.current]

    def finish(self, env_index: int, policy_of: Callable[[Any], str]) -> None:
        """Record the episode of env ``env_index`` as completed and start its next one."""
        ep = self.current[env_index]
        policy_returns: dict[str, list[float]] = defaultdict(list)
        for agent, ret in ep.agent_returns.items():
            policy_returns[policy_of(agent)].append(ret)
        self.completed.append(
            {"return": ep.ret, "length": ep.length, "policy_returns": dict(policy_returns)}
        )
        self.num_episodes += 1
        self.current[env_index] = EpisodeTotals()

    def take(self, limit: int | None = None) -> list[dict[str, Any]]:
        """Return the completed episodes (the first ``limit`` of them) and forget them all."""
        done = self.completed if limit is None else self.completed[:limit]
        self.completed = []
        return done
