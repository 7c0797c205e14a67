"""PettingZoo AEC environments: converted when every agent acts each cycle, kept as they are
(and stepped turn by turn, tests/env_runner/test_turn_based.py) when agents take turns.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from pettingzoo import AECEnv
from pettingzoo.utils import BaseWrapper, OrderEnforcingWrapper
from pettingzoo.utils.conversions import parallel_to_aec

from cairn.envs import MultiAgentCartPole
from tests.helpers import small_ma_ppo, small_ppo


class TakeTurns(AECEnv):
    """Two players alternate, each adding 0, 1 or 2 to a counter; six moves end the game."""

    metadata = {"name": "take_turns_v0", "render_modes": []}

    def __init__(self) -> None:
        super().__init__()
        self.possible_agents = ["player_0", "player_1"]
        self._obs_space = gym.spaces.Box(0.0, 12.0, (1,), np.float32)
        self._act_space = gym.spaces.Discrete(3)
        self.render_mode = None

    def observation_space(self, agent):
        return self._obs_space

    def action_space(self, agent):
        return self._act_space

    def observe(self, agent):
        return np.array([self._counter], np.float32)

    def reset(self, seed=None, options=None):
        self.agents = list(self.possible_agents)
        self._counter, self._moves = 0, 0
        self.agent_selection = self.agents[0]
        self.rewards = dict.fromkeys(self.agents, 0.0)
        self._cumulative_rewards = dict.fromkeys(self.agents, 0.0)
        self.terminations = dict.fromkeys(self.agents, False)
        self.truncations = dict.fromkeys(self.agents, False)
        self.infos = {a: {} for a in self.agents}

    def step(self, action):
        if self.terminations[self.agent_selection]:
            self._was_dead_step(action)
            return
        self._counter += int(action)
        self._moves += 1
        if self._moves == 6:
            self.terminations = dict.fromkeys(self.agents, True)
        self.agent_selection = self.agents[self._moves % 2]


def _ma_config(env_creator):
    return small_ppo().environment(env_creator).multi_agent(
        policies={"shared"}, policy_mapping_fn=lambda agent_id, **kwargs: "shared"
    )


@pytest.mark.parametrize("wrap", [False, True], ids=["raw", "order_enforcing"])
def test_turn_based_aec_env_is_kept_and_stepped_turn_by_turn(wrap):
    from cairn.env_runner.make_env import is_turn_based_env, make_env

    config = _ma_config(lambda cfg: OrderEnforcingWrapper(TakeTurns()) if wrap else TakeTurns())
    assert is_turn_based_env(make_env(config))  # not converted: agents take turns
    algo = config.build()
    try:
        result = algo.train()
        assert result["num_episodes"] > 0
        assert result["episode_len_mean"] == 6  # six moves, dead-agent steps not counted
    finally:
        algo.stop()


def test_pettingzoo_tictactoe_is_not_converted():
    from pettingzoo.classic import tictactoe_v3

    from cairn.env_runner.make_env import is_turn_based_env, make_env

    env = make_env(small_ppo().environment(lambda cfg: tictactoe_v3.env()))
    assert is_turn_based_env(env) and type(env).__name__ == "OrderEnforcingWrapper"


# PettingZoo's conversions warn that MultiAgentCartPole has no render_mode; beside the point here.
@pytest.mark.filterwarnings("ignore:The base environment:UserWarning")
def test_parallel_env_behind_parallel_to_aec_trains():
    # PettingZoo's own conversion marks it parallelizable; aec_to_parallel unwraps it exactly.
    algo = _ma_config(lambda cfg: parallel_to_aec(MultiAgentCartPole(num_agents=2))).build()
    try:
        result = algo.train()
        assert result["num_env_steps_sampled_lifetime"] > 0
    finally:
        algo.stop()


@pytest.mark.filterwarnings("ignore:The base environment:UserWarning")
def test_parallelizable_aec_env_is_stepped_through_aec_to_parallel():
    # BaseWrapper hides the parallel_to_aec shortcut, so the AEC env really is stepped agent
    # by agent by PettingZoo's aec_to_parallel wrapper.
    algo = _ma_config(lambda cfg: BaseWrapper(parallel_to_aec(MultiAgentCartPole(num_agents=2)))).build()
    try:
        result = algo.train()
        assert result["num_env_steps_sampled_lifetime"] > 0
        assert set(algo.policies) == {"shared"}
    finally:
        algo.stop()


def test_parallel_env_is_unchanged():
    from cairn.env_runner.make_env import make_env

    config = small_ma_ppo(2)
    assert isinstance(make_env(config), MultiAgentCartPole)
