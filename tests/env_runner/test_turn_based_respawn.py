"""Turn-based (AEC) games where a player's part ends (it is terminated, stepped with None as
PettingZoo asks, and leaves ``env.agents``) and it is added back later in the same game: its
first move back starts a new trajectory (``firsts``), after its last move before was completed
with ``terminated``; a runner restored while the player is away decides alike."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
from pettingzoo import AECEnv
from pettingzoo.utils import OrderEnforcingWrapper

import cairn

P0, P1 = "player_0", "player_1"


class RespawnGame(AECEnv):
    """Seven moves: player_0 moves 1, 3, 4, 6 and player_1 moves 2, 5, 7. After move 2,
    player_1 is terminated (its dead step removes it from ``env.agents``); after move 4 it is
    added back, to move. After move k (1-based) player_0 receives k and player_1 (while in the
    game) 10 k; the observation is [moves so far, player index]."""

    metadata = {"name": "respawn_game_v0", "render_modes": []}

    #: Remove player_1 from ``env.agents`` after move 2 without terminating it (no dead step).
    vanish = False

    def __init__(self) -> None:
        super().__init__()
        self.possible_agents = [P0, P1]
        self.render_mode = None

    def observation_space(self, agent):
        return gym.spaces.Box(0.0, 10.0, (2,), np.float32)

    def action_space(self, agent):
        return gym.spaces.Discrete(2)

    def observe(self, agent):
        return np.array([self._moves, self.possible_agents.index(agent)], np.float32)

    def _join(self, agent: str) -> None:
        self.agents.append(agent)
        self.rewards[agent] = self._cumulative_rewards[agent] = 0.0
        self.terminations[agent] = self.truncations[agent] = False
        self.infos[agent] = {}

    def reset(self, seed=None, options=None):
        self.agents, self._moves = [], 0
        self.rewards, self._cumulative_rewards, self.infos = {}, {}, {}
        self.terminations, self.truncations = {}, {}
        for agent in self.possible_agents:
            self._join(agent)
        self.agent_selection = P0
        self._skip_agent_selection = None

    def step(self, action):
        if self.terminations[self.agent_selection]:
            self._was_dead_step(action)
            return
        self._cumulative_rewards[self.agent_selection] = 0.0
        self._moves += 1
        self.rewards = {a: (1.0 if a == P0 else 10.0) * self._moves for a in self.agents}
        if self._moves == 2 and self.vanish:  # player_1 leaves at once, unselected
            self._accumulate_rewards()
            for table in (self.rewards, self._cumulative_rewards, self.terminations, self.truncations,
                          self.infos):
                del table[P1]
            self.agents.remove(P1)
            self.agent_selection = P0
            return
        if self._moves == 2:  # player_1's part ends; after its dead step player_0 moves on
            self.terminations[P1] = True
            self._skip_agent_selection = P0
            self.agent_selection = P1
        elif self._moves == 4:  # player_1 comes back, to move
            self._join(P1)
            self.agent_selection = P1
        elif self._moves == 7:
            self.terminations = dict.fromkeys(self.agents, True)
            self.agent_selection = P0
        else:
            self.agent_selection = P1 if self.agent_selection == P0 and P1 in self.agents else P0
        self._accumulate_rewards()

    # The environment state protocol, for exact resume.
    def get_state(self):
        return {"moves": self._moves, "agents": list(self.agents), "agent_selection": self.agent_selection,
                "skip": self._skip_agent_selection,
                **{k: dict(getattr(self, k)) for k in ("rewards", "_cumulative_rewards", "terminations",
                                                        "truncations")}}

    def set_state(self, state):
        self._moves, self.agents = state["moves"], list(state["agents"])
        self.agent_selection, self._skip_agent_selection = state["agent_selection"], state["skip"]
        for key in ("rewards", "_cumulative_rewards", "terminations", "truncations"):
            setattr(self, key, dict(state[key]))
        self.infos = {a: {} for a in self.agents}


def make_respawn_game(env_config: dict) -> AECEnv:
    return OrderEnforcingWrapper(RespawnGame())


def _config(make=make_respawn_game) -> cairn.AlgorithmConfig:
    return (cairn.PPOConfig().environment(make)
            .training(train_batch_size=128, minibatch_size=64)
            .env_runners(num_envs_per_env_runner=1)
            .multi_agent(policies={"a", "b"}, policy_mapping_fn={P0: "a", P1: "b"})
            .debugging(seed=0))


def make_vanishing_game(env_config: dict) -> AECEnv:
    game = RespawnGame()
    game.vanish = True
    return OrderEnforcingWrapper(game)


def _concat(parts: list[dict], pid: str, key: str) -> np.ndarray:
    return np.concatenate([np.asarray(p[pid][key]) for p in parts if pid in p])


def _check_one_game(parts: list[dict], *, vanish: bool = False) -> None:
    # player_1: move 2 ends its first part (terminated, 20; or, when it vanishes unselected,
    # truncated with reward 0 and its own observation as next); move 5 is the first of its
    # second part (50 + 60 until its next move), move 7 ends it (70).
    np.testing.assert_array_equal(_concat(parts, "b", "obs")[:, 0], [1, 4, 6])
    np.testing.assert_array_equal(_concat(parts, "b", "rewards"), [0.0 if vanish else 20.0, 110.0, 70.0])
    np.testing.assert_array_equal(_concat(parts, "b", "terminateds"), [not vanish, False, True])
    np.testing.assert_array_equal(_concat(parts, "b", "truncateds"), [vanish, False, False])
    np.testing.assert_array_equal(_concat(parts, "b", "firsts"), [True, True, False])
    np.testing.assert_array_equal(_concat(parts, "b", "next_obs")[:, 0], [1 if vanish else 2, 6, 7])
    # player_0 plays on through player_1's absence: one trajectory.
    np.testing.assert_array_equal(_concat(parts, "a", "obs")[:, 0], [0, 2, 3, 5])
    np.testing.assert_array_equal(_concat(parts, "a", "rewards"), [3.0, 3.0, 9.0, 13.0])
    np.testing.assert_array_equal(_concat(parts, "a", "terminateds"), [False, False, False, True])
    np.testing.assert_array_equal(_concat(parts, "a", "firsts"), [True, False, False, False])


def test_a_player_added_back_after_its_part_ended_starts_a_new_trajectory():
    algo = _config().build()
    try:
        runner = algo.env_runner_group.local
        _check_one_game([runner.sample(7)])  # exactly one game of seven moves
        _check_one_game([runner.sample(7)])  # and the next one alike
        [episode, _] = runner.get_metrics()
        assert episode["length"] == 7
    finally:
        algo.stop()


def test_a_runner_restored_while_the_player_is_away_marks_the_same_first_move():
    algo = _config().build()
    try:
        runner = algo.env_runner_group.local
        before = runner.sample(3)  # moves 1 to 3: player_1 is out of the game, player_0 to move
        assert P1 not in runner.envs[0].agents
        state = runner.get_state()
        restored = cairn.env_runner.EnvRunner(algo.config, algo.policies)
        restored.set_state(state)
        _check_one_game([before, restored.sample(4)])
        _check_one_game([before, runner.sample(4)])
    finally:
        algo.stop()


def test_a_player_that_left_unselected_and_is_added_back_starts_a_new_trajectory():
    # Its move before it left does not span its absence: it ends where it left, truncated.
    algo = _config(make_vanishing_game).build()
    try:
        runner = algo.env_runner_group.local
        before = runner.sample(3)
        assert P1 not in runner.envs[0].agents
        assert "b" in before, "player_1's move ends where it left, not at the game's end"
        np.testing.assert_array_equal(before["b"]["truncateds"], [True])
        state = runner.get_state()
        assert state["current_obs"][0]["pending_agents"] == []  # player_0 is to move
        restored = cairn.env_runner.EnvRunner(algo.config, algo.policies)
        restored.set_state(state)
        _check_one_game([before, restored.sample(4)], vanish=True)
        _check_one_game([before, runner.sample(4)], vanish=True)
        _check_one_game([runner.sample(7)], vanish=True)
    finally:
        algo.stop()
