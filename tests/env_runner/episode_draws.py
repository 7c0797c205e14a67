"""Envs and a policy mapping that draw an agent's policy per episode (league / self-play
opponents), with the bookkeeping a test needs to count, per policy, the env steps it acted.

Every episode started in a process gets a serial number (over all env instances); the mapping
function maps ``agent_1`` (parallel env) or ``player_0`` (turn-based game) to ``opp_a`` in
even episodes and ``opp_b`` in odd ones, reading the serial of the episode reset last in its
process: cairn calls it at the agent's first step, right after that reset. Each observation
carries its episode's parity, so a row shows by content which policy acted it.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import gymnasium as gym
import numpy as np
from pettingzoo import ParallelEnv
from pettingzoo.utils import OrderEnforcingWrapper

import cairn
from cairn.policy.spec import PolicySpec
from tests.env_runner.test_turn_based import ScriptedGame

#: The policies of these tests: ``main`` for the fixed player, the two opponents drawn per episode.
POLICIES = ("main", "opp_a", "opp_b")
_next_serial = {"value": 0}
#: The serial of the episode reset last in this process.
_latest = {"episode": -1}
#: ``(episode serial, agent) -> env steps acted`` (turn-based: moves), in this process.
ACTED: Counter[tuple[int, str]] = Counter()
#: ``(episode serial, agent, policy ID)`` of every call of :func:`draw_per_episode`.
CALLS: list[tuple[int, str, str]] = []
#: Single-agent envs (:class:`Countdown`): the serial of each episode started, in order, and
#: the policy of each call of :func:`draw_per_call`, in order.
RESETS: list[int] = []
DRAWS: list[str] = []


def _start_episode() -> int:
    serial = _next_serial["value"]
    _next_serial["value"] += 1
    _latest["episode"] = serial
    return serial


def _restored_episode(serial: int) -> int:
    """An env restored into episode ``serial`` (maybe in a new process, e.g. an async env's
    child): later episodes of this process are numbered after it, as they would have been."""
    _next_serial["value"] = max(_next_serial["value"], serial + 1)
    return serial


def opponent_of(serial: int) -> str:
    """The opponent drawn for episode ``serial``."""
    return "opp_a" if serial % 2 == 0 else "opp_b"


def draw_per_episode(agent_id: str, **kwargs: object) -> str:
    """``agent_1`` / ``player_0``: the opponent of the episode reset last; others: ``main``."""
    serial = _latest["episode"]
    pid = opponent_of(serial) if agent_id in ("agent_1", "player_0") else "main"
    CALLS.append((serial, agent_id, pid))
    return pid


def expected_rows() -> Counter[str]:
    """Env steps acted per policy (``ACTED``), each episode's agent counted under the policy
    that the mapping function returned for it (its one call per (episode, agent))."""
    decided = {(serial, agent): pid for serial, agent, pid in CALLS}
    rows: Counter[str] = Counter()
    for key, steps in ACTED.items():
        rows[decided[key]] += steps
    return rows


class Duel(ParallelEnv):  # type: ignore[misc]
    """Two agents; episode ``serial`` lasts ``2 + serial % 5`` steps, and in odd episodes
    ``agent_1`` leaves one step early. Observation: [step / 10, episode parity, agent index]."""

    metadata = {"name": "duel_v0", "render_modes": []}
    possible_agents = ["agent_0", "agent_1"]

    def __init__(self) -> None:
        self.agents: list[str] = []
        self.serial, self.t = -1, 0

    def observation_space(self, agent: str) -> gym.Space[Any]:
        return gym.spaces.Box(-1.0, 1.0, (3,), np.float32)

    def action_space(self, agent: str) -> gym.Space[Any]:
        return gym.spaces.Discrete(2)

    def _obs(self, agent: str) -> np.ndarray:
        return np.array([self.t / 10, self.serial % 2, self.possible_agents.index(agent)], np.float32)

    def _end_of(self, agent: str) -> int:
        length = 2 + self.serial % 5
        return length - 1 if agent == "agent_1" and self.serial % 2 else length

    def reset(self, seed: int | None = None, options: Any = None) -> tuple[dict[str, Any], dict[str, Any]]:
        self.serial, self.t = _start_episode(), 0
        self.agents = list(self.possible_agents)
        return {a: self._obs(a) for a in self.agents}, {a: {} for a in self.agents}

    def step(self, actions: dict[str, Any]) -> tuple[dict[str, Any], ...]:
        self.t += 1
        for agent in actions:
            ACTED[(self.serial, agent)] += 1
        obs = {a: self._obs(a) for a in actions}
        done = {a: self.t >= self._end_of(a) for a in actions}
        self.agents = [a for a in self.agents if not done[a]]
        return obs, dict.fromkeys(actions, 1.0), done, dict.fromkeys(actions, False), {a: {} for a in actions}

    # cairn's environment state protocol (exact resume of an episode in flight)
    def get_state(self) -> dict[str, Any]:
        return {"serial": self.serial, "t": self.t, "agents": list(self.agents)}

    def set_state(self, state: dict[str, Any]) -> None:
        self.serial, self.t, self.agents = int(state["serial"]), int(state["t"]), list(state["agents"])


def make_duel(env_config: dict) -> Duel:
    return Duel()


class CountedGame(ScriptedGame):
    """The scripted five-move game, with each game's serial and each player's moves counted;
    the observation's first entry is the game's parity instead of the move count."""

    def reset(self, seed=None, options=None):
        super().reset(seed, options)
        self.serial = _start_episode()

    def observe(self, agent):
        obs = super().observe(agent)
        return None if obs is None else np.array([self.serial % 2, obs[1]], np.float32)

    def step(self, action):
        if not self.terminations[self.agent_selection]:
            ACTED[(self.serial, self.agent_selection)] += 1
        super().step(action)

    def get_state(self):
        return {**super().get_state(), "serial": self.serial}

    def set_state(self, state):
        super().set_state(state)
        self.serial = int(state["serial"])


def make_counted_game(env_config: dict) -> Any:
    return OrderEnforcingWrapper(CountedGame())


def config(make_env: Any) -> cairn.AlgorithmConfig:
    """A small PPO config of ``make_env`` with the policies drawn per episode (their spaces
    given: an opponent may have no agent mapped to it when the env is probed)."""
    probe = make_env({})
    agent = probe.possible_agents[0]
    spec = PolicySpec(observation_space=probe.observation_space(agent),
                      action_space=probe.action_space(agent))
    return (cairn.PPOConfig().environment(make_env).training(model={"hidden": [8]})
            .env_runners(observation_filter="NoFilter")
            .multi_agent(policies=dict.fromkeys(POLICIES, spec), policy_mapping_fn=draw_per_episode)
            .debugging(seed=0))


def draw_per_call(agent_id: str, **kwargs: object) -> str:
    """A single-agent env's agent: ``opp_a`` and ``opp_b`` in turn, one per call (one per
    episode: the k-th call maps the k-th episode started)."""
    DRAWS.append(opponent_of(len(DRAWS)))
    return DRAWS[-1]


class Countdown(gym.Env):  # type: ignore[misc]
    """A single-agent env whose episode ``serial`` lasts ``2 + serial % 5`` steps; observation:
    [step / 10, episode parity, 1] (never all zero: a recurrent state moves from its first step)."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self) -> None:
        self.serial, self.t = -1, 0

    def _obs(self) -> np.ndarray:
        return np.array([self.t / 10, self.serial % 2, 1.0], np.float32)

    def reset(self, *, seed: int | None = None, options: Any = None) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        self.serial, self.t = _start_episode(), 0
        RESETS.append(self.serial)
        return self._obs(), {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        self.t += 1
        ACTED[(self.serial, "default_agent")] += 1
        return self._obs(), 1.0, self.t >= 2 + self.serial % 5, False, {}

    # cairn's environment state protocol
    def get_state(self) -> dict[str, Any]:
        return {"serial": self.serial, "t": self.t}

    def set_state(self, state: dict[str, Any]) -> None:
        self.serial, self.t = _restored_episode(int(state["serial"])), int(state["t"])


def make_countdown(env_config: dict) -> Countdown:
    return Countdown()


def single_agent_config(mode: str, num_envs: int) -> cairn.AlgorithmConfig:
    """A small PPO config of :class:`Countdown` whose agent draws its policy per episode."""
    spec = PolicySpec(observation_space=Countdown.observation_space, action_space=Countdown.action_space)
    return (cairn.PPOConfig().environment(make_countdown)
            .training(model={"hidden": [8]}, train_batch_size=64, minibatch_size=32, num_epochs=1)
            .env_runners(observation_filter="NoFilter", num_envs_per_env_runner=num_envs,
                         gym_env_vectorize_mode=mode)
            .multi_agent(policies=dict.fromkeys(POLICIES, spec), policy_mapping_fn=draw_per_call)
            .debugging(seed=0))


def expected_single_agent_rows() -> Counter[str]:
    """Env steps acted per policy in this process's :class:`Countdown` envs, the k-th episode
    started under the k-th draw."""
    decided = {(serial, "default_agent"): pid for serial, pid in zip(RESETS, DRAWS, strict=True)}
    rows: Counter[str] = Counter()
    for key, steps in ACTED.items():
        rows[decided[key]] += steps
    return rows
