"""Greedy games against a fixed opponent: the counts equal a hand-written PettingZoo loop over the
same games (same seeds, same actions), for a turn-based (AEC) and a parallel game; seats
alternate; illegal moves are counted, not fatal; a one-player env is refused."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from pettingzoo import ParallelEnv
from pettingzoo.classic import connect_four_v3, rps_v2
from pettingzoo.utils.env_logger import EnvLogger

import cairn
from cairn.core import PolicyLike
from cairn.env_runner.make_env import create_env
from cairn.env_runner.scripted_opponents import random_legal
from cairn.envs import connect_four_heuristic
from cairn.envs.pettingzoo_env import make_pettingzoo_env
from cairn.errors import ConfigError, EnvError
from cairn.league.games import GameResults, play_games
from cairn.rng import game_rng
from tests.league.games import leftmost_legal

SMALL_NET = {"model": {"hidden": [16]}}


@pytest.fixture(autouse=True)
def _quiet_illegal_moves():
    # TerminateIllegalWrapper prints a warning for each illegal move; the tests make some.
    EnvLogger.suppress_output()
    yield
    EnvLogger.unsuppress_output()


def make_connect_four(env_config: dict[str, Any] | None = None) -> Any:
    return connect_four_v3.env()


def connect_four_policy(seed: int) -> cairn.Policy:
    env = connect_four_v3.env()
    return cairn.Policy(env.observation_space("player_0"), env.action_space("player_0"), SMALL_NET, seed=seed)


def hand_written_connect_four(main: Any, opponent: Any, games: int, seed: int) -> dict[str, int]:
    """The games as a user would write them with PettingZoo's AEC API."""
    out = {"wins": 0, "draws": 0, "losses": 0, "illegal_moves": 0, "opponent_illegal_moves": 0}
    env = connect_four_v3.env()
    for game in range(games):
        env.reset(seed=seed + game)
        me = ["player_0", "player_1"][game % 2]
        rng = game_rng(seed, game)
        total = other = 0.0  # main's return and its opponent's
        for agent in env.agent_iter():
            obs, reward, terminated, truncated, _ = env.last()
            if agent == me:
                total += reward
            else:
                other += reward
            if terminated or truncated:
                env.step(None)
                continue
            if agent == me:
                action = main.compute_single_action(obs, explore=False)
                out["illegal_moves"] += int(obs["action_mask"][action] == 0)
            elif isinstance(opponent, cairn.Policy):
                action = opponent.compute_single_action(obs, explore=False)
                out["opponent_illegal_moves"] += int(obs["action_mask"][action] == 0)
            else:
                action = opponent(obs["observation"], obs["action_mask"], rng)
                out["opponent_illegal_moves"] += int(obs["action_mask"][action] == 0)
            env.step(action)
        out["wins" if total > other else "losses" if total < other else "draws"] += 1
    env.close()
    return out


@pytest.mark.parametrize("opponent", ["random_legal", "heuristic", "policy"])
def test_connect_four_counts_equal_a_hand_written_loop(opponent):
    main = connect_four_policy(seed=0)
    player = {"random_legal": random_legal, "heuristic": connect_four_heuristic,
              "policy": connect_four_policy(seed=1)}[opponent]
    results = play_games(make_connect_four, main, player, games=12, seed=5)
    expected = hand_written_connect_four(main, player, games=12, seed=5)
    assert results == GameResults(games=12, **expected)
    assert results.wins + results.draws + results.losses == 12
    assert results.illegal_moves == 0  # main masks its own moves
    if opponent == "random_legal":  # the count depends on the seed: another seed, other games
        other = play_games(make_connect_four, main, player, games=12, seed=6)
        assert other == GameResults(games=12, **hand_written_connect_four(main, player, games=12, seed=6))


def distinct_connect_four_games(main: Any, opponent: Any, games: int, seed: int) -> int:
    """How many different games (main's seat and every move) the hand-written loop plays."""
    env, seen = connect_four_v3.env(), set()
    for game in range(games):
        env.reset(seed=seed + game)
        me, rng, moves = ["player_0", "player_1"][game % 2], game_rng(seed, game), []
        for agent in env.agent_iter():
            obs, _, terminated, truncated, _ = env.last()
            if terminated or truncated:
                env.step(None)
                continue
            player = main if agent == me else opponent
            action = (player.compute_single_action(obs, explore=False) if isinstance(player, cairn.Policy)
                      else player(obs["observation"], obs["action_mask"], rng))
            moves.append(int(action))
            env.step(action)
        seen.add((me, tuple(moves)))
    env.close()
    return len(seen)


