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
