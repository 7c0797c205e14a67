"""Torch's global generator in learn calls: a user's ``Dropout`` draws its masks from it, so
each learn call seeds it from the policy's training state (cairn.learners.actor.learning):
a seeded run repeats whatever the process drew before, a restored run goes on as the
uninterrupted one, and the caller's generator is handed back as it was."""

import numpy as np
import torch

import cairn
from cairn.learners.actor import learning, learning_seed
from tests.models.nets import NoisyActor, NoisyHeads, SmallCritic


def ppo_config() -> cairn.PPOConfig:
    config = (cairn.PPOConfig().environment("CartPole-v1")
              .training(train_batch_size=64, minibatch_size=32, num_epochs=1,
                        model={"custom_model": NoisyHeads})
              .env_runners(rollout_fragment_length=64).debugging(seed=3))
    return config  # type: ignore[return-value]


def sac_config() -> cairn.SACConfig:
    config = (cairn.SACConfig().environment("Pendulum-v1")
              .training(train_batch_size=16, minibatch_size=16, num_steps_sampled_before_learning_starts=16,
                        model={"custom_model": NoisyActor, "custom_q_model": SmallCritic})
              .debugging(seed=2))
    return config  # type: ignore[return-value]


def trained_weights(config: cairn.AlgorithmConfig, iterations: int) -> dict[str, np.ndarray]:
    algo = config.build()
    try:
        for _ in range(iterations):
            algo.train()
        return algo.get_policy().get_weights()
    finally:
        algo.stop()


def assert_same_weights(got: dict[str, np.ndarray], want: dict[str, np.ndarray]) -> None:
    assert got.keys() == want.keys()
    for name, value in want.items():
        np.testing.assert_array_equal(got[name], value, err_msg=name)


def test_a_seeded_run_with_dropout_repeats_whatever_the_process_drew_before() -> None:
    for make_config in (ppo_config, sac_config):
        torch.manual_seed(0)
        first = trained_weights(make_config(), 1)
        torch.manual_seed(1)  # as another algorithm or a user's code would leave it
        torch.rand(7)
        assert_same_weights(trained_weights(make_config(), 1), first)


def test_a_restored_run_with_dropout_goes_on_as_the_uninterrupted_one(tmp_path) -> None:
    want = trained_weights(ppo_config(), 2)
    algo = ppo_config().build()
    try:
        algo.train()
        path = algo.save(str(tmp_path / "ckpt"))
    finally:
        algo.stop()
    torch.rand(5)  # the global generator moved since: the restored run must not read it
    restored = cairn.Algorithm.from_checkpoint(path)
    try:
        restored.train()
        assert_same_weights(restored.get_policy().get_weights(), want)
    finally:
        restored.stop()


def test_learning_hands_back_the_global_generator_and_leaves_the_policys_alone() -> None:
    policy = cairn.Policy(*_spaces(), {"model": {"custom_model": NoisyHeads}}, seed=0)
    before, own = torch.get_rng_state(), policy.generator.get_state()
    seed = learning_seed(policy)
    try:
        with learning(policy):
            assert torch.initial_seed() == seed
            torch.rand(3)
            raise KeyError("a learn function raising")
    except KeyError:
        pass
    assert torch.equal(torch.get_rng_state(), before)
    assert torch.equal(policy.generator.get_state(), own)
    assert learning_seed(policy) == seed  # a function of the training state only
    policy.num_grad_updates += 1
    assert learning_seed(policy) != seed  # the next learn call draws other masks


def _spaces():
    import gymnasium as gym
    return gym.spaces.Box(-1.0, 1.0, (4,), np.float32), gym.spaces.Discrete(2)