@pytest.mark.parametrize("opponent", ["policy", "leftmost", "random_legal", "heuristic"])
def test_the_results_count_the_distinct_games_among_those_played(opponent):
    # Before, 20 greedy games of two deterministic players on connect four were two games (one
    # per seat) played ten times each, reported as if 20 games had been sampled: nothing said
    # that the rates rested on two games. A scripted opponent drawing from its generator makes
    # the games differ.
    main = connect_four_policy(seed=0)
    player = {"policy": connect_four_policy(seed=1), "leftmost": leftmost_legal,
              "random_legal": random_legal, "heuristic": connect_four_heuristic}[opponent]
    results = play_games(make_connect_four, main, player, games=20, seed=4)
    expected = distinct_connect_four_games(main, player, games=20, seed=4)
    assert results.distinct_games == expected
    assert results.to_dict()["distinct_games"] == expected
    if opponent in ("policy", "leftmost"):
        assert expected == 2  # one game per seat, repeated
    if opponent == "random_legal":
        assert expected == 20


def test_seats_alternate_so_a_greedy_policy_against_itself_wins_as_often_as_it_loses():
    # Greedy self-play repeats one game; main is its first player in games 0 and 2 and its
    # second in 1 and 3, so every win of the first seat is one loss of main as second.
    main = connect_four_policy(seed=2)
    results = play_games(make_connect_four, main, main, games=4, seed=0)
    assert results.wins == results.losses and results.wins + results.draws == 2


class ColumnZero:
    """A PolicyLike that always plays column 0, mask or not (a policy that ignores masks)."""

    def __init__(self) -> None:
        env = connect_four_v3.env()
        self.observation_space = env.observation_space("player_0")
        self.action_space = env.action_space("player_0")

    def compute_actions(self, obs_batch, *, explore=True):
        return np.zeros(len(obs_batch), np.int64)

    def compute_single_action(self, obs, *, explore=True):
        return 0

    def get_weights(self):
        return {}

    def set_weights(self, weights):
        pass

    def get_state(self, *, copy=True):
        return {}

    def set_state(self, state):
        pass


def test_illegal_moves_are_counted_and_the_env_decides_the_game():
    main = ColumnZero()
    assert isinstance(main, PolicyLike)
    results = play_games(make_connect_four, main, lambda obs, mask, rng: 0, games=2, seed=0)
    # Both drop into column 0 until it is full (6 pieces, no four in a line); the 7th move is
    # illegal: main's in game 0 (it moved first: a loss, -1 against 0), the opponent's in game 1
    # (main gets 0 and the opponent -1: PettingZoo's TerminateIllegalWrapper rewards the other
    # player nothing): main's win, as the league's payoff scores the same game in training.
    assert results == GameResults(games=2, wins=1, draws=0, losses=1, illegal_moves=1,
                                  opponent_illegal_moves=1)
    assert results.to_dict() == {"games": 2, "wins": 1, "draws": 0, "losses": 1, "illegal_moves": 1,
                                 "opponent_illegal_moves": 1, "distinct_games": 2, "win_rate": 0.5,
                                 "draw_rate": 0.0, "loss_rate": 0.5}


class RecordedConnectFour:
    """Connect four whose resets (their seeds) and closes are recorded."""

    def __init__(self) -> None:
        self.seeds: list[int | None] = []
        self.closed = 0

    def __call__(self) -> Any:
        env = connect_four_v3.env()
        reset, close = env.reset, env.close

        def recorded_reset(seed: int | None = None, options: Any = None) -> None:
            self.seeds.append(seed)
            reset(seed=seed, options=options)

        def recorded_close() -> None:
            self.closed += 1
            close()

        env.reset, env.close = recorded_reset, recorded_close
        return env


