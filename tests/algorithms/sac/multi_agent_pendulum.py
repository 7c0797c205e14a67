"""A PettingZoo ParallelEnv of N independent Pendulums (Box actions), for SAC's multi-agent
tests; it follows cairn's environment state protocol, so that training resumes exactly."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.envs.classic_control.pendulum import PendulumEnv
from pettingzoo import ParallelEnv

from cairn.rng import make_rng, rng_state


class MultiAgentPendulum(ParallelEnv):  # type: ignore[misc]
    """Agents ``agent_<i>`` each swing their own pendulum; all are truncated together after
    ``max_episode_steps``."""

    metadata = {"name": "multi_agent_pendulum_v0", "render_modes": []}

    def __init__(self, num_agents: int = 2, max_episode_steps: int = 50) -> None:
        self.possible_agents = [f"agent_{i}" for i in range(num_agents)]
        self.agents: list[str] = []
        self.max_episode_steps = max_episode_steps
        self._envs = {a: PendulumEnv() for a in self.possible_agents}
        self._steps = 0
        first = self._envs[self.possible_agents[0]]
        self._obs_space, self._act_space = first.observation_space, first.action_space

    def observation_space(self, agent: str) -> gym.Space[Any]:
        return self._obs_space

    def action_space(self, agent: str) -> gym.Space[Any]:
        return self._act_space

    def reset(
        self, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        self.agents = list(self.possible_agents)
        self._steps = 0
        obs = {}
        for i, (agent, env) in enumerate(self._envs.items()):
            obs[agent] = env.reset(seed=None if seed is None else seed + i)[0]
        return obs, {a: {} for a in self.agents}

    def step(self, actions: dict[str, Any]) -> tuple[dict[str, Any], ...]:
        self._steps += 1
        obs, rewards, terminated, truncated = {}, {}, {}, {}
        done = self._steps >= self.max_episode_steps
        for agent in list(self.agents):
            o, r, _, _, _ = self._envs[agent].step(actions[agent])
            obs[agent], rewards[agent] = o, float(r)
            terminated[agent], truncated[agent] = False, done
        if done:
            self.agents = []
        return obs, rewards, terminated, truncated, {a: {} for a in obs}

    def get_state(self) -> dict[str, Any]:
        return {"agents": list(self.agents), "steps": self._steps, "envs": {
            a: {"state": None if getattr(e, "state", None) is None else np.array(e.state),  # before reset
                "last_u": None if getattr(e, "last_u", None) is None else float(e.last_u),
                "np_random": None if e._np_random is None else rng_state(e._np_random)}
            for a, e in self._envs.items()}}

    def set_state(self, state: dict[str, Any]) -> None:
        self.agents = list(state["agents"])
        self._steps = int(state["steps"])
        for agent, env in self._envs.items():
            s = state["envs"][agent]
            env.state = None if s["state"] is None else np.array(s["state"])
            env.last_u = s["last_u"]
            if s["np_random"] is not None:
                env._np_random = make_rng(s["np_random"])


def make_ma_pendulum(env_config: dict[str, Any]) -> MultiAgentPendulum:
    """A module-level (hence storable) creator."""
    return MultiAgentPendulum(num_agents=int(env_config.get("num_agents", 2)))
