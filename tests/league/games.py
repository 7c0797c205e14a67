"""Small league configs for the tests: connect four (pettingzoo.classic) with tiny networks."""

from __future__ import annotations

from typing import Any

from pettingzoo import AECEnv

import cairn


def make_connect_four(env_config: dict) -> Any:
    from pettingzoo.classic import connect_four_v3

    return connect_four_v3.env()


def small_league(**league: Any) -> cairn.AlgorithmConfig:
    """PPO on connect four, 128 env steps per iteration in 2 env copies, with ``league``."""
    settings = {"snapshot_every_iterations": 1, "max_snapshots": 2, "self_play_fraction": 0.25, **league}
    return (cairn.PPOConfig().environment(make_connect_four)
            .env_runners(num_envs_per_env_runner=2, observation_filter="NoFilter")
            .training(model={"hidden": [8]}, train_batch_size=128, minibatch_size=64, num_epochs=1)
            .league(**settings)
            .debugging(seed=0))


def plays_outside_the_space(observation: Any, action_mask: Any, rng: Any) -> int:
    """A broken scripted opponent (``"tests.league.games:plays_outside_the_space"``): it plays
    99, an action no game of these tests has."""
    return 99


def leftmost_legal(observation: Any, action_mask: Any, rng: Any) -> int:
    """A deterministic scripted opponent (``"tests.league.games:leftmost_legal"``): the lowest
    legal action; it never draws from its generator."""
    import numpy as np

    return int(np.flatnonzero(action_mask)[0])


class CountingRandomLegal:
    """A scripted opponent (``"tests.league.games:CountingRandomLegal"``) that plays random legal
    moves and counts them in :attr:`moves` (class-wide: the env runner builds its own instance)."""

    moves = 0

    def __call__(self, observation: Any, action_mask: Any, rng: Any) -> int:
        from cairn.env_runner.scripted_opponents import random_legal

        CountingRandomLegal.moves += 1
        return random_legal(observation, action_mask, rng)


class RoundsOfRockPaperScissors:
    """A simultaneous (PettingZoo parallel) two-player zero-sum game: ``rounds`` rounds of
    rock-paper-scissors as ``pettingzoo.classic.rps_v2`` plays them (each player observes the
    other's last move, 3 before the first; +1 for a round won, -1 for one lost), with cairn's
    environment state protocol (``get_state``/``set_state``), so that a league on it resumes
    exactly."""

    metadata = {"name": "rounds_of_rock_paper_scissors_v0", "render_modes": []}
    possible_agents = ["player_0", "player_1"]

    def __init__(self, rounds: int = 5) -> None:
        import gymnasium as gym

        self.rounds = rounds
        self.agents: list[str] = []
        self.round = 0
        self.last = {"player_0": 3, "player_1": 3}
        self._observation_space, self._action_space = gym.spaces.Discrete(4), gym.spaces.Discrete(3)

    def observation_space(self, agent: str) -> Any:
        return self._observation_space

    def action_space(self, agent: str) -> Any:
        return self._action_space

    def _observations(self) -> dict[str, int]:
        return {"player_0": self.last["player_1"], "player_1": self.last["player_0"]}

    def reset(self, seed: int | None = None, options: Any = None) -> tuple[dict[str, int], dict[str, Any]]:
        self.agents, self.round = list(self.possible_agents), 0
        self.last = {"player_0": 3, "player_1": 3}
        return self._observations(), {a: {} for a in self.agents}

    def step(self, actions: dict[str, Any]) -> tuple[dict[str, Any], ...]:
        first, second = int(actions["player_0"]), int(actions["player_1"])
        won = 0 if first == second else (1 if (first - second) % 3 == 1 else -1)  # paper beats rock...
        self.last = {"player_0": first, "player_1": second}
        self.round += 1
        over = self.round >= self.rounds
        agents, self.agents = self.agents, [] if over else self.agents
        return (self._observations(), {"player_0": float(won), "player_1": float(-won)},
                dict.fromkeys(agents, False), dict.fromkeys(agents, over), {a: {} for a in agents})

    def close(self) -> None:
        pass

    def get_state(self) -> dict[str, Any]:
        return {"agents": list(self.agents), "round": self.round, "last": dict(self.last)}

    def set_state(self, state: dict[str, Any]) -> None:
        self.agents, self.round = list(state["agents"]), int(state["round"])
        self.last = {str(a): int(m) for a, m in state["last"].items()}


