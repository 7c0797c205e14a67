"""Environments for the Ray tests, importable by the runners' worker processes."""

from __future__ import annotations

import os
import time
from typing import Any

import gymnasium as gym
import numpy as np


class FlakyCartPole(gym.Wrapper):
    """CartPole that can cost time per step (``step_sleep_s``) and raise in ``step``.

    ``fail_marker``: a file path; the first ``step`` (after ``fail_after_steps`` steps of this
    env) of any process that finds no file there creates it and raises, so exactly one failure
    happens across all runners, restarts and restored Tune trials. ``num_failures`` (default
    1) such failures happen in all, each claiming its own file (``fail_marker``, then
    ``fail_marker.2``, ...), all with the same message. ``refuse_to_build_if``: a file path;
    while a file is there, building the env raises.

    ``hold_file``: a file path, for tests that kill a runner mid-fragment without guessing
    when it is sampling: a process whose pid is a line of that file (written by the test,
    :func:`hold`), from its step after ``hold_after_steps`` steps of this env on, creates
    ``<hold_file>.held.<pid>`` and blocks in ``step`` until it is killed (a runner built later,
    with a new pid, steps freely). It blocks at most ``HOLD_LIMIT_S`` seconds and then raises,
    so a test that never kills it fails instead of hanging.
    """

    def __init__(self, env_config: dict[str, Any]) -> None:
        refuse = env_config.get("refuse_to_build_if")
        if refuse and os.path.exists(refuse):
            raise RuntimeError("FlakyCartPole: told not to build")
        super().__init__(gym.make("CartPole-v1"))
        self.step_sleep_s = float(env_config.get("step_sleep_s", 0.0))
        self.fail_marker = env_config.get("fail_marker")
        self.fail_after_steps = int(env_config.get("fail_after_steps", 0))
        self.num_failures = int(env_config.get("num_failures", 1))
        self.hold_file = env_config.get("hold_file")
        self.hold_after_steps = int(env_config.get("hold_after_steps", 0))
        self.steps = 0

    def _claim_the_failure(self) -> bool:
        """Create the marker file if no process has: exactly one caller gets True. (An
        exists-then-write check let two runners stepping at once both fail.)"""
        markers = [self.fail_marker] + [f"{self.fail_marker}.{k}" for k in range(2, self.num_failures + 1)]
        for marker in markers:
            try:
                fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
            except FileExistsError:
                continue
            with os.fdopen(fd, "w") as f:
                f.write(str(os.getpid()))
            return True
        return False

    def _hold_if_told(self) -> None:
        if not self.hold_file or self.steps <= self.hold_after_steps or not os.path.exists(self.hold_file):
            return
        with open(self.hold_file) as f:
            if str(os.getpid()) not in f.read().split():
                return
        with open(held_marker(self.hold_file, os.getpid()), "w") as f:
            f.write(str(self.steps))
        deadline = time.monotonic() + HOLD_LIMIT_S
        while time.monotonic() < deadline:
            time.sleep(0.05)
        raise RuntimeError(f"FlakyCartPole: held {HOLD_LIMIT_S:g} s and nobody killed this runner")

    def step(self, action: Any) -> Any:
        self.steps += 1
        self._hold_if_told()
        if self.fail_marker and self.steps > self.fail_after_steps and self._claim_the_failure():
            raise RuntimeError("FlakyCartPole: the step that was told to fail")
        if self.step_sleep_s:
            time.sleep(self.step_sleep_s)
        return self.env.step(action)


#: How long a held runner waits to be killed before it raises (FlakyCartPole's ``hold_file``).
HOLD_LIMIT_S = 300.0


def held_marker(hold_file: str | os.PathLike, pid: int) -> str:
    """The file a runner held by ``hold_file`` creates once it blocks."""
    return f"{os.fspath(hold_file)}.held.{pid}"


def hold(hold_file: str | os.PathLike, *pids: int) -> None:
    """Tell the runner processes ``pids`` to block in their next step past ``hold_after_steps``
    (FlakyCartPole's ``hold_file``)."""
    with open(hold_file, "w") as f:
        f.write("\n".join(str(pid) for pid in pids))


def wait_until_held(hold_file: str | os.PathLike, *pids: int, timeout_s: float = 120.0) -> None:
    """Return once every runner process of ``pids`` blocks in ``step`` (see :func:`hold`)."""
    deadline = time.monotonic() + timeout_s
    while not all(os.path.exists(held_marker(hold_file, pid)) for pid in pids):
        if time.monotonic() > deadline:
            raise AssertionError(f"runners {pids} were not held within {timeout_s:g} s")
        time.sleep(0.02)


def make_flaky_cartpole(env_config: dict[str, Any]) -> FlakyCartPole:
    return FlakyCartPole(env_config)


class GlobalRandomEnv(gym.Env):
    """Draws its observations from numpy's and torch's global generators (as much user code
    does), not from its own ``np_random``."""

    observation_space = gym.spaces.Box(0.0, 1.0, (4,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def _draw(self) -> np.ndarray:
        import torch

        return np.concatenate([np.random.random(2), torch.rand(2).numpy()]).astype(np.float32)

    def reset(self, *, seed: int | None = None,
              options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        return self._draw(), {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict]:
        return self._draw(), 0.0, False, False, {}


def global_random_creator(env_config: dict[str, Any]) -> gym.Env:
    return GlobalRandomEnv()
