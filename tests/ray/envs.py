"""Environments for the Ray tests, importable by the runners' worker processes."""

from __future__ import annotations

import os
import time
from typing import Any

import gymnasium as gym


class FlakyCartPole(gym.Wrapper):
    """CartPole that can cost time per step (``step_sleep_s``) and raise once in ``step``.

    ``fail_marker``: a file path; the first ``step`` (after ``fail_after_steps`` steps of this
    env) of any process that finds no file there creates it and raises, so exactly one failure
    happens across all runners, restarts and restored Tune trials.
    """

    def __init__(self, env_config: dict[str, Any]) -> None:
        super().__init__(gym.make("CartPole-v1"))
        self.step_sleep_s = float(env_config.get("step_sleep_s", 0.0))
        self.fail_marker = env_config.get("fail_marker")
        self.fail_after_steps = int(env_config.get("fail_after_steps", 0))
        self.steps = 0

    def _claim_the_failure(self) -> bool:
        """Create the marker file if no process has: exactly one caller gets True. (An
        exists-then-write check let two runners stepping at once both fail.)"""
        try:
            fd = os.open(self.fail_marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            return False
        with os.fdopen(fd, "w") as f:
            f.write(str(os.getpid()))
        return True

    def step(self, action: Any) -> Any:
        self.steps += 1
        if self.fail_marker and self.steps > self.fail_after_steps and self._claim_the_failure():
            raise RuntimeError("FlakyCartPole: the step that was told to fail")
        if self.step_sleep_s:
            time.sleep(self.step_sleep_s)
        return self.env.step(action)


def make_flaky_cartpole(env_config: dict[str, Any]) -> FlakyCartPole:
    return FlakyCartPole(env_config)
