"""MultiAgentCartPole: a PettingZoo ParallelEnv of N independent CartPoles."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.envs.classic_control.cartpole import CartPoleEnv
from pettingzoo import ParallelEnv

from cairn._compat import gymnasium_internals
from cairn.rng import make_rng, rng_state

__all__ = ["MultiAgentCartPole", "make_multi_agent_cartpole"]


class MultiAgentCartPole(ParallelEnv):  # type: ignore[misc]
    """N agents (``"agent_0"``...), each balancing its own pole; an agent leaves when its pole
    falls or after ``max_episode_steps``, and the episode ends when all have left.

    Follows PettingZoo's ParallelEnv API (``possible_agents``, ``agents``, ``reset``, ``step``,
    ``observation_space(agent)``, ``action_space(agent)``) and cairn's environment state
    protocol (``get_state``/``set_state``), so that training resumes exactly.

    >>> env = MultiAgentCartPole(num_agents=2)
    >>> obs, infos = env.reset(seed=0)
    >>> sorted(obs)
    ['agent_0', 'agent_1']
    """

    metadata = {"name": "multi_agent_cartpole_v0", "render_modes": []}

    def __init__(self, num_agents: int = 2, max_episode_steps: int = 500) -> None:
        if not isinstance(num_agents, int) or num_agents < 1:
            raise ValueError(f"num_agents must be an int >= 1, got {num_agents!r}")
        self.possible_agents = [f"agent_{i}" for i in range(num_agents)]
        self.agents: list[str] = []
        self.max_episode_steps = max_episode_steps
        self._envs = {a: CartPoleEnv() for a in self.possible_agents}
        self._steps = dict.fromkeys(self.possible_agents, 0)
        first = self._envs[self.possible_agents[0]]
        self._obs_space, self._act_space = first.observation_space, first.action_space

    @property
    def num_agents(self) -> int:
        return len(self.agents)

    def observation_space(self, agent: str) -> gym.Space[Any]:
        return self._obs_space

    def action_space(self, agent: str) -> gym.Space[Any]:
        return self._act_space

    def reset(self, seed: int | None = None,
              options: dict[str, Any] | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
        self.agents = list(self.possible_agents)
        obs = {}
        for k, agent in enumerate(self.agents):
            obs[agent], _ = self._envs[agent].reset(seed=None if seed is None else seed + k)
            self._steps[agent] = 0
        return obs, {a: {} for a in self.agents}

    def step(self, actions: dict[str, Any]) -> tuple[dict[str, Any], ...]:
        obs, rewards, terminated, truncated, infos = {}, {}, {}, {}, {}
        for agent in list(self.agents):
            o, r, term, _, info = self._envs[agent].step(actions[agent])
            self._steps[agent] += 1
            trunc = self._steps[agent] >= self.max_episode_steps and not term
            obs[agent], rewards[agent], infos[agent] = o, float(r), info
            terminated[agent], truncated[agent] = bool(term), bool(trunc)
            if term or trunc:
                self.agents.remove(agent)
        return obs, rewards, terminated, truncated, infos

    def close(self) -> None:
        for env in self._envs.values():
            env.close()

    # cairn's environment state protocol
    def get_state(self) -> dict[str, Any]:
        return {
            "agents": list(self.agents),
            "steps": dict(self._steps),
            "envs": {
                a: {
                    "state": None if e.state is None else np.array(e.state),
                    "steps_beyond_terminated": e.steps_beyond_terminated,
                    "np_random": _rng_state_or_none(e),
                }
                for a, e in self._envs.items()
            },
        }

    def set_state(self, state: dict[str, Any]) -> None:
        self.agents = [a for a in state["agents"] if a in self._envs]
        self._steps = {a: int(state["steps"][a]) for a in self.possible_agents}
        for agent, env in self._envs.items():
            s = state["envs"][agent]
            env.state = None if s["state"] is None else np.array(s["state"])
            env.steps_beyond_terminated = s["steps_beyond_terminated"]
            if s["np_random"] is not None:
                gymnasium_internals.set_np_random(env, make_rng(s["np_random"]))


def _rng_state_or_none(env: CartPoleEnv) -> dict[str, Any] | None:
    rng = gymnasium_internals.np_random_or_none(env)
    return None if rng is None else rng_state(rng)


def make_multi_agent_cartpole(env_config: dict[str, Any]) -> MultiAgentCartPole:
    """Env creator for configs: ``config.environment(make_multi_agent_cartpole,
    env_config={"num_agents": 3})``. Being a module-level function, it is stored in
    checkpoints by reference, so they restore without passing the env again."""
    return MultiAgentCartPole(**env_config)
