"""Random generators: the seed streams derived from ``config.seed``, and generator state as
JSON-safe data.

Every seed cairn derives comes from :func:`seed_sequence`: the config seed followed by the
stream's own key. The keys are the table below, one owner for all of them; streams with
different keys are independent, and the same seed gives the same streams in every run.
"""

from __future__ import annotations

import zlib
from typing import Any

import numpy as np

__all__ = [
    "seed_sequence", "derive_seed", "seeded_rng", "rng_state", "make_rng", "ALGORITHM_STREAM",
    "REPLAY_BUFFER_STREAM", "LEAGUE_STREAM", "EVALUATION_SEED_OFFSET", "ACTIONS_STREAM", "algorithm_rng",
    "policy_init_seed", "env_runner_rng", "runner_actions_rng", "draw_reset_seed",
    "set_rng_state",
]

#: The stream keys used across cairn; an int, or a str (a policy ID) hashed with crc32.
StreamKey = int | str

# ----------------------------------------------------------------- the seed streams' keys
# (config seed, *key) for each stream; a new stream takes a key no other one starts with.
#: ``(1,)``: the algorithm's own generator (``Algorithm.rng``: PPO's minibatch order).
ALGORITHM_STREAM = 1
#: ``(2, policy_id)``: a policy's replay buffer (its sampling order).
REPLAY_BUFFER_STREAM = 2
#: ``(3,)``: a league's generator (cairn.league: which opponent each game draws).
LEAGUE_STREAM = 3
#: ``(worker_index, seed_offset)``: an env runner's reset seeds; the evaluation runner is
#: worker 0 with this offset, which keeps its envs apart from the training ones.
EVALUATION_SEED_OFFSET = 1_000_003
#: ``(worker_index, "actions", policy_id, env_steps)``: a remote runner's action sampling.
ACTIONS_STREAM = "actions"
# ``(policy_id,)``: a policy's initial weights (:func:`policy_init_seed`).


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


def algorithm_rng(seed: int | None) -> np.random.Generator:
    """The algorithm's own generator (:data:`ALGORITHM_STREAM`)."""
    return seeded_rng(seed, ALGORITHM_STREAM)


def policy_init_seed(seed: int | None, policy_id: str) -> int | None:
    """The seed of a new policy's initial weights: the stream keyed by its ID."""
    return derive_seed(seed, policy_id)


def env_runner_rng(seed: int | None, worker_index: int, seed_offset: int = 0) -> np.random.Generator:
    """The generator an env runner draws its reset seeds from (:func:`draw_reset_seed`)."""
    return seeded_rng(seed, worker_index, seed_offset)


def runner_actions_rng(seed: int | None, worker_index: int, policy_id: str,
                       env_steps: int) -> np.random.Generator:
    """A remote runner's action-sampling generator for ``policy_id``, keyed by where the runner
    stands (:data:`ACTIONS_STREAM`)."""
    return seeded_rng(seed, worker_index, ACTIONS_STREAM, policy_id, env_steps)


def draw_reset_seed(rng: np.random.Generator) -> int:
    """The next environment reset seed from an env runner's generator."""
    return int(rng.integers(2**31 - 1))


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


def set_rng_state(generator: np.random.Generator, state: dict[str, Any]) -> None:
    """Restore :func:`rng_state` into ``generator`` in place (the same bit generator only), so
    that every holder of the generator continues from the restored state."""
    make_rng(state)  # refuses an unknown bit generator first
    name = type(generator.bit_generator).__name__
    if state["bit_generator"] != name:
        raise ValueError(f"Stored generator state is for {state['bit_generator']!r}, not {name!r}.")
    generator.bit_generator.state = state
