"""Tiny deterministic environments that log everything they emit and receive, and a callbacks
class that logs what the episode getters show it, both as JSON lines under
``env_config["log_dir"]`` (files, so that env children and Ray actors can write them too)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
from pettingzoo import AECEnv, ParallelEnv

from cairn.callbacks import Callbacks
from cairn.errors import EpisodeHistoryError


def plain(value: Any) -> Any:
    """``value`` as JSON data (arrays and numpy scalars as lists and numbers)."""
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, (np.ndarray, np.generic)):
        return value.tolist()
    return value


def log(log_dir: str, name: str, record: dict[str, Any]) -> None:
    with open(Path(log_dir) / f"{name}-{os.getpid()}.jsonl", "a") as f:
        f.write(json.dumps(plain(record)) + "\n")


def read_log(log_dir: Path, name: str) -> list[dict[str, Any]]:
    return [json.loads(line) for path in sorted(log_dir.glob(f"{name}-*.jsonl"))
            for line in path.read_text().splitlines()]


class EmitEnv(gym.Env):  # type: ignore[misc]
    """Observation [uid, t, 7 t] (uid drawn at reset, so episodes differ), reward action + t / 10,
    info {"t", "uid"}; an episode lasts 3 + uid % 4 steps. Logs under its own serial."""

    observation_space = gym.spaces.Box(-1e6, 1e6, (3,), np.float32)
    action_space = gym.spaces.Discrete(3)

    def __init__(self, env_config: dict[str, Any]) -> None:
        self.log_dir = env_config["log_dir"]
        self.name = f"env{os.getpid()}-{id(self)}"
        self.uid, self.t = 0, 0

    def _obs(self) -> np.ndarray:
        return np.array([self.uid, self.t, 7 * self.t], np.float32)

    def reset(self, *, seed: int | None = None, options: Any = None) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        self.uid, self.t = int(self.np_random.integers(1, 10**6)), 0
        obs, info = self._obs(), {"t": 0, "uid": self.uid}
        log(self.log_dir, "env", {"env": self.name, "kind": "reset", "obs": obs, "info": info})
        return obs, info

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        self.t += 1
        obs, reward, info = self._obs(), float(action) + self.t / 10, {"t": self.t, "uid": self.uid}
        terminated = self.t >= 3 + self.uid % 4
        log(self.log_dir, "env", {"env": self.name, "kind": "step", "action": int(action), "reward": reward,
                                   "obs": obs, "info": info, "done": terminated})
        return obs, reward, terminated, False, info

    # cairn's environment state protocol: an episode in flight resumes after a restore.
    def get_state(self) -> dict[str, Any]:
        return {"uid": self.uid, "t": self.t}

    def set_state(self, state: dict[str, Any]) -> None:
        self.uid, self.t = int(state["uid"]), int(state["t"])


def make_emit_env(env_config: dict[str, Any]) -> EmitEnv:
    return EmitEnv(env_config)


class EmitParallel(ParallelEnv):  # type: ignore[misc]
    """Two agents; ``a1`` leaves after 2 steps, ``a0`` after 2 + uid % 3. Observation
    [uid, t, agent index], reward t + agent index + action, info {"t", "agent"}."""

    metadata = {"name": "emit_parallel_v0", "render_modes": []}
    possible_agents = ["a0", "a1"]

    def __init__(self, env_config: dict[str, Any]) -> None:
        self.log_dir = env_config["log_dir"]
        self.name = f"par{os.getpid()}-{id(self)}"
        self.agents: list[str] = []
        self.rng = np.random.default_rng(0)
        self.uid, self.t = 0, 0

    def observation_space(self, agent: str) -> gym.Space[Any]:
        return gym.spaces.Box(-1e6, 1e6, (3,), np.float32)

    def action_space(self, agent: str) -> gym.Space[Any]:
        return gym.spaces.Discrete(2)

    def _obs(self, agent: str) -> np.ndarray:
        return np.array([self.uid, self.t, self.possible_agents.index(agent)], np.float32)

    def reset(self, seed: int | None = None, options: Any = None) -> tuple[dict[str, Any], dict[str, Any]]:
        if seed is not None:
            self.rng = np.random.default_rng(seed)
        self.uid, self.t = int(self.rng.integers(1, 10**6)), 0
        self.agents = list(self.possible_agents)
        obs = {a: self._obs(a) for a in self.agents}
        infos = {a: {"t": 0, "agent": a} for a in self.agents}
        log(self.log_dir, "env", {"env": self.name, "kind": "reset", "obs": obs, "info": infos})
        return obs, infos

    def step(self, actions: dict[str, Any]) -> tuple[dict[str, Any], ...]:
        self.t += 1
        obs = {a: self._obs(a) for a in actions}
        rewards = {a: self.t + self.possible_agents.index(a) + float(actions[a]) for a in actions}
        ends = {"a0": 2 + self.uid % 3, "a1": 2}
        done = {a: self.t >= ends[a] for a in actions}
        infos = {a: {"t": self.t, "agent": a} for a in actions}
        self.agents = [a for a in self.agents if not done[a]]
        log(self.log_dir, "env", {"env": self.name, "kind": "step", "action": actions, "reward": rewards,
                                   "obs": obs, "info": infos, "done": not self.agents})
        return obs, rewards, done, dict.fromkeys(actions, False), infos


def make_emit_parallel(env_config: dict[str, Any]) -> EmitParallel:
    return EmitParallel(env_config)


class EmitGame(AECEnv):  # type: ignore[misc]
    """Two players alternate for 3 + uid % 3 moves; after move k player_0 gets k and player_1
    gets 10 k + action. Observation [uid, moves, player index], info {"moves"}. ``last()`` logs
    what it returns (cairn reads it once per selection), ``step`` the move it receives."""

    metadata = {"name": "emit_game_v0", "render_modes": []}

    def __init__(self, env_config: dict[str, Any]) -> None:
        super().__init__()
        self.log_dir = env_config["log_dir"]
        self.name = f"game{os.getpid()}-{id(self)}"
        self.possible_agents = ["player_0", "player_1"]
        self.rng = np.random.default_rng(0)

    def observation_space(self, agent: str) -> gym.Space[Any]:
        return gym.spaces.Box(-1e6, 1e6, (3,), np.float32)

    def action_space(self, agent: str) -> gym.Space[Any]:
        return gym.spaces.Discrete(2)

    def observe(self, agent: str) -> np.ndarray:
        return np.array([self.uid, self.moves, self.possible_agents.index(agent)], np.float32)

    def reset(self, seed: int | None = None, options: Any = None) -> None:
        if seed is not None:
            self.rng = np.random.default_rng(seed)
        self.uid, self.moves = int(self.rng.integers(1, 10**6)), 0
        self.agents = list(self.possible_agents)
        self.agent_selection = "player_0"
        self.rewards = dict.fromkeys(self.agents, 0.0)
        self._cumulative_rewards = dict.fromkeys(self.agents, 0.0)
        self.terminations = dict.fromkeys(self.agents, False)
        self.truncations = dict.fromkeys(self.agents, False)
        self.infos = {a: {"moves": 0} for a in self.agents}
        log(self.log_dir, "env", {"env": self.name, "kind": "reset"})

    def last(self, observe: bool = True) -> tuple[Any, ...]:
        result = super().last(observe)
        obs, reward, _, _, info = result
        log(self.log_dir, "env", {"env": self.name, "kind": "selection", "agent": self.agent_selection,
                                   "obs": obs, "reward": float(reward), "info": info})
        return result  # type: ignore[no-any-return]

    def step(self, action: Any) -> None:
        if self.terminations[self.agent_selection]:
            self._was_dead_step(action)
            return
        log(self.log_dir, "env", {"env": self.name, "kind": "move", "agent": self.agent_selection,
                                   "action": int(action)})
        self._cumulative_rewards[self.agent_selection] = 0.0
        self.moves += 1
        self.rewards = {"player_0": float(self.moves), "player_1": 10.0 * self.moves + int(action)}
        if self.moves == 3 + self.uid % 3:
            self.terminations = dict.fromkeys(self.agents, True)
        self.infos = {a: {"moves": self.moves} for a in self.agents}
        self.agent_selection = self.possible_agents[self.moves % 2]
        self._accumulate_rewards()


def make_emit_game(env_config: dict[str, Any]) -> EmitGame:
    return EmitGame(env_config)


class EpisodeData(Callbacks):
    """Logs what the getters show: at the start the reset observation and info, at each step
    the latest observation, action, reward and info (index -1), at the end the whole episode;
    and a per-episode metric, the sum of the rewards."""

    def __init__(self) -> None:
        self.seen: dict[int, dict[str, Any]] = {}

    @staticmethod
    def latest(episode: Any) -> dict[str, Any]:
        return {"obs": episode.get_observations(-1), "info": episode.get_infos(-1),
                "action": _or_none(episode.get_actions, -1), "reward": _or_none(episode.get_rewards, -1)}

    def on_episode_start(self, *, episode: Any, env_runner: Any) -> None:
        self.seen[episode.env_index] = {"start": self.latest(episode), "steps": []}

    def on_episode_step(self, *, episode: Any, env_runner: Any) -> None:
        self.seen[episode.env_index]["steps"].append(self.latest(episode))

    def on_episode_end(self, *, episode: Any, env_runner: Any) -> None:
        rewards = episode.get_rewards()
        total = sum(sum(r) for r in rewards.values()) if isinstance(rewards, dict) else sum(rewards)
        episode.custom_metrics["reward_sum"] = total
        record = {**self.seen.pop(episode.env_index, {}), "reward_sum": total,
                  "observations": episode.get_observations(), "infos": episode.get_infos(),
                  "actions": episode.get_actions(), "rewards": rewards, "return": episode.episode_return}
        log(env_runner.config.env_config["log_dir"], "callbacks", record)


def _or_none(getter: Any, index: int) -> Any:
    try:
        return getter(index)
    except IndexError:  # the reset: no action and reward yet
        return None


def answers(**getters: Any) -> dict[str, str]:
    """For each named getter call: "answered", or the message of its EpisodeHistoryError."""
    out = {}
    for name, getter in getters.items():
        try:
            getter()
            out[name] = "answered"
        except EpisodeHistoryError as error:
            out[name] = str(error)
    return out


class ShortHistory(EpisodeData):
    """Keeps the last 2 steps: the whole episode is refused, its end is answered."""

    episode_history_steps = 2

    def on_episode_end(self, *, episode: Any, env_runner: Any) -> None:
        record: dict[str, Any] = {"last": episode.get_rewards(slice(-2, None)),
                                  "obs": episode.get_observations([-3, -1]),
                                  **answers(rewards=episode.get_rewards,
                                            observations=episode.get_observations)}
        log(env_runner.config.env_config["log_dir"], "callbacks", record)
