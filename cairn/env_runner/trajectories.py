"""Per-agent trajectories of a multi-agent sample, turned into one batch per policy."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from typing import Any

import numpy as np

from cairn.env_runner.sample_batch import STATE_COLUMN, SampleBatch, state_columns, stream_ids

__all__ = ["AgentTrajectories"]

#: ``(env_index, agent_id)``: one agent in one of a runner's environments.
AgentKey = tuple[int, Any]

_ROW_COLUMNS = ("obs", "actions", "rewards", "terminateds", "truncateds", "next_obs")


class AgentTrajectories:
    """One trajectory per (env index, agent), in the order the agents first acted.

    A row is added when its agent acts; its next observation is filled in when the following
    observation of that agent arrives (processed by its policy's filter).
    """

    def __init__(self) -> None:
        self._rows: dict[AgentKey, dict[str, list[Any]]] = {}

    def __contains__(self, key: AgentKey) -> bool:
        return key in self._rows

    def add(self, key: AgentKey, obs: np.ndarray, action: np.ndarray, reward: float,
            terminated: bool, truncated: bool, *, state_in: list[np.ndarray] | None = None) -> None:
        """Append the step ``key``'s agent just took (its next observation still unknown);
        ``state_in``: a recurrent policy's state the agent acted from (one array per component)."""
        row = self._rows.get(key)
        if row is None:
            row = self._rows[key] = {c: [] for c in _ROW_COLUMNS}
        if state_in is not None:
            for column, s in state_columns(state_in).items():
                row.setdefault(column, []).append(s)
        row["obs"].append(obs)
        row["actions"].append(action)
        row["rewards"].append(reward)
        row["terminateds"].append(terminated)
        row["truncateds"].append(truncated)
        row["next_obs"].append(None)

    def set_next_obs(self, key: AgentKey, processed_obs: np.ndarray) -> None:
        """The next observation of ``key``'s last step."""
        self._rows[key]["next_obs"][-1] = processed_obs

    def batches(self, policy_of: Callable[[AgentKey], str], worker_index: int = 0) -> dict[str, SampleBatch]:
        """One SampleBatch per policy (``policy_of`` maps each trajectory to its policy ID);
        ``streams`` names each trajectory by ``worker_index`` and its key."""
        per_pid: dict[str, list[dict[str, np.ndarray]]] = defaultdict(list)
        for key, row in self._rows.items():
            # Rows whose agent vanished without a final observation bootstrap from their own obs
            # (their value is cut by terminated/ends anyway).
            next_obs = [n if n is not None else o for n, o in zip(row["next_obs"], row["obs"])]
            term = np.array(row["terminateds"], dtype=bool)
            trunc = np.array(row["truncateds"], dtype=bool)
            ends = term | trunc
            ends[-1] = True
            per_pid[policy_of(key)].append({
                "obs": np.stack(row["obs"]).astype(np.float32, copy=False),
                "actions": np.stack(row["actions"]),
                "rewards": np.array(row["rewards"], dtype=np.float32),
                "terminateds": term, "truncateds": trunc, "ends": ends,
                "next_obs": np.stack(next_obs).astype(np.float32, copy=False),
                "streams": np.repeat(stream_ids(worker_index, [key]), len(term)),
                **{c: np.stack(v).astype(np.float32, copy=False) for c, v in row.items()
                   if c.startswith(STATE_COLUMN)},
            })
        return {pid: SampleBatch.concat(parts) for pid, parts in per_pid.items()}
