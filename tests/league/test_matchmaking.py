"""Per-episode matchmaking: every pool member is drawn in the configured proportions, each game
seats main once (or twice in self-play), and the draws come from the league's generator."""

from collections import Counter

import numpy as np
import pytest

from cairn.config.league_settings import league_settings
from cairn.league import League, opponent_weights, pfsp_weight
from cairn.rng import rng_state

AGENTS = ["player_0", "player_1"]
POOL = ["main_v1", "main_v2", "main_v3"]
#: Main's scores against the pool: PFSP weights (1-p)^2 = 1, 0.25 and 0.
SCORES = {"main_v1": [0.0] * 10, "main_v2": [1.0, 0.0] * 5, "main_v3": [1.0] * 10}


class _Env:
    possible_agents = AGENTS


def _league(**kwargs) -> League:
    league = League(league_settings(**kwargs), seed=0)
    league.set_agents(_Env())
    league.pool = list(POOL)
    for opponent, scores in SCORES.items():
        for score in scores:
            league.payoff.record(opponent, score, is_snapshot=True)
    return league


def _play(league: League, games: int, num_envs: int = 3) -> list[dict[str, str]]:
    """Map both seats of ``games`` games, as env runners do: the first agent of an episode with
    nothing mapped, the second with the first's mapping; envs interleaved."""
    out: list[dict[str, str]] = []
    for start in range(0, games, num_envs):
        envs = range(min(num_envs, games - start))
        mapped: list[dict[str, str]] = [{} for _ in envs]
        for agent in AGENTS:  # every env's first mover first, then every env's second mover
            for i in envs:
                episode = {"env_index": i, "mapped": dict(mapped[i])}
                mapped[i][agent] = league.mapping(agent, episode=episode, worker=0)
        out.extend(mapped)
    return out


def test_pfsp_weights_are_alphastar_hard():
    assert pfsp_weight(0.0) == 1.0 and pfsp_weight(0.5) == 0.25 and pfsp_weight(1.0) == 0.0
    rates = {"a": 0.0, "b": 0.5}
    assert list(opponent_weights("pfsp", ["a", "b", "new"], rates)) == [1.0, 0.25, 1.0]
    assert list(opponent_weights("uniform", ["a", "b"], rates)) == [1.0, 1.0]
    assert list(opponent_weights("latest", ["a", "b"], rates)) == [0.0, 1.0]


@pytest.mark.parametrize("matchmaking", ["pfsp", "uniform", "latest"])
def test_draws_reach_each_opponent_in_proportion(matchmaking):
    games = 6000
    self_play = 0.2
    league = _league(matchmaking=matchmaking, self_play_fraction=self_play)
    played = _play(league, games)
    weights = opponent_weights(matchmaking, POOL, league.win_rates())
    expected = {"self": self_play}
    expected.update({pid: (1 - self_play) * w / weights.sum() for pid, w in zip(POOL, weights)})
    counts: Counter[str] = Counter()
    main_seats: Counter[str] = Counter()
    for game in played:
        opponents = [pid for pid in game.values() if pid != "main"]
        assert len(opponents) <= 1 and "main" in game.values()  # one main seat, or self-play
        counts[opponents[0] if opponents else "self"] += 1
        if opponents:
            main_seats[next(a for a, p in game.items() if p == "main")] += 1
    for key, p in expected.items():
        sd = np.sqrt(games * p * (1 - p))
        assert abs(counts[key] - games * p) <= 4 * sd + 1e-9, (key, counts, expected)
    if matchmaking == "pfsp":
        assert counts["main_v3"] == 0  # main always beats it: never drawn
    n = sum(main_seats.values())  # main's seat: either, with probability 1/2
    assert abs(main_seats["player_0"] - n / 2) <= 4 * np.sqrt(n / 4)


