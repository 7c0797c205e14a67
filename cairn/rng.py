"""Random generators: the seed streams derived from ``config.seed``, and generator state as
JSON-safe data.

Every numpy generator and derived seed cairn makes comes from :func:`seed_sequence`, keyed by
one of the :class:`Stream` tags below (one table, one owner) and that stream's own keys.

**The key rule.** A stream's entropy is a list of 32-bit words built so that two different
``(seed, tag, *keys)`` can never give the same list, nor one that numpy treats as the same:

* every value is written as a header word and its words: an int ``v >= 0`` as ``2 * n``
  followed by its ``n >= 1`` little-endian 32-bit words, a str as ``2 * len(bytes) + 1``
  followed by its UTF-8 bytes packed into words; so the list reads back unambiguously (no
  value is a prefix of another, and ``2**32`` is not ``[0, 1]``);
* the list is ``seed, tag, *keys`` written so, then one word, the number of words before it:
  never zero, so the zero padding numpy's ``SeedSequence`` applies (``[s, 1]`` and
  ``[s, 1, 0]`` are one stream to it) cannot make two lists alike;
* every stream starts with its own tag (:class:`Stream`), so streams of different kinds differ
  whatever their keys, and a generator seeded with a plain int (``np.random.default_rng(s)``,
  entropy ``[s]``) is none of them.

A new stream takes a new :class:`Stream` member; code outside this module never builds a
generator from a seed by itself (``np.random.default_rng(seed)``) but asks for its stream here.
The same seed gives the same streams in every run; ``seed=None`` gives fresh OS entropy.
torch's generators are seeded with seeds drawn from these streams (a policy's from
:func:`policy_init_seed`, a learn call's from :data:`Stream.LEARNING`), and so is Keras' global
``SeedGenerator`` in a learn call (:data:`Stream.KERAS_LEARNING`) and while a user's Keras builder
runs (:data:`Stream.KERAS_BUILD`).
"""

from __future__ import annotations

import enum
import sys
from typing import Any

import numpy as np

__all__ = [
    "Stream", "stream_entropy", "seed_sequence", "derive_seed", "seeded_rng", "rng_state", "make_rng",
    "ALGORITHM_STREAM",
    "REPLAY_BUFFER_STREAM", "LEAGUE_STREAM", "EVALUATION_SEED_OFFSET", "ACTIONS_STREAM", "algorithm_rng",
    "policy_init_seed", "policy_sampling_rng", "env_runner_rng", "runner_actions_rng", "draw_reset_seed",
    "replay_buffer_seed", "replay_sampling_rng", "league_remote_mapping_rng", "league_evaluation_seed",
    "game_rng", "check_inputs_rng", "set_rng_state", "env_process_seed", "runner_process_seed",
    "seed_process_generators",
]

#: A stream's key after its tag: an int >= 0, or a str (a policy ID).
StreamKey = int | str


# ----------------------------------------------------------------- the seed streams' tags
class Stream(enum.IntEnum):
    """The tag each stream's entropy starts with (after the seed); one member per stream, never
    reused. ``(keys)``: what follows the tag; "seed" is the config seed unless said otherwise."""

    #: ``()``: the algorithm's own generator (``Algorithm.rng``: PPO's minibatch order).
    ALGORITHM = 1
    #: ``(policy_id)``: the seed of a policy's replay buffer (:func:`replay_buffer_seed`).
    REPLAY_BUFFER = 2
    #: ``()``: a league's generator (cairn.league: which opponent each game draws).
    LEAGUE = 3
    #: ``(worker_index, seed_offset)``: an env runner's reset seeds (:func:`env_runner_rng`).
    ENV_RUNNER = 4
    #: ``(worker_index, policy_id, env_steps)``: a remote runner's action sampling.
    RUNNER_ACTIONS = 5
    #: ``(policy_id)``: the seed of a new policy (its weights, :func:`policy_init_seed`).
    POLICY_INIT = 6
    #: ``()`` of the *policy's* seed: a policy's numpy generator (actions in the sampling loop).
    POLICY_SAMPLING = 7
    #: ``()``: the seed of a league's evaluation games (:func:`league_evaluation_seed`).
    LEAGUE_EVALUATION = 8
    #: ``(worker, snapshots_taken)``: a remote runner's copy of the league's mapping.
    LEAGUE_REMOTE_MAPPING = 9
    #: ``(game)`` of the games' seed: a scripted opponent's generator in one greedy game.
    GAME = 10
    #: ``(num_grad_updates)`` of a draw of the policy's torch generator: one learn call's
    #: seed of torch's global generator (cairn.learners.actor.learning_seed).
    LEARNING = 11
    #: ``()`` of the buffer's seed: a replay buffer's sampling order.
    REPLAY_SAMPLING = 12
    #: ``()`` of the check's seed: the inputs an export check feeds the exported graph.
    CHECK_INPUTS = 13
    #: ``(num_grad_updates)`` of :data:`LEARNING`'s draw: one learn call's seed of Keras' global
    #: ``SeedGenerator`` (``keras.random.*`` without a seed; cairn.learners.actor.learning).
    KERAS_LEARNING = 14
    #: ``()`` of a user's builder's seed (cairn.policy.custom_model.seeded_build): Keras' global
    #: ``SeedGenerator`` while a user's Keras builder runs.
    KERAS_BUILD = 15
    #: ``(worker_index, seed_offset, env_index)``: the seed of numpy's and torch's global
    #: generators in the child process of one ``"async"`` environment (:func:`env_process_seed`).
    ENV_PROCESS = 16
    #: ``(worker_index)``: the seed of numpy's and torch's global generators in the process of
    #: remote env runner ``worker_index`` (:func:`runner_process_seed`).
    RUNNER_PROCESS = 17


