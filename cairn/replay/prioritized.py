"""PrioritizedReplayBuffer: proportional prioritized replay (Schaul et al. 2016)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from cairn.replay.sum_tree import SumTree
from cairn.replay.uniform import ReplayBuffer

__all__ = ["PrioritizedReplayBuffer"]


class PrioritizedReplayBuffer(ReplayBuffer):
    """Samples transition ``i`` with probability ``p_i^alpha / sum_k p_k^alpha``.

    New transitions get the largest priority seen so far, so each is replayed at least about
    once. Samples carry importance ``weights`` ``(N * P(i))^-beta / max_j (N * P(j))^-beta``
    that undo the bias of non-uniform sampling. Call :meth:`update_priorities` with the
    absolute TD errors after learning on a sample.

    Args:
        capacity: The number of transitions kept.
        alpha: How much prioritisation is used (0: uniform).
        beta: Importance-sampling correction (1: full correction).
        epsilon: Added to every priority so that no transition becomes unsampleable. With 0, a
            transition whose TD error is exactly 0 is not drawn again until it is replaced, and
            the importance weights are normalised over the transitions that can be drawn.
        seed: Seeds the sampling generator.
    """

    type_name = "prioritized"

    def __init__(
        self, capacity: int, *, alpha: float = 0.6, beta: float = 0.4, epsilon: float = 1e-6,
        seed: int | None = None,
    ) -> None:
        super().__init__(capacity, seed=seed)
        for name, value in (("alpha", alpha), ("beta", beta), ("epsilon", epsilon)):
            if not isinstance(value, (int, float)) or isinstance(value, bool) or value < 0:
                raise ValueError(f"Prioritized replay {name} must be a number >= 0, got {value!r}.")
        self.alpha, self.beta, self.epsilon = float(alpha), float(beta), float(epsilon)
        self.tree = SumTree(capacity)
        self.max_priority = 1.0  # the largest p_i^alpha so far

    def add(self, batch: Mapping[str, np.ndarray]) -> np.ndarray:
        slots = super().add(batch)
        self.tree.update(slots, np.full(len(slots), self.max_priority))
        return slots

    def sample(self, batch_size: int) -> dict[str, np.ndarray]:
        """Stratified proportional sampling: one draw from each of ``batch_size`` equal slices
        of the total priority; adds ``weights`` and ``batch_indexes``."""
        if self.size == 0:
            raise ValueError("Cannot sample from an empty replay buffer; add transitions first.")
        total = self.tree.total
        if not total > 0:
            raise ValueError(f"Every priority in the replay buffer is 0 (sum {total}): with epsilon=0, "
                             "TD errors of exactly 0 leave nothing to draw. Use epsilon > 0 (the default "
                             "is 1e-6).")
        targets = (np.arange(batch_size) + self.rng.random(batch_size)) * (total / batch_size)
        # Rounding can carry a target past the last filled leaf; keep it inside.
        indexes = np.minimum(self.tree.find(np.minimum(targets, np.nextafter(total, 0))), self.size - 1)
        probs = self.tree.leaves(self.size)[indexes] / total
        min_prob = self.tree.min(self.size) / total
        weights = (probs / min_prob) ** (-self.beta)  # = (N P(i))^-beta / (N P_min)^-beta
        out = self._gather(indexes)
        out["weights"] = weights.astype(np.float32)
        return out

    def update_priorities(self, indexes: np.ndarray, td_errors: np.ndarray) -> None:
        """Set the priorities of sampled slots from their absolute TD errors (one per slot)."""
        indexes = np.asarray(indexes)
        if indexes.ndim != 1 or np.shape(td_errors) != indexes.shape:
            # One TD error would be broadcast to every slot, and a slot's priority taken from another's.
            raise ValueError(f"update_priorities needs one TD error per index: got indexes of shape "
                             f"{indexes.shape} and TD errors of shape {np.shape(td_errors)}.")
        if indexes.size and not (np.issubdtype(indexes.dtype, np.integer)
                                 and 0 <= indexes.min() and indexes.max() < self.size):
            # A slot past the filled ones would become drawable (draws there land on the last row), and a
            # negative one would overwrite an inner node of the sum tree.
            raise ValueError(f"update_priorities got indexes {indexes.min()}..{indexes.max()} "
                             f"({indexes.dtype}); expected the integer slots [0, {self.size}) that "
                             "sample() returned (its 'batch_indexes').")
        priorities = (np.abs(np.asarray(td_errors, dtype=np.float64)) + self.epsilon) ** self.alpha
        if not np.isfinite(priorities).all():
            # A NaN or infinite priority would make every later draw land on one slot without a word.
            bad = np.asarray(td_errors)[~np.isfinite(priorities)]
            raise ValueError(f"{len(bad)} TD errors give non-finite priorities (first: {bad[0]!r}); the "
                             "priorities were left unchanged. The Q-network's outputs or targets diverged: "
                             "lower the learning rate, clip rewards or gradients (grad_clip).")
        self.tree.update(indexes, priorities)
        self.max_priority = max(self.max_priority, float(priorities.max(initial=0.0)))

    def get_state(self, *, copy: bool = True) -> dict[str, Any]:
        state = super().get_state(copy=copy)
        leaves = self.tree.leaves(self.size)
        state.update(
            priorities=leaves.copy() if copy else leaves,
            max_priority=self.max_priority,
            alpha=self.alpha,
            beta=self.beta,
            epsilon=self.epsilon,
        )
        return state

    def set_state(self, state: Mapping[str, Any]) -> None:
        if state.get("type") != self.type_name:
            raise ValueError(
                f"State is of a {state.get('type')!r} replay buffer; this one is {self.type_name!r}."
            )
        priorities = np.asarray(state["priorities"], dtype=np.float64)
        if len(priorities) != int(state["size"]):
            raise ValueError(
                f"Prioritized buffer state has size {state['size']} but {len(priorities)} priorities."
            )
        bad = ~(np.isfinite(priorities) & (priorities >= 0))
        if bad.any():
            # A negative priority unbalances the sum tree (draws skip the rows before it) and a NaN one
            # makes every sum NaN, both without a word about the state.
            raise ValueError(f"Prioritized buffer state has {int(bad.sum())} priorities that are not finite "
                             f"numbers >= 0 (first: {priorities[bad][0]!r}, slot {int(np.argmax(bad))}). The "
                             "state is damaged; restore another checkpoint.")
        if int(state["capacity"]) != self.capacity:
            # The base class reorders rows oldest first; priorities follow the same order.
            size, cursor = int(state["size"]), int(state["cursor"])
            order = np.arange(size) if size < int(state["capacity"]) else (cursor + np.arange(size)) % size
            priorities = priorities[order][max(0, size - self.capacity) :]
        max_priority = np.array([float(state["max_priority"])])
        if not (np.isfinite(max_priority[0]) and max_priority[0] >= 0):
            raise ValueError(f"Prioritized buffer state has max_priority={state['max_priority']!r}; expected "
                             "a finite number >= 0. The state is damaged; restore another checkpoint.")
        stored = {name: state.get(name, getattr(self, name)) for name in ("alpha", "epsilon")}
        for name, value in stored.items():
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < np.inf:
                raise ValueError(f"Prioritized buffer state has {name}={value!r}; expected a number >= 0.")
        if (stored["alpha"], stored["epsilon"]) != (self.alpha, self.epsilon):
            # Restored under another alpha or epsilon (config_overrides): the stored priorities are
            # (|td| + epsilon)^alpha of the saved run; mixed with this buffer's own, the rows would
            # be drawn by two different rules without a word. Re-express them in this buffer's.
            priorities = self._reprioritised(priorities, float(stored["alpha"]), float(stored["epsilon"]))
            max_priority = self._reprioritised(max_priority, float(stored["alpha"]), float(stored["epsilon"]))
        super().set_state(state)
        self.max_priority = float(max_priority[0])
        self.tree.rebuild(priorities)

    def _reprioritised(self, priorities: np.ndarray, alpha: float, epsilon: float) -> np.ndarray:
        """``(|td| + epsilon)^alpha`` priorities as this buffer's ``(|td| + self.epsilon)^self.alpha``.
        With ``alpha`` 0 every priority is 1 and holds no TD error: they stay 1, as new rows'
        would be at a fresh buffer's largest priority."""
        if alpha == 0:
            return priorities
        abs_td = np.maximum(priorities ** (1.0 / alpha) - epsilon, 0.0)
        return (abs_td + self.epsilon) ** self.alpha  # type: ignore[no-any-return]