@pytest.mark.parametrize("order", [["p0", "p1", "p2"], ["p2", "p0", "p1"]])
def test_in_a_game_of_three_seats_the_opponent_takes_each_seat_alike_whatever_the_mapping_order(order):
    """Main holds every seat but the opponent's: the opponent's seat is drawn uniformly and does
    not depend on the order in which the runner maps the agents (the same draws seat the same
    game in either order)."""

    class ThreeSeats:
        possible_agents = ["p0", "p1", "p2"]

    def seat_games(agent_order: list[str], games: int = 3000) -> list[str]:
        league = League(league_settings(matchmaking="uniform", self_play_fraction=0.0), seed=0)
        league.set_agents(ThreeSeats())
        league.pool = ["main_v1"]
        seats = []
        for _ in range(games):
            mapped: dict[str, str] = {}
            for agent in agent_order:
                episode = {"env_index": 0, "mapped": dict(mapped)}
                mapped[agent] = league.mapping(agent, episode=episode, worker=0)
            opponents = [a for a, pid in mapped.items() if pid != "main"]
            assert len(opponents) == 1 and mapped[opponents[0]] == "main_v1"
            seats.append(opponents[0])
        return seats

    seats = seat_games(order)
    assert seats == seat_games(list(ThreeSeats.possible_agents))  # the order changes nothing
    counts = Counter(seats)
    n = len(seats)
    for agent in ThreeSeats.possible_agents:  # each seat with probability 1/3
        assert abs(counts[agent] - n / 3) <= 4 * np.sqrt(n * (1 / 3) * (2 / 3)), counts


def test_draws_come_from_the_league_generator_and_repeat_from_its_state():
    league = _league(matchmaking="uniform")
    _play(league, 10)
    saved = league.get_state()
    first = _play(league, 30)
    other = _league(matchmaking="uniform")
    other.set_state(saved, ["main", *POOL])
    assert rng_state(other.rng) == saved["rng"]
    assert _play(other, 30) == first
    assert _play(_league(matchmaking="uniform", self_play_fraction=0.0), 30) != first


def test_probe_calls_draw_nothing():
    league = _league()
    before = rng_state(league.rng)
    assert {league.mapping(a) for a in AGENTS} == {"main"}  # build()/add_policy probes
    assert rng_state(league.rng) == before


def test_a_game_in_flight_against_a_dropped_snapshot_becomes_self_play():
    league = _league(matchmaking="latest", self_play_fraction=0.0)
    for env_index in range(100):  # a game whose first mover is main
        first = league.mapping("player_0", episode={"env_index": env_index, "mapped": {}}, worker=0)
        if first == "main":
            break
    assert first == "main" and league.plans[f"0:{env_index}"]["opponent"] == "main_v3"
    league.forget("main_v3")
    episode = {"env_index": env_index, "mapped": {"player_0": first}}
    assert league.mapping("player_1", episode=episode, worker=0) == "main"


def test_a_game_saved_after_its_first_seat_resumes_with_its_draw():
    """A checkpoint between an episode's first and second mapping: the restored league seats
    the second agent from the saved draw (the plan is state), as the original does."""
    league = _league(matchmaking="uniform", self_play_fraction=0.0)
    for env_index in range(100):  # a game whose first mover is main: the second is the opponent
        first = league.mapping("player_0", episode={"env_index": env_index, "mapped": {}}, worker=0)
        if first == "main":
            break
    saved = league.get_state()
    episode = {"env_index": env_index, "mapped": {"player_0": first}}
    expected = league.mapping("player_1", episode=episode, worker=0)
    restored = _league(matchmaking="uniform", self_play_fraction=0.0)
    _play(restored, 7)  # a fresh build's own draws (its env runner's first resets) are replaced
    restored.set_state(saved, ["main", *POOL])
    assert expected != "main"
    assert restored.mapping("player_1", episode=episode, worker=0) == expected
    assert restored.get_state() == league.get_state()


@pytest.mark.parametrize("damage", [
    lambda s: s.pop("plans"),
    lambda s: s.update(rng={"bit_generator": "Evil"}),
    lambda s: s["ratings"].update(main=["x"]),
    lambda s: s["payoff"]["table"].update(main_v1=[1, 2]) or s.update(games=None),
])
def test_a_malformed_league_state_is_refused_and_changes_nothing(damage):
    from cairn.errors import CheckpointFormatError

    league = _league()
    _play(league, 5)
    before = league.get_state()
    state = league.get_state()
    _play(league, 3)
    damage(state)
    after = league.get_state()
    with pytest.raises(CheckpointFormatError, match="league state is malformed"):
        league.set_state(state, ["main", *POOL])
    assert league.get_state() == after != before


