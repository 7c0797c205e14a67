"""Which policy each environment of a single-agent env runner acts with in its current episode,
and the rows of a fragment split by the policy that acted them.

The policy mapping is decided once per (episode, agent) (docs/multi-agent.md): a single-agent
environment's one agent (``"default_agent"``) is mapped when each of its episodes starts, so a
``policy_mapping_fn`` that draws a policy per episode gives each env copy its own policy for
that episode. Acting then runs one batch per policy, and each policy's batch holds exactly the
rows it acted. With one policy for every env copy (the usual case) acting, filtering and the
batch are the same single calls as without a mapping.
"""

from __future__ import annotations

from collections.abc import Container, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from cairn.env_runner.sample_batch import ACTION_LOGP, SampleBatch, state_columns

if TYPE_CHECKING:
    from cairn.policy.policy import Policy

__all__ = ["ActedRows", "group_by_policy", "process_by_policy"]


def group_by_policy(pids: Sequence[str]) -> list[tuple[str, list[int] | None]]:
    """``[(policy ID, env indices)]`` in order of first appearance; the indices are None when
    every env acts with that one policy (acting then takes the observations as they are)."""
    if all(p == pids[0] for p in pids):
        return [(pids[0], None)] if pids else []
    groups: dict[str, list[int]] = {}
    for i, pid in enumerate(pids):
        groups.setdefault(pid, []).append(i)
    return list(groups.items())


def process_by_policy(
    policies: Mapping[str, Policy], raws: Sequence[Any], pids: Sequence[str], *, unfed: Container[str],
) -> np.ndarray:
    """``raws[i]`` processed by the filter of policy ``pids[i]`` (each policy's rows in one call,
    which also feeds its filter's statistics unless the policy is in ``unfed``), stacked in
    order."""
    groups = group_by_policy(pids)
    if len(groups) == 1:
        pid = groups[0][0]
        return policies[pid].process_observations(raws, update=pid not in unfed)
    out: np.ndarray | None = None
    for pid, rows in groups:
        assert rows is not None
        processed = policies[pid].process_observations([raws[i] for i in rows], update=pid not in unfed)
        if out is None:
            out = np.empty((len(raws), *processed.shape[1:]), dtype=processed.dtype)
        out[rows] = processed
    assert out is not None
    return out


class ActedRows:
    """Per policy, the raw actions, behaviour log-probabilities (for a policy that wants them)
    and recurrent states of the rows it acted in one fragment of
    ``steps`` steps of ``num_envs`` environments, and which policy acted each row; the rest of a
    row (observations, rewards, flags) is the same whoever acted it and is buffered by the caller.
    """

    def __init__(self, steps: int, num_envs: int) -> None:
        self.steps, self.num_envs = steps, num_envs
        self._actions: dict[str, np.ndarray] = {}
        self._states: dict[str, list[np.ndarray]] = {}
        self._logps: dict[str, np.ndarray] = {}
        #: ``[steps, envs]``: index (in order of first appearance) of the policy of each row.
        self._owner = np.zeros((steps, num_envs), dtype=np.int32)

    def record(self, t: int, policy_id: str, policy: Policy, rows: list[int] | None, raw: np.ndarray,
               logp: np.ndarray | None, state_in: list[np.ndarray] | None) -> None:
        """``policy`` (``policy_id``) acted ``raw`` at step ``t`` for env ``rows`` (None: all),
        with behaviour log-probabilities ``logp`` (None: not wanted), from ``state_in`` when it
        is recurrent."""
        pid = policy_id
        actions = self._actions.get(pid)
        if actions is None:
            dist = policy.dist
            actions = self._actions[pid] = np.empty((self.steps, self.num_envs, *dist.raw_action_shape),
                                                    dtype=dist.raw_action_dtype)
        where = slice(None) if rows is None else rows
        actions[t, where] = raw
        if len(self._actions) > 1:
            self._owner[t, where] = list(self._actions).index(pid)
        if logp is not None:
            logps = self._logps.get(pid)
            if logps is None:
                logps = self._logps[pid] = np.empty((self.steps, self.num_envs), np.float32)
            logps[t, where] = logp
        if state_in is not None:
            states = self._states.get(pid)
            if states is None:
                states = self._states[pid] = [np.empty((self.steps, self.num_envs, *s.shape[1:]), np.float32)
                                              for s in state_in]
            for buf, s in zip(states, state_in):
                buf[t, where] = s

    def batches(self, **columns: np.ndarray) -> dict[str, SampleBatch]:
        """One batch per policy of its rows, the shared time-major ``columns`` (``[steps, envs,
        ...]``: obs, rewards, flags, next_obs, streams) joined with its actions and states.
        A policy's piece of one env's rows ends where its episode ends (a policy changes only
        there) or at the fragment's end, so ``ends`` cuts it as for any trajectory."""
        out = {}
        for k, (pid, actions) in enumerate(self._actions.items()):
            own = state_columns(self._states.get(pid, []))
            if pid in self._logps:
                own[ACTION_LOGP] = self._logps[pid]
            batch = SampleBatch.from_time_major(actions=actions, **columns, **own)
            if len(self._actions) > 1:  # env-major rows, as the batch's
                mine = np.ascontiguousarray(self._owner.T).reshape(-1) == k
                batch = SampleBatch({c: v[mine] for c, v in batch.items()})
            out[pid] = batch
        return out
