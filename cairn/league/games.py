"""Greedy games of a trained policy against a fixed opponent, counted as wins, draws and losses.

:func:`play_games` plays whole games of a two-player PettingZoo game as cairn creates it
(:func:`cairn.env_runner.make_env.make_env`): a turn-based ``AECEnv`` (connect four, tic-tac-toe,
chess) is stepped agent by agent, a ``ParallelEnv`` (rock-paper-scissors, or an AEC env cairn
converted) with both actions at once. The rules, which a hand-written PettingZoo loop in
``tests/league/test_games.py`` repeats:

* game ``g`` (0-based) resets the env with ``seed=seed + g``; ``main`` plays the first seat
  (``possible_agents[0]``) in the even games and the second in the odd ones;
* ``main`` acts greedily (``explore=False``) on the raw observation, so its own action masking
  applies; a policy opponent acts the same way; a scripted opponent gets the observation (a
  dict's ``"observation"`` entry), the action mask (the observation's ``"action_mask"``, else
  the info's, else all ones for a Discrete action space) and its own generator for the game,
  ``cairn.rng.game_rng(seed, g)``;
* a move the mask forbids is counted (``illegal_moves`` for main, ``opponent_illegal_moves``)
  and played: the env's own rules decide what follows (PettingZoo's classic games end the game
  with -1 for the player who made it, 0 for the other);
* the game is won, drawn or lost by comparing main's return (the sum of its rewards over the
  game: in board games, its final reward) with its opponent's (:func:`cairn.league.payoff.
  game_score`, the rule the league's payoff and ratings use while training): a forfeit by an
  illegal move (-1 for the offender, 0 for the other) is the other player's win, and a game that
  is not zero-sum (winner +1, loser 0) is scored as it was played;
* ``distinct_games`` counts the different games among them: two games are the same when main
  held the same seat and every move met the same observation and was the same action. Greedy
  players on a deterministic game (connect four) play one game per seat over and over unless a
  scripted opponent draws from its generator, and the rates then rest on that many games.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np

from cairn.core import PolicyLike, ScriptedOpponent
from cairn.env_runner.make_env import close_env, is_multi_agent_env, is_turn_based_env
from cairn.env_runner.scripted_opponents import check_discrete_action, scripted_move, split_observation
from cairn.errors import ConfigError
from cairn.league.payoff import game_score
from cairn.rng import game_rng

__all__ = ["GameResults", "play_games", "two_player_agents"]


@dataclass(frozen=True)
class GameResults:
    """What :func:`play_games` counted, from main's side.

    >>> GameResults(games=4, wins=3, draws=0, losses=1, illegal_moves=0).win_rate
    0.75
    """

    games: int
    wins: int
    draws: int
    losses: int
    #: Moves main played that its action mask forbade.
    illegal_moves: int
    #: Moves the opponent played that its action mask forbade.
    opponent_illegal_moves: int = 0
    #: How many different games were among them (main's seat, every observation and move): as
    #: few as 2 when both players are deterministic, whatever ``games``. None when not counted.
    #: Left out of ``==``, which compares what was won and lost.
    distinct_games: int | None = field(default=None, compare=False)

    @property
    def win_rate(self) -> float:
        """Wins per game."""
        return self.wins / self.games if self.games else 0.0

    @property
    def draw_rate(self) -> float:
        """Draws per game."""
        return self.draws / self.games if self.games else 0.0

    @property
    def loss_rate(self) -> float:
        """Losses per game."""
        return self.losses / self.games if self.games else 0.0

    def to_dict(self) -> dict[str, float]:
        """The counts and the three rates, as JSON numbers (results, logs, ``--json``)."""
        return {**asdict(self), "win_rate": self.win_rate, "draw_rate": self.draw_rate,
                "loss_rate": self.loss_rate}


def two_player_agents(env: Any) -> list[Any]:
    """``env.possible_agents`` of a two-player PettingZoo game (first seat first); else
    :class:`~cairn.errors.ConfigError` naming the env and its players."""
    agents = list(env.possible_agents) if is_multi_agent_env(env) else []
    if len(agents) != 2:
        spec = getattr(env, "spec", None)
        name = (getattr(spec, "id", None) or (getattr(env, "metadata", None) or {}).get("name")
                or type(env).__name__)
        found = f"{len(agents)} players {agents}" if agents else "one player (a single-agent env)"
        raise ConfigError(f"Games against an opponent need a two-player PettingZoo game; {name} has {found}. "
                          "Fix: evaluate it without an opponent (its episodes' returns).")
    return agents


class _Player:
    """One side of one game: a greedy cairn policy (with its recurrent state, if any) or a
    scripted opponent with the game's generator."""

    def __init__(self, actor: Any, action_space: Any, rng: np.random.Generator, who: str,
                 trace: Any) -> None:
        self.actor, self.action_space, self.rng, self.who = actor, action_space, rng, who
        #: The game's digest (hashlib), fed every observation and move, to tell games apart.
        self.trace = trace
        self.is_policy = isinstance(actor, PolicyLike)
        recurrent = self.is_policy and getattr(actor, "recurrent", None) is not None
        self.state = actor.get_initial_state() if recurrent else None
        self.illegal_moves = 0

    def act(self, observation: Any, info: Any) -> Any:
        """This player's move; counts it when its mask forbids it."""
        obs, mask = split_observation(observation, info, self.action_space)
        if not self.is_policy:
            action = scripted_move(self.actor, obs, mask, self.rng, self.action_space)
        elif self.state is None:
            action = self.actor.compute_single_action(observation, explore=False)
        else:
            action, self.state = self.actor.compute_single_action(observation, explore=False,
                                                                  state=self.state)
        if isinstance(self.action_space, gym.spaces.Discrete):
            index = check_discrete_action(action, self.action_space, self.who)
            if mask is not None and not mask[index]:
                self.illegal_moves += 1
        _feed(self.trace, self.who, observation, action)
        return action


