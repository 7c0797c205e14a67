"""Every random stream cairn derives from one config seed is its own: no two draw the same
numbers (cairn.rng's key rule).

numpy's SeedSequence pads its entropy with zeros and splits big ints into 32-bit words, so two
different keys can name one stream (``[s, 1]`` and ``[s, 1, 0]``; ``[2**32]`` and ``[0, 1]``): a
run whose env reset seeds are its minibatch order is wrong with no error. These tests enumerate
the streams of a config, as the code that seeds them derives them, and compare their first draws.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

from cairn.algorithms.evaluation import EVALUATION_SEED_OFFSET
from cairn.config.league_settings import league_settings
from cairn.league.league import League
from cairn.league.matchmaking import LeagueMapping
from cairn.policy.filters import NoFilter
from cairn.policy.training_state import PolicyTrainingState
from cairn.replay.uniform import ReplayBuffer
from cairn.rng import (
    Stream,
    algorithm_rng,
    check_inputs_rng,
    derive_seed,
    env_runner_rng,
    game_rng,
    policy_init_seed,
    replay_buffer_seed,
    runner_actions_rng,
    seed_sequence,
    seeded_rng,
    stream_entropy,
)

POLICY_IDS = ("default_policy", "main", "main_v1", "p0", "p1")
SEEDS = (0, 1, 3, 7, 2**31 - 1, 2**32, 2**32 + 1, 2**63 + 5)
WORKER_COUNTS = (0, 1, 2, 4)
LEAGUE_SETTINGS = league_settings()


def first_draw(rng: np.random.Generator) -> int:
    """The generator's first 64-bit draw (from a copy: the generator does not move)."""
    copy = np.random.Generator(type(rng.bit_generator)())
    copy.bit_generator.state = rng.bit_generator.state
    return int(copy.integers(0, 2**63))


def streams(seed: int, num_workers: int) -> Iterator[tuple[str, np.random.Generator]]:
    """``(name, generator)`` for every numpy stream a config with ``seed`` and ``num_workers``
    remote env runners derives."""
    yield "algorithm", algorithm_rng(seed)
    for worker in range(num_workers + 1):  # 0: the local runner
        yield f"runner {worker} reset seeds", env_runner_rng(seed, worker, 0)
        for pid in POLICY_IDS:
            for steps in (0, 200):
                yield (f"runner {worker} actions {pid} @{steps}",
                       runner_actions_rng(seed, worker, pid, steps))
    yield "evaluation runner reset seeds", env_runner_rng(seed, 0, EVALUATION_SEED_OFFSET)
    for pid in POLICY_IDS:
        policy_seed = policy_init_seed(seed, pid)
        yield f"policy {pid} actions", PolicyTrainingState(NoFilter(), seed=policy_seed).np_random
        for updates in (0, 1):  # learning_seed's stream, from a draw of the policy's torch generator
            yield f"policy {pid} learn call {updates}", seeded_rng(policy_seed, Stream.LEARNING, updates)
            yield (f"policy {pid} learn call {updates}, Keras' global generator",
                   seeded_rng(policy_seed, Stream.KERAS_LEARNING, updates))
        yield f"policy {pid} Keras builder's global generator", seeded_rng(policy_seed, Stream.KERAS_BUILD)
    league = League(LEAGUE_SETTINGS, seed)
    yield "league", league.rng
    for worker in range(num_workers + 1):
        mapping = LeagueMapping(league)
        mapping.__setstate__({"league": league})  # as a remote runner's copy
        yield f"league mapping on runner {worker}", mapping._rng(worker)
    for game in range(4):
        yield f"league evaluation game {game}", game_rng(league.evaluation_seed, game)
        yield f"play_games(seed={seed}) game {game}", game_rng(seed, game)
    yield "export check inputs", check_inputs_rng(seed)


def replay_streams(seed: int) -> Iterator[tuple[str, np.random.Generator]]:
    """The replay buffers' sampling streams, one per policy."""
    for pid in POLICY_IDS:
        yield f"replay buffer {pid}", ReplayBuffer(1, seed=replay_buffer_seed(seed, pid)).rng


def all_streams(seed: int, num_workers: int) -> list[tuple[str, np.random.Generator]]:
    return [*streams(seed, num_workers), *replay_streams(seed)]


@pytest.mark.parametrize("num_workers", WORKER_COUNTS)
@pytest.mark.parametrize("seed", SEEDS)
def test_a_configs_streams_draw_different_numbers(seed: int, num_workers: int) -> None:
    seen: dict[int, str] = {}
    for name, rng in all_streams(seed, num_workers):
        draw = first_draw(rng)
        assert draw not in seen, f"seed {seed}: {name!r} draws what {seen[draw]!r} draws"
        seen[draw] = name


