"""DQN learns CartPole-v1: greedy return >= 475 within 50k env steps with a fixed seed."""

from __future__ import annotations

import pytest

from cairn import DQNConfig
from tests.helpers import learning_seed


@pytest.mark.slow
def test_dqn_solves_cartpole_within_50k_steps() -> None:
    # The defaults (double Q, dueling, rl-baselines3-zoo's CartPole schedule) with seed 1.
    algo = DQNConfig().environment("CartPole-v1").debugging(seed=learning_seed(1)).build()
    best = 0.0
    try:
        while algo.counters["num_env_steps_sampled_lifetime"] < 50_000:
            result = algo.train()
            if result["num_env_steps_sampled_lifetime"] >= 10_000 and result["training_iteration"] % 2 == 0:
                best = max(best, algo.evaluate()["episode_return_mean"])
                if best >= 475:
                    break
    finally:
        algo.stop()
    assert best >= 475, f"greedy evaluation return reached only {best} in 50k env steps"
