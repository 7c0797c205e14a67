"""PPO with a Keras policy learns CartPole as the torch policy does (tests/test_learning.py)."""

import pytest

import cairn


@pytest.mark.slow
def test_ppo_with_a_keras_policy_solves_cartpole_within_100k_steps():
    algo = cairn.PPOConfig().environment("CartPole-v1").framework("keras").debugging(seed=0).build()
    best = 0.0
    while algo.counters["num_env_steps_sampled_lifetime"] < 100_000:
        algo.train()
        if algo.iteration % 3 == 0:
            best = max(best, algo.evaluate()["episode_return_mean"])
            if best >= 475:
                break
    assert best >= 475, f"greedy return {best} after {algo.counters['num_env_steps_sampled_lifetime']} steps"
