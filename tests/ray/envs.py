"""Environments for the Ray tests, importable by the runners' worker processes."""

from __future__ import annotations

import os
import time
from typing import Any

import gymnasium as gym


class FlakyCartPole(gym.Wrapper):
    """CartPole that can cost time per step (``step_sleep_s``) and raise in ``step``.

    ``fail_marker``: a file path; the first ``step`` (after ``fail_after_steps`` steps of this
    env) of any process that finds no file there creates it and raises, so exactly one failure
    happens across all runners, restarts and restored Tune trials. ``num_failures`` (default
    1) such failures happen in all, each claiming its own file (``fail_marker``, then
    ``fail_marker.2``, ...), all with the same message. ``refuse_to_build_if``: a file path;
    while a file is there, building the env raises.
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

    def step(self, action: Any) -> Any:
        self.steps += 1
        if self.fail_marker and self.steps > self.fail_after_steps and self._claim_the_failure():
            raise RuntimeError("FlakyCartPole: the step that was told to fail")
        if self.step_sleep_s:
            time.sleep(self.step_sleep_s)
        return self.env.step(action)


def make_flaky_cartpole(env_config: dict[str, Any]) -> FlakyCartPole:
    return FlakyCartPole(env_config)
