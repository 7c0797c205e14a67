"""Per-agent trajectories of a multi-agent sample, turned into one batch per policy.

Each row is recorded with the policy that acted it (the one its agent was mapped to for that
episode), so that a fragment spanning episodes in which one agent acted with different
policies (per-episode opponent draws) gives every row to the policy that acted it.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any, NamedTuple

import numpy as np

from cairn.env_runner.sample_batch import (
    ACTION_LOGP,
    STATE_COLUMN,
    SampleBatch,
    batch_states,
    state_columns,
    stream_ids,
)

__all__ = ["AgentTrajectories", "WaitingRow"]

#: ``(env_index, agent_id)``: one agent in one of a runner's environments.
AgentKey = tuple[int, Any]
#: ``(env_index, agent_id, policy_id)``: the rows one agent acted with one policy.
_TrajectoryKey = tuple[int, Any, str]

_ROW_COLUMNS = ("obs", "actions", "rewards", "terminateds", "truncateds", "firsts", "next_obs")


class WaitingRow(NamedTuple):
    """A row taken out of a fragment while it waits for its next observation
    (:meth:`AgentTrajectories.pop_waiting`): what :meth:`AgentTrajectories.add` takes to put it
    back, with the reward and flags it gathered while waiting."""

    policy_id: str
    obs: np.ndarray
    action: np.ndarray
    reward: float
    terminated: bool
    truncated: bool
    first: bool
    #: The behaviour log-probability of the action (None: its policy does not want it).
    action_logp: Any
    #: A recurrent policy's state the agent acted from, one array per component (else None).
    state_in: list[np.ndarray] | None

    def add_to(self, trajs: AgentTrajectories, key: AgentKey) -> None:
        """Put this row back as ``key``'s last row, still waiting for its next observation."""
        trajs.add(key, self.policy_id, self.obs, self.action, self.reward, self.terminated, self.truncated,
                  first=self.first, state_in=self.state_in, action_logp=self.action_logp)