def make_rounds_of_rock_paper_scissors(env_config: dict) -> Any:
    """Env creator of :class:`RoundsOfRockPaperScissors` (``env_config``: its ``rounds``)."""
    return RoundsOfRockPaperScissors(**env_config)


def small_parallel_league(**league: Any) -> cairn.AlgorithmConfig:
    """:func:`small_league` on :class:`RoundsOfRockPaperScissors` (five rounds), a parallel game."""
    return small_league(**league).environment(make_rounds_of_rock_paper_scissors, env_config={"rounds": 5})


def out_of_space(observation: Any, action_mask: Any, rng: Any) -> int:
    """A broken scripted opponent (``"tests.league.games:out_of_space"``): column 9 of seven."""
    return 9


def not_an_action(observation: Any, action_mask: Any, rng: Any) -> str:
    """A broken scripted opponent (``"tests.league.games:not_an_action"``): a name, not an index."""
    return "left"


def first_forbidden(observation: Any, action_mask: Any, rng: Any) -> int:
    """A broken scripted opponent (``"tests.league.games:first_forbidden"``): the first action its
    mask forbids (in tic-tac-toe, a taken square from its second move on), else the first."""
    import numpy as np

    forbidden = np.flatnonzero(np.asarray(action_mask) == 0)
    return int(forbidden[0]) if forbidden.size else 0



class OneBasedMoves(AECEnv):
    """A turn-based (PettingZoo AEC) two-player game whose actions start at 1: ``Discrete(3,
    start=1)``, the observation dict's ``"action_mask"`` allows 2 and 3 (mask entries 1 and 2),
    never 1. Players alternate for ``moves`` moves: a draw (0 each). A move the mask forbids
    ends the game as the mover's forfeit (-1; +1 for the other), as PettingZoo's
    TerminateIllegalWrapper does. Every move played is kept in :attr:`played`."""

    metadata = {"name": "one_based_moves_v0", "render_modes": []}

    def __init__(self, moves: int = 4) -> None:
        import gymnasium as gym
        import numpy as np

        super().__init__()
        self.possible_agents = ["player_0", "player_1"]
        self.render_mode = None
        self.moves = moves
        self.mask = np.array([0, 1, 1], np.int8)
        self._action_space = gym.spaces.Discrete(3, start=1)
        self._observation_space = gym.spaces.Dict({
            "observation": gym.spaces.Box(0.0, float(moves), (1,), np.float32),
            "action_mask": gym.spaces.MultiBinary(3)})
        self.played: list[tuple[str, int]] = []

    def observation_space(self, agent: str) -> Any:
        return self._observation_space

    def action_space(self, agent: str) -> Any:
        return self._action_space

    def observe(self, agent: str) -> dict[str, Any]:
        import numpy as np

        return {"observation": np.array([self._count], np.float32), "action_mask": self.mask.copy()}

    def reset(self, seed: int | None = None, options: Any = None) -> None:
        self.agents = list(self.possible_agents)
        self._count = 0
        self.agent_selection = "player_0"
        self.rewards = dict.fromkeys(self.agents, 0.0)
        self._cumulative_rewards = dict.fromkeys(self.agents, 0.0)
        self.terminations = dict.fromkeys(self.agents, False)
        self.truncations = dict.fromkeys(self.agents, False)
        self.infos = {a: {} for a in self.agents}

    def step(self, action: Any) -> None:
        if self.terminations[self.agent_selection]:
            self._was_dead_step(action)
            return
        mover = self.agent_selection
        other = self.possible_agents[1 - self.possible_agents.index(mover)]
        self._cumulative_rewards[mover] = 0.0  # PettingZoo's usual bookkeeping
        self.played.append((mover, int(action)))
        self._count += 1
        legal = self._action_space.contains(action) and bool(self.mask[int(action) - 1])
        self.rewards = {mover: 0.0 if legal else -1.0, other: 0.0 if legal else 1.0}
        if not legal or self._count == self.moves:
            self.terminations = dict.fromkeys(self.agents, True)
        self.agent_selection = other
        self._accumulate_rewards()


def make_one_based_moves(env_config: dict) -> Any:
    """Env creator of :class:`OneBasedMoves` (``env_config``: its ``moves``)."""
    return OneBasedMoves(**env_config)
