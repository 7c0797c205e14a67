"""What the parallel (PettingZoo ParallelEnv) runner tests' envs share: two agents observing
``[t, agent index]``, and a PPO config with one policy each."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np
from pettingzoo import ParallelEnv

import cairn
from tests.helpers import map_by_index

_SPACE = gym.spaces.Box(-100.0, 100.0, (2,), np.float32)


class TwoAgentParallel(ParallelEnv):  # type: ignore[misc]
    """agent_0 and agent_1, each observing ``[t, agent index]`` and choosing one of two
    actions; ``reset()`` starts both at t = 0. A test's env writes ``step()``."""

    def __init__(self) -> None:
        self.possible_agents = ["agent_0", "agent_1"]
        self.agents: list[str] = []
        self.t = 0

    def observation_space(self, agent: str) -> gym.Space[Any]:
        return _SPACE

    def action_space(self, agent: str) -> gym.Space[Any]:
        return gym.spaces.Discrete(2)

    def _obs(self, agent: str) -> np.ndarray:
        return np.array([self.t, int(agent[-1])], np.float32)

    def reset(self, seed: int | None = None, options: Any = None) -> tuple[dict[str, Any], dict[str, Any]]:
        self.agents, self.t = list(self.possible_agents), 0
        return {a: self._obs(a) for a in self.agents}, {a: {} for a in self.agents}


def two_policy_ppo(make_env: Callable[[dict[str, Any]], Any],
                   env_config: dict[str, Any] | None = None) -> cairn.AlgorithmConfig:
    """PPO on ``make_env(env_config)`` with agent_0 on policy p0, agent_1 on p1; seed 0."""
    return (cairn.PPOConfig().environment(make_env, env_config=env_config)
            .multi_agent(policies={"p0", "p1"}, policy_mapping_fn=map_by_index).debugging(seed=0))
