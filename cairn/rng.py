"""Random generators: the seed streams derived from ``config.seed``, and generator state as
JSON-safe data.

Every seed cairn derives comes from :func:`seed_sequence`: the config seed followed by the
stream's own key (e.g. ``1`` for the algorithm's generator, ``(worker_index, seed_offset)`` for
an env runner, a policy ID for a policy's initial weights). Streams with different keys are
independent, and the same seed gives the same streams in every run.
"""

from __future__ import annotations

import zlib
from typing import Any

import numpy as np

__all__ = ["seed_sequence", "derive_seed", "seeded_rng", "rng_state", "make_rng"]

#: The stream keys used across cairn; an int, or a str (a policy ID) hashed with crc32.
StreamKey = int | str


def seed_sequence(seed: int | None, *stream: StreamKey) -> np.random.SeedSequence:
    """The seed sequence of one stream: entropy ``[seed, *stream]`` (str keys as their crc32),
    or fresh OS entropy when ``seed`` is None.

    >>> int(seed_sequence(0, "default_policy").generate_state(1)[0]) == int(
    ...     seed_sequence(0, "default_policy").generate_state(1)[0])
    True
    """
    if seed is None:
        return np.random.SeedSequence(None)
    keys = [zlib.crc32(k.encode()) if isinstance(k, str) else int(k) for k in stream]
    return np.random.SeedSequence([seed, *keys])


def derive_seed(seed: int | None, *stream: StreamKey) -> int | None:
    """One int seed for a stream (None when ``seed`` is None, so the consumer draws its own).

    >>> derive_seed(None, "p0") is None
    True
    """
    if seed is None:
        return None
    return int(seed_sequence(seed, *stream).generate_state(1)[0])


def seeded_rng(seed: int | None, *stream: StreamKey) -> np.random.Generator:
    """A numpy Generator for one stream (see :func:`seed_sequence`)."""
    return np.random.default_rng(seed_sequence(seed, *stream))

_BIT_GENERATORS = ("PCG64", "PCG64DXSM", "Philox", "SFC64", "MT19937")


def rng_state(generator: np.random.Generator) -> dict[str, Any]:
    """The state of a numpy Generator as JSON data."""
    return dict(generator.bit_generator.state)


def make_rng(state: dict[str, Any]) -> np.random.Generator:
    """A numpy Generator restored from :func:`rng_state` (known bit generators only)."""
    name = state.get("bit_generator") if isinstance(state, dict) else None
    if name not in _BIT_GENERATORS:
        raise ValueError(f"Unknown bit generator {name!r}; expected one of {_BIT_GENERATORS}.")
    bit_generator = getattr(np.random, name)()
    bit_generator.state = state
    return np.random.Generator(bit_generator)