ALGORITHM_STREAM = Stream.ALGORITHM
REPLAY_BUFFER_STREAM = Stream.REPLAY_BUFFER
LEAGUE_STREAM = Stream.LEAGUE
ACTIONS_STREAM = Stream.RUNNER_ACTIONS
#: The ``seed_offset`` of the evaluation runner (worker 0): its envs' stream is apart from the
#: training ones'.
EVALUATION_SEED_OFFSET = 1_000_003


def _words(value: StreamKey, what: str) -> list[int]:
    """``value`` as its header word and 32-bit words (the key rule in the module docstring)."""
    if isinstance(value, str):
        data = value.encode()
        data += bytes(-len(data) % 4)
        return [2 * len(value.encode()) + 1, *(int.from_bytes(data[i:i + 4], "little")
                                               for i in range(0, len(data), 4))]
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
        raise ValueError(f"Seed stream {what} {value!r} is invalid: expected an int >= 0 or a str.")
    value = int(value)
    words = [(value >> shift) & 0xFFFFFFFF for shift in range(0, max(value.bit_length(), 1), 32)]
    return [2 * len(words), *words]


def stream_entropy(seed: int, stream: Stream, *keys: StreamKey) -> list[int]:
    """The entropy words of one stream (the key rule in the module docstring).

    >>> stream_entropy(2**32, Stream.ALGORITHM)
    [4, 0, 1, 2, 1, 5]
    """
    if not isinstance(stream, Stream):
        raise ValueError(f"Seed stream tag {stream!r} is not a cairn.rng.Stream; add the stream there.")
    words = [*_words(seed, "seed"), *_words(int(stream), "tag")]
    for key in keys:
        words += _words(key, "key")
    return [*words, len(words)]


def seed_sequence(seed: int | None, stream: Stream, *keys: StreamKey) -> np.random.SeedSequence:
    """The seed sequence of one stream: entropy :func:`stream_entropy`, or fresh OS entropy when
    ``seed`` is None.

    >>> int(seed_sequence(0, Stream.POLICY_INIT, "p0").generate_state(1)[0]) == int(
    ...     seed_sequence(0, Stream.POLICY_INIT, "p0").generate_state(1)[0])
    True
    """
    if seed is None:
        stream_entropy(0, stream, *keys)  # checks the keys all the same
        return np.random.SeedSequence(None)
    return np.random.SeedSequence(stream_entropy(seed, stream, *keys))


def derive_seed(seed: int | None, stream: Stream, *keys: StreamKey) -> int | None:
    """One int seed for a stream (None when ``seed`` is None, so the consumer draws its own).

    >>> derive_seed(None, Stream.POLICY_INIT, "p0") is None
    True
    """
    if seed is None:
        seed_sequence(None, stream, *keys)  # checks the keys all the same
        return None
    return int(seed_sequence(seed, stream, *keys).generate_state(1)[0])


def seeded_rng(seed: int | None, stream: Stream, *keys: StreamKey) -> np.random.Generator:
    """A numpy Generator for one stream (see :func:`seed_sequence`)."""
    return np.random.default_rng(seed_sequence(seed, stream, *keys))


def algorithm_rng(seed: int | None) -> np.random.Generator:
    """The algorithm's own generator (:data:`ALGORITHM_STREAM`)."""
    return seeded_rng(seed, ALGORITHM_STREAM)