def test_copies_sent_to_remote_runners_draw_from_their_own_generators():
    import pickle

    league = _league(matchmaking="uniform")
    before = rng_state(league.rng)

    def games(worker: int, n: int = 20) -> list[dict[str, str]]:
        remote = pickle.loads(pickle.dumps(league.mapping))  # as Ray ships the config
        out = []
        for _ in range(n):
            mapped: dict[str, str] = {}
            for agent in AGENTS:
                mapped[agent] = remote(agent, episode={"env_index": 0, "mapped": dict(mapped)}, worker=worker)
            out.append(mapped)
        return out

    assert games(1) == games(1) != games(2)  # seeded per worker, independent across workers
    assert rng_state(league.rng) == before  # the driver's generator is the local runner's alone


def test_remote_copies_draw_each_sample_from_where_their_runner_stands():
    # A remote runner calls continue_from(worker, env steps sampled) before each sample. Before,
    # a copy drew from one stream per (worker, snapshots taken), so a runner recreated after a
    # fault (a new copy) drew its predecessor's games again; now a copy at the same position
    # draws the same games, one at a later position others, and the driver's copy is untouched.
    import pickle

    league = _league(matchmaking="uniform")
    before = rng_state(league.rng)

    def games(position: int, worker: int = 1, n: int = 20) -> list[dict[str, str]]:
        remote = pickle.loads(pickle.dumps(league.mapping))  # as Ray ships the config
        remote.continue_from(worker, position)
        out = []
        for _ in range(n):
            mapped: dict[str, str] = {}
            for agent in AGENTS:
                mapped[agent] = remote(agent, episode={"env_index": 0, "mapped": dict(mapped)}, worker=worker)
            out.append(mapped)
        return out

    assert games(128) == games(128) != games(0)
    assert games(128, worker=2) != games(128)
    league.mapping.continue_from(1, 128)  # the local runner's draws stay the league generator's
    assert rng_state(league.rng) == before


def _summed_again(league: League) -> dict[str, float]:
    """Main's win rates from the payoff's windows, summed afresh: the slow path."""
    rates = {o: sum(s) / len(s) for o, s in league.payoff.recent.items() if s}
    return {pid: rates[pid] for pid in league.opponents() if pid in rates}


def _drawn(league: League, games: int = 300) -> set[str]:
    return {pid for game in _play(league, games) for pid in game.values()} - {"main"}


def test_pfsp_draw_weights_follow_the_payoff_as_it_changes():
    """The win rates PFSP reads at each draw come from sums kept as games come and leave each
    window: equal, bit for bit, to the windows summed afresh after every game (windows that
    fill and roll over, opponents forgotten, a restored state), and the draws follow them."""
    league = _league(matchmaking="pfsp", self_play_fraction=0.0, win_rate_window=7)
    rng = np.random.default_rng(0)
    for _ in range(2000):
        league.payoff.record(POOL[int(rng.integers(3))], float(rng.choice([0.0, 0.5, 1.0])),
                             is_snapshot=True)
        assert league.win_rates() == _summed_again(league)
    for _ in range(7):  # main beats main_v1 over a whole window: its weight drops to 0
        league.payoff.record("main_v1", 1.0, is_snapshot=True)
    assert league.win_rates()["main_v1"] == 1.0 and "main_v1" not in _drawn(league)
    for score in [0.0] * 6 + [0.5]:  # and then loses it: drawn again
        league.payoff.record("main_v1", score, is_snapshot=True)
    assert league.win_rates()["main_v1"] == 0.5 / 7 == _summed_again(league)["main_v1"]
    assert "main_v1" in _drawn(league)
    league.forget("main_v2")
    league.payoff.record("main_v2", 0.0, is_snapshot=False)  # a game finished after its removal
    assert league.payoff.win_rates()["main_v2"] == 0.0 and league.win_rates() == _summed_again(league)
    restored = _league(matchmaking="pfsp", self_play_fraction=0.0, win_rate_window=7)
    restored.set_state(league.get_state(), ["main", *POOL])
    assert restored.win_rates() == _summed_again(restored) == league.win_rates()
    with pytest.raises(ValueError, match="one of"):  # only game scores: the sums stay exact
        league.payoff.record("main_v1", 0.3, is_snapshot=True)
