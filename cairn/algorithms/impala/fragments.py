"""Fragment: one sampled piece of experience for IMPALA's and APPO's learner, tagged with the
version of the weights that acted it (the learner reports the policy lag from it)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from cairn.env_runner.sample_batch import SampleBatch

__all__ = ["Fragment", "join_fragments", "policy_lags"]


@dataclass(frozen=True)
class Fragment:
    """Rows sampled in one ``sample()`` call of an env runner (``rollout_fragment_length``
    steps of each of its environments; on the synchronous path, one round of the runner group:
    every runner's fragment, all acted by the same weights), by policy ID, time-ordered within
    each trajectory piece (``ends`` marks the pieces' last rows), and ``weights_version``: the
    learner update count (:attr:`cairn.algorithms.impala.IMPALA.weights_version`) of the
    weights that acted them; ``env_steps``: the env steps sampled (with several agents fewer
    than the rows, which are agent steps; None: taken as the rows)."""

    batches: Mapping[str, SampleBatch]
    weights_version: int
    env_steps: int | None = None

    @property
    def num_env_steps(self) -> int:
        """:attr:`env_steps`, or (None) the rows of all policies."""
        return sum(len(b) for b in self.batches.values()) if self.env_steps is None else self.env_steps


def join_fragments(fragments: Sequence[Fragment], policy_id: str) -> SampleBatch | None:
    """The rows of ``policy_id`` in ``fragments``, in order (None when no fragment has any)."""
    parts = [f.batches[policy_id] for f in fragments if policy_id in f.batches and len(f.batches[policy_id])]
    return SampleBatch.concat(parts) if parts else None


def policy_lags(fragments: Sequence[Fragment], policy_id: str, weights_version: int) -> np.ndarray:
    """Per row of :func:`join_fragments`: how many learner updates the weights had moved on
    since the row's weights acted it (0 on the synchronous path)."""
    lags = [np.full(len(f.batches[policy_id]), weights_version - f.weights_version, dtype=np.int64)
            for f in fragments if policy_id in f.batches and len(f.batches[policy_id])]
    return np.concatenate(lags) if lags else np.zeros(0, dtype=np.int64)
