"""Running totals of the episode each environment is in."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from typing import Any

__all__ = ["EpisodeTotals"]


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
