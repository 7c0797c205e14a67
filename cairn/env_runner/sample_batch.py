"""SampleBatch: columns of experience for one policy, as numpy arrays of equal length."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import numpy as np

__all__ = ["SampleBatch", "COLUMNS"]

#: obs and next_obs are processed (flattened, filtered) float32 rows; actions are raw policy
#: actions; ``ends`` marks the last step of each contiguous piece of one episode (episode end or
#: the end of the sampled fragment), which is where returns must be bootstrapped or cut.
COLUMNS = ("obs", "actions", "rewards", "terminateds", "truncateds", "ends", "next_obs")


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