def policy_init_seed(seed: int | None, policy_id: str) -> int | None:
    """The seed of a new policy (its initial weights and its generators,
    :func:`policy_sampling_rng`): :data:`Stream.POLICY_INIT` keyed by its ID."""
    return derive_seed(seed, Stream.POLICY_INIT, policy_id)


def policy_sampling_rng(policy_seed: int | None) -> np.random.Generator:
    """A policy's numpy generator (actions in the sampling loop), from the policy's own seed."""
    return seeded_rng(policy_seed, Stream.POLICY_SAMPLING)


def env_runner_rng(seed: int | None, worker_index: int, seed_offset: int = 0) -> np.random.Generator:
    """The generator an env runner draws its reset seeds from (:func:`draw_reset_seed`)."""
    return seeded_rng(seed, Stream.ENV_RUNNER, worker_index, seed_offset)


def env_process_seed(seed: int | None, worker_index: int, seed_offset: int, env_index: int) -> int | None:
    """The seed of numpy's and torch's global generators in the child process of environment
    ``env_index`` of env runner ``worker_index`` (``"async"``), a 32-bit int (None for
    ``seed=None``: the child takes fresh OS entropy) (:data:`Stream.ENV_PROCESS`)."""
    return derive_seed(seed, Stream.ENV_PROCESS, worker_index, seed_offset, env_index)


def runner_process_seed(seed: int | None, worker_index: int) -> int | None:
    """The seed of numpy's and torch's global generators in the Ray actor process of remote env
    runner ``worker_index`` (None for ``seed=None``: fresh OS entropy) (:data:`Stream.RUNNER_PROCESS`)."""
    return derive_seed(seed, Stream.RUNNER_PROCESS, worker_index)


def seed_process_generators(seed: int | None) -> None:
    """Seed numpy's and torch's global generators of this process with ``seed`` (None: fresh OS
    entropy): in a process cairn starts for environments (an ``"async"`` env's child, a remote
    env runner's actor), which would otherwise share one stream with its siblings.

    Every ``"async"`` child is forked from one fork server and inherits its generators' state,
    and torch's starts from the same fixed seed in every new process anyway, so an environment
    drawing from them (``np.random.random()``, ``torch.rand()``: much user code does) returned
    the very same numbers in every env copy, or on every remote runner. Python reseeds
    ``random`` after a fork itself; a reproducible environment draws from its own
    ``np_random``, which the runner's reset seeds."""
    np.random.seed(seed)
    torch = sys.modules.get("torch")
    if torch is not None:
        if seed is None:
            torch.seed()
        else:
            torch.manual_seed(seed)


def runner_actions_rng(seed: int | None, worker_index: int, policy_id: str,
                       env_steps: int) -> np.random.Generator:
    """A remote runner's action-sampling generator for ``policy_id``, keyed by where the runner
    stands (:data:`Stream.RUNNER_ACTIONS`)."""
    return seeded_rng(seed, Stream.RUNNER_ACTIONS, worker_index, policy_id, env_steps)


def replay_buffer_seed(seed: int | None, policy_id: str) -> int:
    """The seed of policy ``policy_id``'s replay buffer (fresh when ``seed`` is None)."""
    return int(seed_sequence(seed, Stream.REPLAY_BUFFER, policy_id).generate_state(1)[0])


def replay_sampling_rng(buffer_seed: int | None) -> np.random.Generator:
    """A replay buffer's sampling generator, from the buffer's seed."""
    return seeded_rng(buffer_seed, Stream.REPLAY_SAMPLING)


def league_remote_mapping_rng(seed: int | None, worker: int,
                              num_env_steps_sampled: int) -> np.random.Generator:
    """The generator a remote runner's copy of a league's mapping draws one sample's games from,
    keyed by where the runner stands (its worker index and the env steps it sampled before), as
    its action sampling is (:func:`runner_actions_rng`): a runner recreated after a fault and
    brought to its last position draws on from there, not its predecessor's draws again."""
    return seeded_rng(seed, Stream.LEAGUE_REMOTE_MAPPING, worker, num_env_steps_sampled)


def league_evaluation_seed(seed: int | None) -> int:
    """The ``seed`` of a league's evaluation games (0 without a seed), below 2**31."""
    return (derive_seed(seed, Stream.LEAGUE_EVALUATION) or 0) % 2**31


def game_rng(games_seed: int, game: int) -> np.random.Generator:
    """A scripted opponent's generator in game ``game`` of ``play_games(seed=games_seed)``."""
    return seeded_rng(games_seed, Stream.GAME, game)


def check_inputs_rng(check_seed: int) -> np.random.Generator:
    """The generator an export check draws its inputs (and masks) from."""
    return seeded_rng(check_seed, Stream.CHECK_INPUTS)


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
