"""SAC learns Pendulum-v1: greedy return >= -400 within 20k env steps with a fixed seed.

The issue's bar is -200 for the median of 3 seeds (measured in docs/sac.md). This test keeps
CI's 2-core budget: SB3's defaults but 64x64 networks and rl-baselines3-zoo's Pendulum
learning rate (1e-3); the 256x256 default runs about 40-100 env steps/s here, too slow for a
20k-step test. Seed 0 reaches about -145 after 4k steps.
"""

from __future__ import annotations

import pytest

from cairn import SACConfig
from tests.helpers import learning_seed


@pytest.mark.slow
def test_sac_swings_up_pendulum_within_20k_steps() -> None:
    algo = (SACConfig().environment("Pendulum-v1")
            .training(lr=1e-3, model={"hidden": [64, 64]})
            .resources(torch_num_threads=1).debugging(seed=learning_seed(0)).build())
    best = float("-inf")
    try:
        while algo.counters["num_env_steps_sampled_lifetime"] < 20_000:
            result = algo.train()  # 1000 env steps
            if result["num_env_steps_sampled_lifetime"] >= 3_000:
                best = max(best, algo.evaluate()["episode_return_mean"])
                if best >= -400:
                    break
    finally:
        algo.stop()
    assert best >= -400, f"greedy evaluation return reached only {best:.1f} in 20k env steps"
