"""Env runners act with one BLAS thread: numpy's small matrix products must not wait for a
second core (cairn/env_runner/blas_threads.py)."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
from threadpoolctl import threadpool_info, threadpool_limits

from tests.helpers import small_ppo


class _RecordBlasThreads(gym.Wrapper):  # type: ignore[type-arg]
    seen: set[int] = set()

    def step(self, action: Any) -> Any:
        blas = [lib for lib in threadpool_info() if lib["user_api"] == "blas"]
        _RecordBlasThreads.seen |= {lib["num_threads"] for lib in blas}
        return self.env.step(action)


def make_recorded_cartpole(env_config: dict[str, Any]) -> gym.Env:  # type: ignore[type-arg]
    return _RecordBlasThreads(gym.make("CartPole-v1"))


def test_sampling_and_evaluation_use_one_blas_thread() -> None:
    # Two threads outside sampling on any machine (a 1-core one would start with one anyway).
    with threadpool_limits(limits=2, user_api="blas"):
        before = {lib["filepath"]: lib["num_threads"] for lib in threadpool_info()}
        assert 2 in before.values()
        _RecordBlasThreads.seen = set()
        algo = small_ppo().environment(make_recorded_cartpole).build()
        algo.train()
        algo.evaluate(1)
        assert _RecordBlasThreads.seen == {1}
        # Outside sampling the process keeps its own settings.
        assert {lib["filepath"]: lib["num_threads"] for lib in threadpool_info()} == before