class AgentTrajectories:
    """One trajectory per (env index, agent, policy that acted), in the order they began.

    A row is added when its agent acts, with the policy it acted with; its next observation
    is filled in when the following observation of that agent arrives (processed by that
    policy's filter).
    """

    def __init__(self) -> None:
        self._rows: dict[_TrajectoryKey, dict[str, list[Any]]] = {}
        #: The policy of each agent's last added row (the row waiting for its next observation).
        self._last_policy: dict[AgentKey, str] = {}
        #: The agents whose last row still waits for its next observation (it did not end).
        self._open: set[AgentKey] = set()

    def __contains__(self, key: AgentKey) -> bool:
        return key in self._last_policy

    def add(self, key: AgentKey, policy_id: str, obs: np.ndarray, action: np.ndarray, reward: float,
            terminated: bool, truncated: bool, *, first: bool,
            state_in: list[np.ndarray] | None = None, action_logp: Any = None) -> None:
        """Append the step ``key``'s agent just took with policy ``policy_id`` (its next
        observation still unknown); ``first``: the agent's first step in its episode;
        ``state_in``: a recurrent policy's state the agent acted from (one array per component);
        ``action_logp``: the action's behaviour log-probability, for a policy that wants it."""
        self._last_policy[key] = policy_id
        self._open.add(key)
        row = self._rows.get((*key, policy_id))
        if row is None:
            row = self._rows[(*key, policy_id)] = {c: [] for c in _ROW_COLUMNS}
        if state_in is not None:
            for column, s in state_columns(state_in).items():
                row.setdefault(column, []).append(s)
        if action_logp is not None:
            row.setdefault(ACTION_LOGP, []).append(action_logp)
        row["obs"].append(obs)
        row["actions"].append(action)
        row["rewards"].append(reward)
        row["terminateds"].append(terminated)
        row["truncateds"].append(truncated)
        row["firsts"].append(first)
        row["next_obs"].append(None)

    def set_next_obs(self, key: AgentKey, processed_obs: np.ndarray) -> None:
        """The next observation of ``key``'s last step (which no longer waits for one)."""
        self._rows[(*key, self._last_policy[key])]["next_obs"][-1] = processed_obs
        self._open.discard(key)

    def waiting(self, key: AgentKey) -> bool:
        """Whether ``key``'s last row (in this fragment, or put back by :meth:`WaitingRow.add_to`)
        still waits for its next observation: its agent acted and has neither observed again nor
        ended since."""
        return key in self._open

    def extend_last(self, key: AgentKey, reward: float, terminated: bool, truncated: bool) -> None:
        """A step at which ``key``'s agent, its last row :meth:`waiting`, did not act: its
        reward joins that row's (the action earned it), as do its flags."""
        row = self._rows[(*key, self._last_policy[key])]
        row["rewards"][-1] += reward
        row["terminateds"][-1] = row["terminateds"][-1] or terminated
        row["truncateds"][-1] = row["truncateds"][-1] or truncated

    def waiting_keys(self) -> list[AgentKey]:
        """The agents whose last row :meth:`waiting`, in the order their trajectories began
        (not a set's order, which varies with the hash seed from process to process)."""
        return [(i, agent) for (i, agent, pid) in self._rows
                if (i, agent) in self._open and self._last_policy[(i, agent)] == pid]

    def pop_waiting(self, key: AgentKey) -> WaitingRow:
        """Take ``key``'s last row, which :meth:`waiting`, out of its trajectory (and the batches):
        its next observation comes in a later fragment, which :meth:`WaitingRow.add_to` gives it."""
        policy_id = self._last_policy.pop(key)
        self._open.discard(key)
        trajectory = (*key, policy_id)
        row = self._rows[trajectory]
        last = {column: values.pop() for column, values in row.items()}
        if not row["obs"]:
            del self._rows[trajectory]
        states = batch_states(last)
        return WaitingRow(policy_id, last["obs"], last["actions"], float(last["rewards"]),
                          bool(last["terminateds"]), bool(last["truncateds"]), bool(last["firsts"]),
                          last.get(ACTION_LOGP), states or None)

    def close(self, key: AgentKey) -> None:
        """``key``'s last row ended (its agent left or its episode ended): nothing more joins it."""
        self._open.discard(key)

    def batches(self, worker_index: int = 0) -> dict[str, SampleBatch]:
        """One SampleBatch per policy, of the rows it acted; ``streams`` names each trajectory
        by ``worker_index`` and its (env index, agent): one agent's rows in one env keep
        their stream from fragment to fragment, whichever policy acted them."""
        per_pid: dict[str, list[dict[str, np.ndarray]]] = defaultdict(list)
        for (env_index, agent, pid), row in self._rows.items():
            # Rows whose agent vanished without a final observation bootstrap from their own obs
            # (their value is cut by terminated/ends anyway).
            next_obs = [n if n is not None else o for n, o in zip(row["next_obs"], row["obs"])]
            term = np.array(row["terminateds"], dtype=bool)
            trunc = np.array(row["truncateds"], dtype=bool)
            ends = term | trunc
            ends[-1] = True
            per_pid[pid].append({
                "obs": np.stack(row["obs"]).astype(np.float32, copy=False),
                "actions": np.stack(row["actions"]),
                "rewards": np.array(row["rewards"], dtype=np.float32),
                "terminateds": term, "truncateds": trunc, "ends": ends,
                "firsts": np.array(row["firsts"], dtype=bool),
                "next_obs": np.stack(next_obs).astype(np.float32, copy=False),
                "streams": np.repeat(stream_ids(worker_index, [(env_index, agent)]), len(term)),
                **{c: np.stack(v).astype(np.float32, copy=False) for c, v in row.items()
                   if c.startswith(STATE_COLUMN)},
                **({ACTION_LOGP: np.array(row[ACTION_LOGP], dtype=np.float32)} if ACTION_LOGP in row else {}),
            })
        return {pid: SampleBatch.concat(parts) for pid, parts in per_pid.items()}