def test_game_g_resets_with_seed_plus_g_on_one_env_closed_at_the_end():
    creator = RecordedConnectFour()
    play_games(creator, connect_four_policy(seed=0), random_legal, games=3, seed=7)
    assert creator.seeds == [7, 8, 9] and creator.closed == 1


def test_an_action_outside_the_space_is_an_error_naming_the_player_and_the_env_is_closed():
    creator = RecordedConnectFour()
    with pytest.raises(EnvError, match=r"the opponent played 9, outside the action space Discrete\(7\)"):
        play_games(creator, connect_four_policy(seed=0), lambda obs, mask, rng: 9, games=2, seed=0)
    assert creator.closed == 1
    with pytest.raises(EnvError, match=r"the opponent played 'left', outside the action space Discrete\(7\)"):
        play_games(creator, connect_four_policy(seed=0), lambda obs, mask, rng: "left", games=2, seed=0)
    assert creator.closed == 2
    with pytest.raises(EnvError, match=r"^scripted opponent 'mine:bad' played 9, outside the action space"):
        play_games(creator, connect_four_policy(seed=0), lambda obs, mask, rng: 9, games=2, seed=0,
                   opponent_name="scripted opponent 'mine:bad'")
    assert creator.closed == 3


def test_a_one_player_env_and_bad_counts_are_refused():
    policy = connect_four_policy(seed=0)
    with pytest.raises(ConfigError, match=r"two-player PettingZoo game; .* one player \(a single-agent"):
        play_games(lambda: gym.make("CartPole-v1"), policy, random_legal, games=2, seed=0)
    with pytest.raises(ConfigError, match=r"games=0.*at least 1"):
        play_games(make_connect_four, policy, random_legal, games=0, seed=0)
    with pytest.raises(ConfigError, match=r"seed=-1"):
        play_games(make_connect_four, policy, random_legal, games=1, seed=-1)


RPS = {"env_module": "pettingzoo.classic.rps_v2", "max_cycles": 5}


def hand_written_rps(main: Any, opponent: Any, games: int, seed: int) -> dict[str, int]:
    """Rock-paper-scissors through PettingZoo's parallel API; it has no masks: all moves legal."""
    out = {"wins": 0, "draws": 0, "losses": 0, "illegal_moves": 0, "opponent_illegal_moves": 0}
    env = rps_v2.parallel_env(max_cycles=5)
    for game in range(games):
        observations, _ = env.reset(seed=seed + game)
        me = env.possible_agents[game % 2]
        rng = game_rng(seed, game)
        total = other = 0.0  # main's return and its opponent's
        while env.agents:
            actions = {agent: (main.compute_single_action(observations[agent], explore=False) if agent == me
                               else opponent(observations[agent], np.ones(3, np.int8), rng))
                       for agent in env.agents}
            observations, rewards, *_ = env.step(actions)
            total += rewards[me]
            other += sum(r for agent, r in rewards.items() if agent != me)
        out["wins" if total > other else "losses" if total < other else "draws"] += 1
    return out


def test_parallel_game_counts_equal_a_hand_written_loop():
    env = rps_v2.parallel_env()
    main = cairn.Policy(env.observation_space("player_0"), env.action_space("player_0"), SMALL_NET, seed=0)
    results = play_games(lambda: create_env(make_pettingzoo_env, RPS), main, random_legal, games=10, seed=3)
    assert results == GameResults(games=10, **hand_written_rps(main, random_legal, games=10, seed=3))
    assert results.wins and results.losses  # a match is won on the sum of its rounds' rewards


class Recorder:
    """random_legal that records what it observes: in rock-paper-scissors, main's last move."""

    def __init__(self) -> None:
        self.seen: list[int] = []

    def __call__(self, observation, action_mask, rng):
        self.seen.append(int(observation))
        return random_legal(observation, action_mask, rng)


