"""SampleBatch: columns of experience for one policy, as numpy arrays of equal length."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

__all__ = ["SampleBatch", "COLUMNS", "ACTION_LOGP", "STATE_COLUMN", "count_sampled_steps", "state_columns",
           "batch_states",
           "stream_ids"]

#: obs and next_obs are processed (flattened, filtered) float32 rows; actions are raw policy
#: actions; ``ends`` marks the last step of each contiguous piece of one episode (episode end or
#: the end of the sampled fragment), which is where returns must be bootstrapped or cut;
#: ``firsts`` marks the first step of each episode (of an agent's part in it), so that a row
#: that opens a batch tells whether it continues what the fragment before ended with;
#: ``streams`` (int64) names the trajectory each row belongs to (:func:`stream_ids`), the same
#: from fragment to fragment, so that a piece cut by a fragment end can be joined to its sequel.
#: A recurrent policy's batches also have ``state_in_0``, ``state_in_1``, ... (float32
#: ``[rows, *shape]``): the state each row acted from (:mod:`cairn.env_runner.recurrent_state`).
#: A policy that ``wants_action_logp`` (PPO's) also gets :data:`ACTION_LOGP`.
COLUMNS = ("obs", "actions", "rewards", "terminateds", "truncateds", "ends", "firsts", "next_obs", "streams")
#: The behaviour policy's log-probability of each row's raw action (float32 ``[rows]``), taken
#: when the row was acted, from the distribution the action was drawn from (masked, for a masked
#: policy) under the weights that acted it (RLlib's ``SampleBatch.ACTION_LOGP``). Only for a
#: policy whose class sets ``wants_action_logp`` (:class:`~cairn.policy.policy.Policy`).
ACTION_LOGP = "action_logp"
#: The prefix of a recurrent state's columns (``state_in_<component>``).
STATE_COLUMN = "state_in_"


def state_columns(states: Sequence[np.ndarray]) -> dict[str, np.ndarray]:
    """``{"state_in_0": ..., "state_in_1": ...}``: a batch's state columns, one per component."""
    return {f"{STATE_COLUMN}{k}": s for k, s in enumerate(states)}


def batch_states(batch: Mapping[str, np.ndarray]) -> list[np.ndarray]:
    """A batch's state columns in component order (empty for a feed-forward policy's)."""
    names = [c for c in batch if c.startswith(STATE_COLUMN)]
    return [batch[c] for c in sorted(names, key=lambda c: int(c[len(STATE_COLUMN):]))]


class SampleBatch(dict[str, np.ndarray]):
    """A dict of equally long columns; ``len(batch)`` is the number of agent steps."""

    def __len__(self) -> int:
        return 0 if "rewards" not in self else int(self["rewards"].shape[0])

    @property
    def count(self) -> int:
        """The number of agent steps (rows)."""
        return len(self)

    @staticmethod
    def concat(batches: Iterable[Mapping[str, np.ndarray]]) -> SampleBatch:
        """Join batches row-wise (column sets must agree)."""
        batches = [b for b in batches if len(b["rewards"])]
        if not batches:
            return SampleBatch()
        if len(batches) == 1:
            return SampleBatch(batches[0])
        return SampleBatch({k: np.concatenate([b[k] for b in batches]) for k in batches[0]})

    @staticmethod
    def from_time_major(**columns: np.ndarray) -> SampleBatch:
        """A batch from ``[steps, envs, ...]`` columns (one row per step of each env; columns beyond
        :data:`COLUMNS` follow them, by name), in env major order: each env's steps are
        contiguous, so that ``ends`` cuts its trajectory.

        ``ends`` is computed here (an episode end, or the fragment's last step).
        """
        steps, n_envs = columns["rewards"].shape[:2]
        ends = columns["terminateds"] | columns["truncateds"]
        ends[-1] = True

        def env_major(a: np.ndarray) -> np.ndarray:
            return np.ascontiguousarray(a.swapaxes(0, 1)).reshape(steps * n_envs, *a.shape[2:])

        columns = {**columns, "ends": ends}
        names = [*(k for k in COLUMNS if k in columns), *sorted(k for k in columns if k not in COLUMNS)]
        return SampleBatch({k: env_major(columns[k]) for k in names})


def stream_ids(worker_index: int, keys: Iterable[Any]) -> np.ndarray:
    """One int64 per key (an env index, or ``(env_index, agent_id)``) of runner
    ``worker_index``: a hash of both, stable across fragments, processes and restarts."""
    return np.array(
        [int.from_bytes(hashlib.blake2b(f"{worker_index}/{key!r}".encode(), digest_size=8).digest(),
                        "little", signed=True) for key in keys],
        dtype=np.int64)


def count_sampled_steps(policies: Mapping[str, Any], steps: Mapping[str, int]) -> None:
    """Add ``steps[policy_id]`` agent steps to each policy's ``global_timestep``: the one place
    that counter grows (an env runner for its own policies as it samples; the runner group
    for the learner's, from the batches of remote runners)."""
    for pid, n in steps.items():
        if pid in policies:
            policies[pid].global_timestep += n
