"""Environments whose observation never changes and whose step raises once, for the n-step
tests: after the error, the runner resets its envs and the new episode starts from the very
observation the held rows ended with. Each episode pays ``its index + 1`` per step, so that a
window that crosses from one episode into the next shows in its return."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from pettingzoo import ParallelEnv

_OBS = np.zeros(1, dtype=np.float32)
_SPACE = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)


class FlakyConstantEnv(gym.Env):  # type: ignore[misc]
    """One agent; raises ``RuntimeError("flaky env")`` at its ``fail_at``-th step (counted
    across episodes), once."""

    observation_space = _SPACE
    action_space = gym.spaces.Discrete(2)

    def __init__(self, config: dict[str, Any]) -> None:
        self.fail_at = int(config["fail_at"])
        self.episode, self.steps, self.t = -1, 0, 0

    def reset(self, *, seed: int | None = None, options: Any = None) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        self.episode += 1
        self.t = 0
        return _OBS.copy(), {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        self.steps += 1
        if self.steps == self.fail_at:
            raise RuntimeError("flaky env")
        self.t += 1
        return _OBS.copy(), float(self.episode + 1), False, self.t >= 100, {}

    # cairn's environment state protocol: a checkpoint resumes the episode in flight.
    def get_state(self) -> dict[str, Any]:
        return {"episode": self.episode, "steps": self.steps, "t": self.t}

    def set_state(self, state: dict[str, Any]) -> None:
        self.episode, self.steps, self.t = int(state["episode"]), int(state["steps"]), int(state["t"])


class FlakyConstantParallel(ParallelEnv):  # type: ignore[misc]
    """Two agents of :class:`FlakyConstantEnv`'s kind in one PettingZoo ParallelEnv."""

    metadata = {"name": "flaky_constant_parallel_v0", "render_modes": []}

    def __init__(self, config: dict[str, Any]) -> None:
        self.possible_agents = ["a0", "a1"]
        self.agents: list[str] = []
        self.fail_at = int(config["fail_at"])
        self.episode, self.steps, self.t = -1, 0, 0

    def observation_space(self, agent: str) -> gym.Space[Any]:
        return _SPACE

    def action_space(self, agent: str) -> gym.Space[Any]:
        return gym.spaces.Discrete(2)

    def reset(self, seed: int | None = None, options: Any = None) -> tuple[dict[str, Any], dict[str, Any]]:
        self.agents = list(self.possible_agents)
        self.episode += 1
        self.t = 0
        return {a: _OBS.copy() for a in self.agents}, {a: {} for a in self.agents}

    def step(self, actions: dict[str, Any]) -> tuple[dict[str, Any], ...]:
        self.steps += 1
        if self.steps == self.fail_at:
            raise RuntimeError("flaky env")
        self.t += 1
        reward = float(self.episode + 1)
        return ({a: _OBS.copy() for a in self.agents}, {a: reward for a in self.agents},
                {a: False for a in self.agents}, {a: self.t >= 100 for a in self.agents},
                {a: {} for a in self.agents})

    # cairn's environment state protocol: a checkpoint resumes the episode in flight.
    def get_state(self) -> dict[str, Any]:
        return {"episode": self.episode, "steps": self.steps, "t": self.t, "agents": list(self.agents)}

    def set_state(self, state: dict[str, Any]) -> None:
        self.episode, self.steps, self.t = int(state["episode"]), int(state["steps"]), int(state["t"])
        self.agents = list(state["agents"])


def make_flaky_constant_env(config: dict[str, Any]) -> FlakyConstantEnv:
    return FlakyConstantEnv(config)


def make_flaky_constant_parallel(config: dict[str, Any]) -> FlakyConstantParallel:
    return FlakyConstantParallel(config)


class NaNRewardConstantEnv(gym.Env):  # type: ignore[misc]
    """One agent, one endless episode; step ``t`` (from 1) pays ``t``, but step ``nan_at`` pays
    NaN, and the episode goes on: the sample round holding it is refused (NonFiniteSampleError)
    while the env keeps its episode, whose next observation equals every earlier one."""

    observation_space = _SPACE
    action_space = gym.spaces.Discrete(2)

    def __init__(self, config: dict[str, Any]) -> None:
        self.nan_at = int(config["nan_at"])
        self.t = 0

    def reset(self, *, seed: int | None = None, options: Any = None) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        return _OBS.copy(), {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        self.t += 1
        return _OBS.copy(), float("nan") if self.t == self.nan_at else float(self.t), False, False, {}


def make_nan_reward_constant_env(config: dict[str, Any]) -> NaNRewardConstantEnv:
    return NaNRewardConstantEnv(config)
