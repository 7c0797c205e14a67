"""Build replay buffers from a ``replay_buffer_config`` dict, or from their state."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from cairn.replay.prioritized import PrioritizedReplayBuffer
from cairn.replay.uniform import ReplayBuffer

__all__ = ["REPLAY_BUFFER_TYPES", "DEFAULT_REPLAY_BUFFER_CONFIG", "MAX_REPLAY_CAPACITY", "make_replay_buffer",
           "replay_buffer_from_state"]

REPLAY_BUFFER_TYPES = ("uniform", "prioritized")
#: The largest ``capacity`` a buffer may have: 100x the usual 1e6, and still 1.6 GB per float32
#: column of 4 values. A larger one (5e8 from a config or checkpoint) failed at the first add with
#: numpy's MemoryError, far from the setting that caused it.
MAX_REPLAY_CAPACITY = 100_000_000
#: ``alpha``, ``beta`` and ``epsilon`` apply to the prioritized buffer only.
DEFAULT_REPLAY_BUFFER_CONFIG: dict[str, Any] = {
    "type": "uniform",
    "capacity": 50_000,
    "alpha": 0.6,
    "beta": 0.4,
    "epsilon": 1e-6,
}


def make_replay_buffer(config: Mapping[str, Any], *, seed: int | None = None) -> ReplayBuffer:
    """A new, empty buffer for ``config`` (keys of :data:`DEFAULT_REPLAY_BUFFER_CONFIG`).

    >>> make_replay_buffer({"type": "prioritized", "capacity": 1000}, seed=0)
    PrioritizedReplayBuffer(capacity=1000, size=0)
    """
    merged = {**DEFAULT_REPLAY_BUFFER_CONFIG, **config}
    kind = merged["type"]
    if kind == "uniform":
        return ReplayBuffer(merged["capacity"], seed=seed)
    if kind == "prioritized":
        return PrioritizedReplayBuffer(
            merged["capacity"], alpha=merged["alpha"], beta=merged["beta"],
            epsilon=merged["epsilon"], seed=seed,
        )
    raise ValueError(f"Unknown replay buffer type {kind!r}; expected one of {list(REPLAY_BUFFER_TYPES)}.")


def replay_buffer_from_state(state: Mapping[str, Any]) -> ReplayBuffer:
    """Rebuild a buffer from :meth:`ReplayBuffer.get_state` alone."""
    config = {key: state[key] for key in ("type", "capacity", "alpha", "beta", "epsilon") if key in state}
    buffer = make_replay_buffer(config)
    buffer.set_state(state)
    return buffer
