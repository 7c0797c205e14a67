"""The settings SAC and TD3 share (cairn/algorithms/actor_critic_config.py): each config checks
them with the same messages, naming itself, and train_freq sets the fragment length."""

from __future__ import annotations

import pytest

import cairn
from cairn.errors import ConfigError

CONFIGS = [cairn.SACConfig, cairn.TD3Config]


def small(config_class: type[cairn.AlgorithmConfig], **training: object) -> cairn.AlgorithmConfig:
    return config_class().environment("Pendulum-v1").debugging(seed=0).training(
        train_batch_size=100, minibatch_size=32, model={"hidden": [16, 16]},
        num_steps_sampled_before_learning_starts=50, **training)


@pytest.mark.parametrize("config_class", CONFIGS)
@pytest.mark.parametrize(("key", "value", "needle"), [
    ("tau", 0.0, "'tau'=0.0"), ("tau", 1.5, "'tau'=1.5"), ("gradient_steps", 0, "'gradient_steps'=0"),
    ("train_freq", 0, "'train_freq'=0"), ("n_step", 0, "'n_step'=0"),
    ("replay_buffer_config", {"type": "ring"}, "ring"), ("replay_buffer_config", {"size": 10}, "size"),
    ("training_intensity", -1, "'training_intensity'=-1"),
])
def test_invalid_shared_settings_raise_config_error_naming_them(config_class, key, value, needle):
    with pytest.raises(ConfigError, match=needle):
        config_class().training(**{key: value})


@pytest.mark.parametrize("config_class", CONFIGS)
def test_rounds_checks_name_the_algorithm(config_class):
    name = config_class.algo_class_name
    with pytest.raises(ConfigError, match=f"contradicts 'train_freq'=2: {name}"):
        small(config_class, train_freq=2).env_runners(rollout_fragment_length=3).build()
    with pytest.raises(ConfigError, match=f"gradient steps {name} takes"):
        small(config_class, training_intensity=2.0, gradient_steps=3).build()
    with pytest.raises(ConfigError, match=r"'training_intensity'=256.0 and 'gradient_steps'=4 .*Set one"):
        small(config_class, training_intensity=256.0, gradient_steps=4).build()
    assert small(config_class, train_freq=4).get_rollout_fragment_length() == 4


@pytest.mark.parametrize("config_class", CONFIGS)
def test_a_later_learning_start_on_restore_keeps_the_policy_acting_at_random(config_class, tmp_path):
    """``config_overrides={"num_steps_sampled_before_learning_starts": n}`` on restore (say, to
    refill a replay buffer the checkpoint did not store): until ``n`` sampled steps the policy
    acts uniformly at random, as before the first learning start, while the algorithm waits
    (the policy acted with its actor from the stored start on)."""
    import warnings

    import numpy as np

    algo = small(config_class).build()
    try:
        algo.train()  # 100 steps sampled, past the stored start of 50
        path = algo.save(tmp_path / "c")
    finally:
        algo.stop()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # no replay buffer in the checkpoint
        restored = cairn.Algorithm.from_checkpoint(
            path, config_overrides={"num_steps_sampled_before_learning_starts": 10_000})
    try:
        policy = restored.get_policy()
        assert policy.global_timestep == 100
        assert policy.config["initial_random_steps"] == 10_000
        import copy

        uniform = copy.deepcopy(policy.np_random).uniform(-1.0, 1.0, (4, 1)).astype(np.float32)
        actions = policy.compute_raw_actions(np.zeros((4, 3), dtype=np.float32), explore=True)
        np.testing.assert_array_equal(actions, uniform)  # the uniform draws, no actor
    finally:
        restored.stop()


@pytest.mark.parametrize("config_class", [*CONFIGS, cairn.DQNConfig])
def test_replay_minibatches_may_exceed_an_iterations_env_steps(config_class):
    """Off-policy minibatches come from replay, so minibatch_size=64 with train_batch_size=16
    (report every 16 env steps) is a valid config: it was refused as 'larger than
    train_batch_size', a rule of the algorithms that cut minibatches from the iteration's batch."""
    env = "CartPole-v1" if config_class is cairn.DQNConfig else "Pendulum-v1"
    algo = (config_class().environment(env).debugging(seed=0)
            .training(train_batch_size=16, minibatch_size=64, model={"hidden": [8]},
                      num_steps_sampled_before_learning_starts=32).build())
    try:
        algo.train()
        result = algo.train()
        policy = algo.get_policy()
        assert result["num_env_steps_sampled_lifetime"] >= 32 and policy.num_grad_updates > 0
    finally:
        algo.stop()


@pytest.mark.parametrize("config_class", [cairn.PPOConfig, cairn.IMPALAConfig])
def test_minibatches_cut_from_the_train_batch_may_not_exceed_it(config_class):
    with pytest.raises(ConfigError, match=r"'minibatch_size'=64 is larger than 'train_batch_size'=16"):
        config_class().environment("CartPole-v1").training(train_batch_size=16, minibatch_size=64).validate()