def test_streams_of_different_seeds_differ() -> None:
    """No stream of one seed is a stream of another (``[2**32]`` is not ``[0, 1]``)."""
    seen: dict[int, str] = {}
    for seed in SEEDS:
        for name, rng in all_streams(seed, 2):
            draw = first_draw(rng)
            assert draw not in seen, f"seed {seed} {name!r} draws what {seen[draw]!r} draws"
            seen[draw] = f"seed {seed} {name}"


@pytest.mark.parametrize("seed", SEEDS)
def test_no_stream_is_the_plain_seeds_generator(seed: int) -> None:
    """A user's ``np.random.default_rng(seed)`` (or of a small int) is none of cairn's streams."""
    plain = {first_draw(np.random.default_rng(s)): s for s in {seed, 0, 1, 2, 3}}
    for name, rng in all_streams(seed, 2):
        assert first_draw(rng) not in plain, f"seed {seed}: {name!r} is default_rng({plain[first_draw(rng)]})"


@pytest.mark.parametrize("seed", SEEDS)
def test_derived_int_seeds_differ(seed: int) -> None:
    """The int seeds cairn derives (each policy's weights, the league's evaluation games)."""
    seeds = {f"policy {pid} init": policy_init_seed(seed, pid) for pid in POLICY_IDS}
    seeds.update({f"replay buffer {pid}": replay_buffer_seed(seed, pid) for pid in POLICY_IDS})
    seeds["league evaluation"] = League(LEAGUE_SETTINGS, seed).evaluation_seed
    assert len(set(seeds.values())) == len(seeds), seeds


def test_the_same_seed_gives_the_same_streams() -> None:
    a = [first_draw(rng) for _, rng in all_streams(5, 2)]
    b = [first_draw(rng) for _, rng in all_streams(5, 2)]
    assert a == b


def test_seedless_streams_are_fresh() -> None:
    assert derive_seed(None, Stream.POLICY_INIT, "p0") is None
    assert first_draw(seeded_rng(None, Stream.ALGORITHM)) != first_draw(seeded_rng(None, Stream.ALGORITHM))


@pytest.mark.parametrize(("a", "b"), [
    ((0, Stream.ALGORITHM), (0, Stream.ALGORITHM, 0)),  # numpy pads entropy with zeros
    ((0, Stream.ENV_RUNNER, 1), (0, Stream.ENV_RUNNER, 1, 0)),
    ((2**32, Stream.ALGORITHM), (0, Stream.ALGORITHM, 1)),  # big ints are split into words
    ((0, Stream.ENV_RUNNER, 2**32, 0), (0, Stream.ENV_RUNNER, 0, 1, 0)),
    ((0, Stream.REPLAY_BUFFER, "ab"), (0, Stream.REPLAY_BUFFER, "a", "b")),
    ((0, Stream.REPLAY_BUFFER, "a"), (0, Stream.REPLAY_BUFFER, "a\x00")),  # str bytes padded
    ((0, Stream.REPLAY_BUFFER, "a"), (0, Stream.REPLAY_BUFFER, ord("a"))),
    ((0, Stream.REPLAY_BUFFER, ""), (0, Stream.REPLAY_BUFFER)),
])
def test_keys_that_numpy_would_merge_are_different_streams(a: tuple, b: tuple) -> None:
    assert stream_entropy(*a) != stream_entropy(*b)
    assert stream_entropy(*a)[-1] != 0 and stream_entropy(*b)[-1] != 0  # no zero padding applies
    draws = [first_draw(np.random.default_rng(seed_sequence(*keys))) for keys in (a, b)]
    assert draws[0] != draws[1]


def test_every_stream_has_its_own_nonzero_tag() -> None:
    tags = [int(tag) for tag in Stream]
    assert len(set(tags)) == len(tags) and min(tags) > 0


@pytest.mark.parametrize(("seed", "stream", "keys", "match"), [
    (0, 1, (), "not a cairn.rng.Stream"),
    (0, "actions", (), "not a cairn.rng.Stream"),
    (-1, Stream.ALGORITHM, (), "seed -1"),
    (0, Stream.ENV_RUNNER, (-2, 0), "key -2"),
    (0, Stream.ENV_RUNNER, (1.5, 0), "key 1.5"),
    (None, Stream.ENV_RUNNER, (True, 0), "key True"),
])
def test_bad_stream_keys_are_refused(seed: object, stream: object, keys: tuple, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        seed_sequence(seed, stream, *keys)  # type: ignore[arg-type]
