"""Random generators as data: numpy Generator state to and from JSON-safe dicts."""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["rng_state", "make_rng"]

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
