"""Faults on demand for the failure-path tests: an environment that records its own step and
episode and refuses to be stepped past an episode's end, a way to make one env copy raise once
(in this process or in an ``"async"`` child), and callbacks that raise once in a chosen hook.

Module level, so that configs and checkpoints name them and child processes import them.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

import cairn
from cairn.callbacks import Callbacks
from tests.helpers import assert_resumes_exactly, assert_trains_identically

#: The episode length of the StepRecordEnv copies in the failure-path tests.
LENGTH = 5


class InjectedError(RuntimeError):
    """The error the tests inject (so that no other error passes for it)."""


def _claim(flag_file: str | None) -> bool:
    """True for the first caller, across processes, that creates ``flag_file`` (one fault)."""
    if not flag_file:
        return False
    try:
        os.close(os.open(flag_file, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return False
    return True


class StepRecordEnv(gym.Env):  # type: ignore[type-arg]
    """Observes ``[t, episode_id, noise]``: its own step in the episode and how many resets it
    had. Episodes end (terminated) after ``length`` steps. Stepping a finished episode, or one
    never reset, raises AssertionError: the env runner must reset an env before stepping it.

    ``env_config``: ``length`` (default 5), ``continuous`` (Box actions, for SAC),
    ``fail_in`` (``"step"``, ``"reset"``, ``"close"`` or ``"set_state"``), ``fail_at`` (that
    call's number, counted per env copy, from 1; ``"set_state"``: the first call) and
    ``fail_file``: the one env copy that creates this file first raises :class:`InjectedError`
    there, once (the file then exists; create it beforehand to arm the fault later by deleting
    it). ``set_state`` raises before it changes anything. Each ``close()``
    call is recorded in :data:`CLOSED` (in the process of the env copy) before it may raise.
    """

    def __init__(self, env_config: dict[str, Any] | None = None) -> None:
        config = dict(env_config or {})
        self.length = int(config.get("length", 5))
        self.fail_in = config.get("fail_in")
        self.fail_at = int(config.get("fail_at", 0))
        self.fail_file = config.get("fail_file")
        self.observation_space = gym.spaces.Box(-1e6, 1e6, (3,), np.float32)
        self.action_space = (gym.spaces.Box(-1.0, 1.0, (1,), np.float32) if config.get("continuous")
                             else gym.spaces.Discrete(2))
        self.t = 0
        self.episode = -1
        self.done = True
        self.calls = {"step": 0, "reset": 0, "close": 0}

    def _maybe_fail(self, call: str) -> None:
        self.calls[call] += 1
        if call == self.fail_in and self.calls[call] >= self.fail_at and _claim(self.fail_file):
            raise InjectedError(f"injected failure in {call}() at call {self.calls[call]}")

    def _obs(self) -> np.ndarray:
        return np.array([self.t, self.episode, self.np_random.normal()], dtype=np.float32)

    def reset(self, *, seed: int | None = None, options: Any = None) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        self._maybe_fail("reset")
        self.t, self.episode, self.done = 0, self.episode + 1, False
        return self._obs(), {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        if self.done:
            raise AssertionError(f"StepRecordEnv stepped after its episode {self.episode} ended "
                                 f"(t={self.t}) without a reset")
        self._maybe_fail("step")
        self.t += 1
        self.done = self.t >= self.length
        return self._obs(), 1.0, self.done, False, {}

    def close(self) -> None:
        CLOSED.append(self)
        self._maybe_fail("close")

    # The env state protocol (cairn.env_runner.env_state): runners save and restore it exactly.
    def get_state(self) -> dict[str, Any]:
        return {"t": self.t, "episode": self.episode, "done": self.done, "calls": dict(self.calls),
                "rng": self.np_random.bit_generator.state}

    def set_state(self, state: dict[str, Any]) -> None:
        if self.fail_in == "set_state" and _claim(self.fail_file):
            raise InjectedError("injected failure in set_state()")
        self.t, self.episode, self.done = int(state["t"]), int(state["episode"]), bool(state["done"])
        self.calls = {"close": 0, **state["calls"]}
        self.np_random.bit_generator.state = state["rng"]


#: The StepRecordEnv copies whose ``close()`` was called in this process, in order.
CLOSED: list[StepRecordEnv] = []


def make_step_record_env(env_config: dict[str, Any]) -> StepRecordEnv:
    """A module-level (storable, picklable by reference) creator of :class:`StepRecordEnv`."""
    return StepRecordEnv(env_config)


def assert_rows_in_step(batch: Any, length: int) -> None:
    """Every row of a (single-agent) batch is one real step of its env's episode: the next
    observation is the observation one step later in the same episode, and an episode ends
    exactly at ``length``."""
    obs, next_obs = np.asarray(batch["obs"]), np.asarray(batch["next_obs"])
    assert np.array_equal(next_obs[:, 0], obs[:, 0] + 1), "a row's next observation is not one step later"
    assert np.array_equal(next_obs[:, 1], obs[:, 1]), "a row's next observation is of another episode"
    ended = np.asarray(batch["terminateds"]) | np.asarray(batch["truncateds"])
    assert np.array_equal(ended, next_obs[:, 0] == length), "an episode ended off its length"


class RaiseOnce(Callbacks):
    """Raises :class:`InjectedError` once in each hook named in :data:`RAISE_IN` (per process:
    the local runner shares the algorithm's instance), then behaves."""

    def _maybe(self, hook: str) -> None:
        if hook in RAISE_IN:
            RAISE_IN.discard(hook)
            raise InjectedError(f"injected failure in {hook}")

    def on_episode_start(self, *, episode: Any, env_runner: Any) -> None:
        self._maybe("on_episode_start")

    def on_episode_step(self, *, episode: Any, env_runner: Any) -> None:
        self._maybe("on_episode_step")

    def on_episode_end(self, *, episode: Any, env_runner: Any) -> None:
        self._maybe("on_episode_end")

    def on_sample_end(self, *, samples: Any, env_runner: Any) -> None:
        self._maybe("on_sample_end")
        SAMPLES.append(samples)

    def on_train_result(self, *, algorithm: Any, result: dict[str, Any]) -> None:
        self._maybe("on_train_result")

    def on_evaluate_end(self, *, algorithm: Any, evaluation_metrics: dict[str, Any]) -> None:
        self._maybe("on_evaluate_end")


#: The hooks in which :class:`RaiseOnce` raises next (each once).
RAISE_IN: set[str] = set()
#: The samples :class:`RaiseOnce` saw delivered (``on_sample_end`` did not raise), in order.
SAMPLES: list[dict[str, Any]] = []


def raise_in(hooks: Iterable[str]) -> None:
    """Make :class:`RaiseOnce` raise once in each of ``hooks``."""
    RAISE_IN.clear()
    RAISE_IN.update(hooks)
    SAMPLES.clear()


def step_record_env_config(tmp_path: Path, **faults: Any) -> dict[str, Any]:
    """The env_config of StepRecordEnv copies of episode :data:`LENGTH`, with one fault."""
    return {"length": LENGTH, "fail_file": str(tmp_path / "fault"), **faults}


def assert_runner_in_step(algo: cairn.Algorithm) -> None:
    """Each env copy is where its runner believes: its own step and episode are those of the
    runner's current observation and episode totals, and its episode is not over."""
    runner = algo.env_runner_group.local
    assert runner is not None
    state = runner.get_state()
    assert not state["needs_reset"]
    for i, env_state in enumerate(state["envs"]):
        env = env_state["state"]
        assert not env["done"], f"env {i} is between episodes"
        assert env["t"] == state["episodes"][i]["length"] == state["current_obs"][i][0], (
            f"env {i} is at step {env['t']}, its runner believes "
            f"{state['episodes'][i]['length']} / {state['current_obs'][i][0]}")
        assert env["episode"] == state["current_obs"][i][1]


def assert_counters_agree(algo: cairn.Algorithm) -> None:
    """The algorithm's counters count what its runner and policy say was delivered to it, and
    every episode it reports is whole (single-agent StepRecordEnv, local runner)."""
    runner = algo.env_runner_group.local
    assert runner is not None
    counters = algo.counters
    assert runner.num_env_steps_sampled == counters["num_env_steps_sampled_lifetime"]
    assert runner.num_episodes == counters["num_episodes_lifetime"]
    assert algo.get_policy().global_timestep == counters["num_agent_steps_sampled_lifetime"]
    assert {e["length"] for e in algo.recent_episodes} <= {LENGTH}, "an episode was cut short"


def check_recovers(algo: cairn.Algorithm, tmp_path: Path, error: type[BaseException],
                   match: str = "injected failure", *, completes: bool = False,
                   whole_iteration: bool = True, arm: Callable[[], None] = lambda: None,
                   after_fault: Callable[[cairn.Algorithm], None] = lambda algo: None) -> None:
    """``algo.train()`` raises ``error`` once (``match``: its message), unchanged; afterwards
    the algorithm trains on, counting only completed work, on rows in step with their
    episodes, and a checkpoint saved after the failure resumes exactly.

    ``completes``: the failure comes after the iteration's learning (``on_train_result``), so
    the iteration counts and its result is :attr:`~cairn.Algorithm.last_result`.
    ``whole_iteration``: the iteration samples once (PPO), so a failed one counts nothing;
    off-policy iterations keep the rounds they completed before the failure.
    ``arm``: called after the first iteration, to set the fault up; ``after_fault``: called
    after the first iteration that completes after the failure.
    """
    runner = algo.env_runner_group.local
    assert runner is not None
    algo.train()
    counters, iteration = dict(algo.counters), algo.iteration
    arm()
    with pytest.raises(error, match=match):
        algo.train()
    assert_counters_agree(algo)
    if completes:
        assert algo.iteration == iteration + 1
        assert algo.last_result is not None and algo.last_result["training_iteration"] == iteration + 1
    else:
        assert algo.iteration == iteration
        assert algo.last_result is not None and algo.last_result["training_iteration"] == iteration
        if whole_iteration:
            assert algo.counters == counters, "a failed iteration was counted"
    # A checkpoint saved right after the failure goes on exactly as the live algorithm does.
    assert_resumes_exactly(algo, tmp_path / "at_fault", iterations=1)
    result = algo.last_result
    assert result is not None
    after_fault(algo)
    assert result["training_iteration"] == algo.iteration == iteration + 1 + completes
    assert result["num_env_steps_sampled_lifetime"] > counters["num_env_steps_sampled_lifetime"]
    assert_counters_agree(algo)
    assert_runner_in_step(algo)
    assert_rows_in_step(runner.sample()["default_policy"], LENGTH)
    runner.get_metrics()  # that sample's episodes: not the algorithm's (a checkpoint has none)
    restored = cairn.Algorithm.from_checkpoint(algo.save(tmp_path / "later"))
    try:
        assert_trains_identically(algo, restored)
        assert_runner_in_step(restored)
    finally:
        restored.stop()