def _feed(trace: Any, *parts: Any) -> None:
    """Add ``parts`` (names, observations, actions: arrays, dicts of them, numbers) to a game's
    digest: arrays by dtype, shape and bytes, anything else (object arrays too, whose bytes are
    pointers) by its repr."""
    for part in parts:
        if isinstance(part, Mapping):
            for key in sorted(part, key=repr):
                _feed(trace, repr(key), part[key])
            continue
        array = np.asarray(part) if isinstance(part, (np.ndarray, np.generic)) else None
        if array is not None and array.dtype != object:
            trace.update(f"{array.dtype.str}{array.shape}".encode())
            trace.update(np.ascontiguousarray(array).tobytes())
        else:
            trace.update(repr(part).encode())
        trace.update(b"|")


def play_games(env_creator: Callable[[], Any], main: PolicyLike, opponent: ScriptedOpponent | PolicyLike, *,
               games: int, seed: int, opponent_name: str = "the opponent") -> GameResults:
    """Play ``games`` greedy games of ``main`` against ``opponent`` (a scripted opponent, e.g.
    :func:`cairn.env_runner.scripted_opponents.resolve_opponent`'s, or another policy) on envs from
    ``env_creator()`` (one env, reset per game); the rules are this module's docstring.

    ``opponent_name`` names the opponent in errors (a move outside the action space is an
    :class:`~cairn.errors.EnvError` naming the player that played it): e.g. the spec it was
    resolved from, ``"scripted opponent 'my_project.opponents:leftmost'"``.

    Raises :class:`~cairn.errors.ConfigError` for ``games < 1`` or an env that is not a
    two-player PettingZoo game.

    >>> from cairn.env_runner.make_env import create_env  # doctest: +SKIP
    >>> results = play_games(lambda: create_env(make_connect_four, {}), algo.get_policy("main"),
    ...                      resolve_opponent("random_legal"), games=100, seed=0)  # doctest: +SKIP
    >>> results.win_rate  # doctest: +SKIP
    0.97
    """
    if not isinstance(games, int) or isinstance(games, bool) or games < 1:
        raise ConfigError(f"play_games(games={games!r}): expected an int of at least 1.")
    if not isinstance(seed, int) or isinstance(seed, bool) or seed < 0:
        raise ConfigError(f"play_games(seed={seed!r}): expected an int of at least 0.")
    env = env_creator()
    try:
        agents = two_player_agents(env)
        play = _play_turn_based if is_turn_based_env(env) else _play_parallel
        counts = {"wins": 0, "draws": 0, "losses": 0, "illegal_moves": 0, "opponent_illegal_moves": 0}
        seen: set[bytes] = set()
        for game in range(games):
            seat = agents[game % 2]
            rng = game_rng(seed, game)
            trace = hashlib.blake2b(repr(seat).encode(), digest_size=16)
            players = {agent: _Player(main if agent == seat else opponent, env.action_space(agent), rng,
                                      "main" if agent == seat else opponent_name, trace)
                       for agent in agents}
            returns = play(env, players, seed + game)
            other = next(agent for agent in agents if agent != seat)
            score = game_score(returns[seat], returns[other])
            counts["wins" if score == 1.0 else "losses" if score == 0.0 else "draws"] += 1
            counts["illegal_moves"] += players[seat].illegal_moves
            counts["opponent_illegal_moves"] += sum(p.illegal_moves for a, p in players.items() if a != seat)
            _feed(trace, returns[seat], returns[other])
            seen.add(trace.digest())
        return GameResults(games=games, **counts, distinct_games=len(seen))
    finally:
        close_env(env)


def _play_turn_based(env: Any, players: Mapping[Any, _Player], seed: int) -> dict[Any, float]:
    """One game of an AEC env: every selection's reward is added to its agent's return; a dead
    agent steps with None, as PettingZoo's protocol asks."""
    env.reset(seed=seed)
    returns = dict.fromkeys(players, 0.0)
    for agent in env.agent_iter():
        observation, reward, terminated, truncated, info = env.last()
        returns[agent] += float(reward)
        env.step(None if terminated or truncated else players[agent].act(observation, info))
    return returns


def _play_parallel(env: Any, players: Mapping[Any, _Player], seed: int) -> dict[Any, float]:
    """One game of a parallel env: the agents still in the game act at once until none is."""
    observations, infos = env.reset(seed=seed)
    returns = dict.fromkeys(players, 0.0)
    while env.agents:
        actions = {agent: players[agent].act(observations[agent], infos.get(agent, {}))
                   for agent in env.agents}
        observations, rewards, _, _, infos = env.step(actions)
        for agent, reward in rewards.items():
            returns[agent] += float(reward)
    return returns
