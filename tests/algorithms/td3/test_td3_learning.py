"""TD3 learns Pendulum-v1: greedy return >= -250 within 30k env steps with a fixed seed (the
issue's bar, measured on seeds 0-2 in docs/td3.md).

SB3's TD3 defaults (lr 1e-3, batch 256, tau 0.005, policy delay 2, target smoothing 0.2/0.5,
exploration noise 0.1, warm-up 100 steps) except the networks: 64x64 instead of 400x300, which
run too slowly on CI's 2 cores for a 30k-step test. The run stops at the first greedy
evaluation (10 episodes) at or above the bar.
"""

from __future__ import annotations

import pytest

from cairn import TD3Config
from tests.helpers import learning_seed


@pytest.mark.slow
def test_td3_swings_up_pendulum_within_30k_steps() -> None:
    algo = (TD3Config().environment("Pendulum-v1")
            .training(model={"hidden": [64, 64]})
            .resources(torch_num_threads=1).debugging(seed=learning_seed(0)).build())
    best = float("-inf")
    try:
        while algo.counters["num_env_steps_sampled_lifetime"] < 30_000:
            result = algo.train()  # 1000 env steps
            if result["num_env_steps_sampled_lifetime"] >= 3_000:
                best = max(best, algo.evaluate()["episode_return_mean"])
                if best >= -250:
                    break
    finally:
        algo.stop()
    assert best >= -250, f"greedy evaluation return reached only {best:.1f} in 30k env steps"
