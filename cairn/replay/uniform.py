"""ReplayBuffer: a ring of preallocated numpy columns with uniform sampling."""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import Any

import numpy as np

from cairn.rng import make_rng, replay_sampling_rng, rng_state

__all__ = ["ReplayBuffer"]


class ReplayBuffer:
    """A fixed-capacity ring buffer of transitions, stored column by column.

    Columns (``obs``, ``actions``, ...) are allocated once, on the first :meth:`add`, with the
    shapes and dtypes of the rows given there; later rows overwrite the oldest ones. Sampling is
    uniform with replacement and driven by the buffer's own numpy generator, which is part of
    its state, so a restored buffer draws the same indices as the original would have.

    Args:
        capacity: The number of transitions kept.
        seed: Seeds the sampling generator (None: nondeterministic).

    >>> import numpy as np
    >>> buffer = ReplayBuffer(capacity=4, seed=0)
    >>> buffer.add({"x": np.arange(6)}).tolist()  # slots written: the ring wrapped
    [2, 3, 0, 1]
    >>> len(buffer), sorted(buffer.get_state()["columns"]["x"].tolist())
    (4, [2, 3, 4, 5])
    """

    type_name = "uniform"

    def __init__(self, capacity: int, *, seed: int | None = None) -> None:
        if not isinstance(capacity, int) or isinstance(capacity, bool) or capacity < 1:
            raise ValueError(f"Replay buffer capacity must be an int >= 1, got {capacity!r}.")
        self.capacity = capacity
        self.rng = replay_sampling_rng(seed)
        self.columns: dict[str, np.ndarray] = {}
        self.size = 0
        self.cursor = 0  # where the next row goes
        self.num_added = 0  # rows added over the buffer's lifetime

    def __len__(self) -> int:
        return self.size

    # ---------------------------------------------------------------------------------- adding
    def _allocate(self, batch: Mapping[str, np.ndarray]) -> None:
        # np.empty reserves address space only; pages are touched as rows are written, so a
        # large, mostly empty buffer costs little memory.
        self.columns = {
            name: np.empty((self.capacity, *np.shape(v)[1:]), dtype=np.asarray(v).dtype)
            for name, v in batch.items()
        }

    def add(self, batch: Mapping[str, np.ndarray]) -> np.ndarray:
        """Append the rows of ``batch`` (equal-length columns); return the slots written."""
        lengths = {len(v) for v in batch.values()}
        if len(lengths) != 1:
            raise ValueError(f"Columns of a batch must have equal lengths, got {sorted(lengths)}.")
        n = lengths.pop()
        if not self.columns:
            self._allocate(batch)
        if set(batch) != set(self.columns):
            raise ValueError(
                f"Batch columns {sorted(batch)} differ from the buffer's {sorted(self.columns)}."
            )
        shapes = {name: np.shape(v)[1:] for name, v in batch.items()
                  if np.shape(v)[1:] != self.columns[name].shape[1:]}
        if shapes:
            # numpy would broadcast a row of another shape into the column ([x] into [x, x, x]).
            raise ValueError(f"Rows of columns {sorted(shapes)} have shapes {shapes}, but the buffer stores "
                             f"{ {name: self.columns[name].shape[1:] for name in shapes} }.")
        skip = max(0, n - self.capacity)  # only the newest `capacity` rows can be kept
        count = n - skip
        first = (self.cursor + skip) % self.capacity
        head = min(count, self.capacity - first)  # rows before the ring wraps around
        for name, column in self.columns.items():
            values = np.asarray(batch[name])[skip:]
            column[first : first + head] = values[:head]
            column[: count - head] = values[head:]
        self.cursor = (first + count) % self.capacity
        self.size = min(self.size + n, self.capacity)
        self.num_added += n
        return (first + np.arange(count)) % self.capacity

    # -------------------------------------------------------------------------------- sampling
    def sample(self, batch_size: int) -> dict[str, np.ndarray]:
        """``batch_size`` transitions drawn uniformly with replacement, plus their
        ``batch_indexes`` (slots, for priority updates)."""
        if self.size == 0:
            raise ValueError("Cannot sample from an empty replay buffer; add transitions first.")
        indexes = self.rng.integers(0, self.size, size=batch_size)
        return self._gather(indexes)

    def _gather(self, indexes: np.ndarray) -> dict[str, np.ndarray]:
        out = {name: column[indexes] for name, column in self.columns.items()}
        out["batch_indexes"] = indexes
        return out

    # ----------------------------------------------------------------------------------- state
    def get_state(self, *, copy: bool = True) -> dict[str, Any]:
        """The buffer as state data: only the filled rows of each column (views when
        ``copy=False``, which is what checkpoint writing uses to avoid doubling memory)."""
        filled = {
            name: column[: self.size].copy() if copy else column[: self.size]
            for name, column in self.columns.items()
        }
        return {
            "type": self.type_name,
            "capacity": self.capacity,
            "size": self.size,
            "cursor": self.cursor,
            "num_added": self.num_added,
            "rng": rng_state(self.rng),
            "columns": filled,
        }

    def set_state(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`get_state`. With the same capacity the restore is exact; with
        another capacity the newest rows that fit are kept, oldest first."""
        if state.get("type") != self.type_name:
            raise ValueError(
                f"State is of a {state.get('type')!r} replay buffer; this one is {self.type_name!r}."
            )
        size, cursor = int(state["size"]), int(state["cursor"])
        columns = {name: np.asarray(v) for name, v in state["columns"].items()}
        bad = {name: len(v) for name, v in columns.items() if len(v) != size}
        if bad:
            raise ValueError(f"Replay buffer state has size {size}, but columns have lengths {bad}.")
        if not 0 <= size <= int(state["capacity"]) or not 0 <= cursor < max(1, int(state["capacity"])):
            raise ValueError(f"Replay buffer state has invalid size {size} / cursor {cursor}.")
        if size < int(state["capacity"]) and cursor != size:
            # Until the ring is full, rows fill slots [0, size) and the next goes to slot size. Taken
            # as it is, the next add would overwrite stored rows while sampling drew never-written
            # (uninitialised) slots, with no error.
            raise ValueError(f"Replay buffer state has cursor {cursor} but size {size} below its capacity "
                             f"{state['capacity']}: a buffer that is not full has its cursor at its size. "
                             "The state is damaged; restore another checkpoint.")
        order = None
        if int(state["capacity"]) != self.capacity:
            warnings.warn(
                f"Restoring a replay buffer of capacity {state['capacity']} into capacity "
                f"{self.capacity}: the newest transitions that fit are kept and sampling will not "
                "repeat the original run.",
                stacklevel=2,
            )
            # Oldest first: the ring starts at the cursor once it has wrapped around.
            order = np.arange(size) if size < int(state["capacity"]) else (cursor + np.arange(size)) % size
            order = order[max(0, size - self.capacity) :]
        self.rng = make_rng(state["rng"])
        self.num_added = int(state["num_added"])
        if order is not None:
            self.columns, self.size, self.cursor = {}, 0, 0
            if size:
                self.add({name: column[order] for name, column in columns.items()})
            self.num_added = int(state["num_added"])
            return
        self.size, self.cursor = size, cursor
        self.columns = {name: self._own(column) for name, column in columns.items()}

    def _own(self, column: np.ndarray) -> np.ndarray:
        """Storage of ``capacity`` rows holding ``column``'s rows first.

        A full column that views raw file bytes (as the checkpoint reader returns them) is
        adopted as it is: copying it into fresh memory would cost as much again as reading it.
        Any other array is copied, so that two buffers never share storage.
        """
        if len(column) == self.capacity and column.flags.writeable and _views_raw_bytes(column):
            return column
        storage = np.empty((self.capacity, *column.shape[1:]), dtype=column.dtype)
        storage[: len(column)] = column
        return storage

    def __repr__(self) -> str:
        return f"{type(self).__name__}(capacity={self.capacity}, size={self.size})"


def _views_raw_bytes(array: np.ndarray) -> bool:
    """True when ``array`` views memory that no other numpy array owns (e.g. a bytearray)."""
    base: Any = array
    while isinstance(base, np.ndarray):
        if base.base is None:
            return False
        base = base.base
    return isinstance(base, (bytearray, memoryview))
