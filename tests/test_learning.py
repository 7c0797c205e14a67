"""Learning runs: slow, fixed seeds, generous budgets."""

import pytest

import cairn
from tests.helpers import learning_seed, small_ma_ppo


@pytest.mark.slow
# keras: the same MLP as Keras layers (docs/keras.md)
@pytest.mark.parametrize("framework", ["torch", "keras"])
def test_ppo_solves_cartpole_within_100k_steps(framework):
    algo = (cairn.PPOConfig().environment("CartPole-v1").framework(framework)
            .debugging(seed=learning_seed(0)).build())
    best = 0.0
    while algo.counters["num_env_steps_sampled_lifetime"] < 100_000:
        algo.train()
        if algo.iteration % 3 == 0:
            best = max(best, algo.evaluate()["episode_return_mean"])
            if best >= 475:
                break
    assert best >= 475, f"greedy return {best} after {algo.counters['num_env_steps_sampled_lifetime']} steps"


@pytest.mark.slow
def test_multi_agent_ppo_improves_both_policies():
    algo = small_ma_ppo(2, train_batch_size=1024, minibatch_size=128, num_epochs=6).debugging(
        seed=learning_seed(0)).build()
    first = algo.train()["policy_episode_return_mean"]
    for _ in range(11):
        last = algo.train()["policy_episode_return_mean"]
    for pid in ("p0", "p1"):
        assert last[pid] > 1.5 * first[pid], (pid, first, last)