def test_a_recurrent_policy_carries_its_state_through_each_game():
    env = rps_v2.parallel_env(max_cycles=5)
    model = {"use_lstm": True, "lstm_cell_size": 8, "max_seq_len": 4, "hidden": [8]}
    main = cairn.Policy(env.observation_space("player_0"), env.action_space("player_0"), {"model": model},
                        seed=4)
    # Larger weights: the greedy move then depends on the state (with the initial state at every
    # move, main would play other moves).
    main.set_weights({name: 4 * value for name, value in main.get_weights().items()})
    played = Recorder()
    results = play_games(lambda: create_env(make_pettingzoo_env, RPS), main, played, games=6, seed=1)
    by_hand = Recorder()
    out = {"wins": 0, "draws": 0, "losses": 0, "illegal_moves": 0, "opponent_illegal_moves": 0}
    for game in range(6):  # the hand-written loop: a fresh state per game, carried move to move
        observations, _ = env.reset(seed=1 + game)
        me, rng = env.possible_agents[game % 2], game_rng(1, game)
        total = opponent_total = 0.0
        state = main.get_initial_state()
        while env.agents:
            action, state = main.compute_single_action(observations[me], explore=False, state=state)
            other = next(agent for agent in env.agents if agent != me)
            actions = {me: action, other: by_hand(observations[other], np.ones(3, np.int8), rng)}
            observations, rewards, *_ = env.step(actions)
            total += rewards[me]
            opponent_total += rewards[other]
        out["wins" if total > opponent_total else "losses" if total < opponent_total else "draws"] += 1
    assert played.seen == by_hand.seen  # main's moves, as its opponent saw them
    assert results == GameResults(games=6, **out)


def test_random_legal_plays_actions_of_a_space_that_starts_at_1():
    """Before, random_legal played mask positions (0 to n-1) as actions: in Discrete(3, start=1)
    with actions 2 and 3 legal it played 1 (forbidden: counted as the opponent's illegal move, a
    forfeit that passed for main's win) or 2, never 3, with no error."""
    from cairn.env_runner.scripted_opponents import resolve_opponent
    from tests.league.games import OneBasedMoves

    env = OneBasedMoves(moves=4)  # play_games resets its one env for each game
    main = cairn.Policy(env.observation_space("player_0"), env.action_space("player_0"), SMALL_NET, seed=0)
    results = play_games(lambda: env, main, resolve_opponent("random_legal"), games=20, seed=0)
    assert results == GameResults(games=20, wins=0, draws=20, losses=0, illegal_moves=0,
                                  opponent_illegal_moves=0)
    assert len(env.played) == 20 * 4  # every game went its four moves
    opponent_moves = [action for k, (agent, action) in enumerate(env.played)
                      if agent != ["player_0", "player_1"][k // 4 % 2]]  # main's seat alternates
    assert len(opponent_moves) == 40 and set(opponent_moves) == {2, 3}


class HigherCardWins(ParallelEnv):
    """One round, not zero-sum: each player shows a card (0-2); the higher card gets +1, the
    lower 0, equal cards 0 each."""

    metadata = {"name": "higher_card_wins_v0"}
    possible_agents = ["player_0", "player_1"]

    def __init__(self) -> None:
        self.agents: list[str] = []

    def observation_space(self, agent):
        return gym.spaces.Box(0.0, 1.0, (1,), np.float32)

    def action_space(self, agent):
        return gym.spaces.Discrete(3)

    def reset(self, seed=None, options=None):
        self.agents = list(self.possible_agents)
        return {a: np.zeros(1, np.float32) for a in self.agents}, {a: {} for a in self.agents}

    def step(self, actions):
        first, second = (int(actions[a]) for a in self.possible_agents)
        rewards = {"player_0": float(first > second), "player_1": float(second > first)}
        done = dict.fromkeys(self.agents, True)
        observations = {a: np.zeros(1, np.float32) for a in self.agents}
        infos = {a: {} for a in self.agents}
        self.agents = []
        return observations, rewards, done, dict.fromkeys(done, False), infos


def test_a_game_that_is_not_zero_sum_is_scored_against_the_opponents_return():
    # Main always shows 0, the opponent 1: main's return is 0 in every game, which the sign of
    # main's return alone would call a draw; it is a loss (the opponent got +1), as the league's
    # payoff scores it in training. Equal cards (both 0) are a draw.
    main = ColumnZero()
    results = play_games(HigherCardWins, main, lambda obs, mask, rng: 1, games=4, seed=0)
    assert results == GameResults(games=4, wins=0, draws=0, losses=4, illegal_moves=0,
                                  opponent_illegal_moves=0)
    assert play_games(HigherCardWins, main, lambda obs, mask, rng: 0, games=2, seed=0).draws == 2
