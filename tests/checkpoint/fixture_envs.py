"""Environments that frozen fixture checkpoints name (tests/fixtures/checkpoints/<version>/).

A fixture stores the reference ``"tests.checkpoint.fixture_envs:<creator>"`` in its config and
is never regenerated, so the module path, the creators' names and the envs' behaviour and state
keys here are frozen: change nothing here that a written fixture relies on (add a new env
instead). scripts/make_fixture_checkpoints.py writes the fixtures; tests/checkpoint/test_fixtures.py
loads them.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from pettingzoo import ParallelEnv

__all__ = ["WaitingParallel", "make_waiting_parallel"]


class WaitingParallel(ParallelEnv):  # type: ignore[misc]
    """A parallel env in which one agent's observation is absent at some steps, so its row waits
    across a fragment's end (fixture ``ppo_parallel_pending``, format version 4 on).

    a0 observes at every step; a1 only at even t, so it acts at t = 0, 2, 4 and waits one step
    for its next observation. At t = 6 a1 is terminated with reward 10; the episode ends at
    t = 7. Each live agent is paid 1 per step otherwise. Observation ``[t, agent index]``. Its
    state (``get_state``) lets a checkpoint resume the episode in flight exactly."""

    metadata = {"name": "waiting_parallel_v0", "render_modes": []}
    possible_agents = ["a0", "a1"]

    def __init__(self) -> None:
        self.agents: list[str] = []
        self.t = 0

    def observation_space(self, agent: str) -> gym.Space[Any]:
        return gym.spaces.Box(-100.0, 100.0, (2,), np.float32)

    def action_space(self, agent: str) -> gym.Space[Any]:
        return gym.spaces.Discrete(2)

    def _obs(self, agent: str) -> np.ndarray:
        return np.array([self.t, self.possible_agents.index(agent)], np.float32)

    def reset(self, seed: int | None = None, options: Any = None) -> tuple[dict[str, Any], dict[str, Any]]:
        self.t = 0
        self.agents = list(self.possible_agents)
        return {a: self._obs(a) for a in self.agents}, {a: {} for a in self.agents}

    def step(self, actions: dict[str, Any]) -> tuple[dict[str, Any], ...]:
        self.t += 1
        rewards = {a: 1.0 for a in self.agents}
        terminated = {a: False for a in self.agents}
        if self.t == 6 and "a1" in self.agents:
            rewards["a1"], terminated["a1"] = 10.0, True
        if self.t >= 7:
            terminated = {a: True for a in self.agents}
        self.agents = [a for a in self.agents if not terminated[a]]
        obs = {a: self._obs(a) for a in self.agents if a == "a0" or self.t % 2 == 0}
        return obs, rewards, terminated, {a: False for a in terminated}, {a: {} for a in obs}

    def get_state(self) -> dict[str, Any]:
        return {"t": self.t, "agents": list(self.agents)}

    def set_state(self, state: dict[str, Any]) -> None:
        self.t, self.agents = int(state["t"]), list(state["agents"])


def make_waiting_parallel(env_config: dict[str, Any]) -> WaitingParallel:
    """:class:`WaitingParallel` (it takes no settings)."""
    return WaitingParallel()
