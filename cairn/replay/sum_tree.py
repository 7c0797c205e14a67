"""SumTree: a binary tree over priorities for proportional sampling in O(log n), vectorised."""

from __future__ import annotations

import numpy as np

__all__ = ["SumTree"]


class SumTree:
    """Sums and smallest positive values of ``capacity`` non-negative priorities, kept in two
    implicit trees (a priority of 0 can never be drawn, so it has no place in the minimum that
    normalises importance weights: the minimum tree holds it as ``inf``).

    Node ``i`` has children ``2i`` and ``2i+1``; the leaves are ``[size, 2 * size)`` where
    ``size`` is ``capacity`` rounded up to a power of two. Every inner node is recomputed from
    its children (never updated by deltas), so rebuilding from the leaves gives bit-identical
    sums, which is what makes a restored tree sample exactly as the original.

    >>> tree = SumTree(4)
    >>> tree.update(np.array([0, 1, 2]), np.array([1.0, 2.0, 3.0]))
    >>> tree.total, tree.min(3), tree.find(np.array([0.5, 1.5, 5.9])).tolist()
    (6.0, 1.0, [0, 1, 2])
    """

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.size = 1 << max(0, (capacity - 1).bit_length())
        self.sums = np.zeros(2 * self.size, dtype=np.float64)
        self.mins = np.full(2 * self.size, np.inf, dtype=np.float64)

    @property
    def total(self) -> float:
        """The sum of all priorities."""
        return float(self.sums[1])

    def min(self, count: int) -> float:
        """The smallest positive priority among the first ``count`` leaves (the tree's minimum
        when all other leaves are unset); ``inf`` when none is positive."""
        return float(self.mins[1]) if count else float("inf")

    def leaves(self, count: int) -> np.ndarray:
        """A view of the first ``count`` priorities."""
        return self.sums[self.size : self.size + count]

    def update(self, indexes: np.ndarray, priorities: np.ndarray) -> None:
        """Set the priorities of leaves ``indexes`` (later duplicates win) and fix the sums."""
        nodes = np.asarray(indexes, dtype=np.int64) + self.size
        self.sums[nodes] = priorities
        self.mins[nodes] = _positive_or_inf(np.asarray(priorities, dtype=np.float64))
        self._propagate(np.unique(nodes // 2))

    def _propagate(self, nodes: np.ndarray) -> None:
        while nodes.size and nodes[0] >= 1:
            left, right = 2 * nodes, 2 * nodes + 1
            self.sums[nodes] = self.sums[left] + self.sums[right]
            self.mins[nodes] = np.minimum(self.mins[left], self.mins[right])
            if nodes[0] == 1:
                break
            nodes = np.unique(nodes // 2)

    def rebuild(self, priorities: np.ndarray) -> None:
        """Reset the tree to ``priorities`` on the first leaves (all others unset)."""
        # A copy first: ``priorities`` may view this tree's own leaves (:meth:`leaves`, a state
        # taken with ``copy=False``), which the reset below would zero before they are read.
        priorities = np.array(priorities, dtype=np.float64)
        self.sums[:] = 0.0
        self.mins[:] = np.inf
        self.sums[self.size : self.size + len(priorities)] = priorities
        self.mins[self.size : self.size + len(priorities)] = _positive_or_inf(priorities)
        level = self.size // 2
        while level >= 1:
            nodes = np.arange(level, 2 * level)
            self.sums[nodes] = self.sums[2 * nodes] + self.sums[2 * nodes + 1]
            self.mins[nodes] = np.minimum(self.mins[2 * nodes], self.mins[2 * nodes + 1])
            level //= 2

    def find(self, targets: np.ndarray) -> np.ndarray:
        """For each prefix-sum target in ``[0, total)``, the leaf whose interval contains it."""
        nodes = np.ones(len(targets), dtype=np.int64)
        targets = np.array(targets, dtype=np.float64)
        while nodes[0] < self.size:
            left = self.sums[2 * nodes]
            go_right = targets >= left
            targets -= np.where(go_right, left, 0.0)
            nodes = 2 * nodes + go_right
        return nodes - self.size  # type: ignore[no-any-return]


def _positive_or_inf(priorities: np.ndarray) -> np.ndarray:
    return np.where(priorities > 0, priorities, np.inf)
