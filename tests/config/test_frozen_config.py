"""A built algorithm's config refuses the settings the algorithm took when it was built: they
were silently ignored by training (the policies, runners and learners hold them) but used by a
restore from its checkpoints, so a resumed run did not train on as the run did. The settings
read each time they are used (checkpointing, evaluation, fault tolerance, resources) stay
changeable."""

from __future__ import annotations

import pytest

import cairn
from cairn import APPOConfig, DQNConfig, IMPALAConfig, PPOConfig, SACConfig, TD3Config
from cairn.config.algorithm_config import AlgorithmConfig
from cairn.errors import ConfigError
from tests.helpers import assert_resumes_exactly, small_ppo


@pytest.fixture
def algo():
    built = small_ppo(lr=1e-3).build()
    yield built
    built.stop()


def _optimizer_lrs(algo: cairn.Algorithm) -> list[float]:
    return [group["lr"] for group in algo.get_policy().optimizer.param_groups]


@pytest.mark.parametrize("change, key", [
    (lambda c: c.training(lr=1e-5), "lr"),
    (lambda c: setattr(c, "lr", 1e-5), "lr"),
    (lambda c: c.training(gamma=0.5, lr=1e-5), "gamma"),
    (lambda c: c.training(model={"hidden": [8]}), "model"),
    (lambda c: c.env_runners(observation_filter="MeanStdFilter"), "observation_filter"),
    (lambda c: c.env_runners(num_envs_per_env_runner=2), "num_envs_per_env_runner"),
    (lambda c: setattr(c, "train_batch_size", 64), "train_batch_size"),
    (lambda c: c.debugging(seed=1), "seed"),
    (lambda c: c.multi_agent(policies_to_train=[]), "policies_to_train"),
    (lambda c: c.callbacks(None), "callbacks_class"),
])
def test_a_setting_taken_at_build_cannot_change_and_the_run_resumes_exactly(algo, tmp_path, change, key):
    algo.train()
    before = algo.config.to_dict()
    message = f"Config {key!r} cannot change after the algorithm was built"
    with pytest.raises(ConfigError, match=message) as err:
        change(algo.config)
    assert "Fix:" in str(err.value) and "algo.config.copy()" in str(err.value)
    assert algo.config.to_dict() == before  # nothing set, not even the values before the refused one
    assert _optimizer_lrs(algo) == [1e-3]
    # Before, config.training(lr=1e-5) trained on at 1e-3 but its checkpoint restored at 1e-5.
    assert_resumes_exactly(algo, tmp_path / "ckpt", iterations=1)


def test_the_lr_error_names_the_policy_level_fix(algo):
    with pytest.raises(ConfigError, match=r"set_learning_rate\(lr\)") as err:
        algo.config.training(lr=1e-5)
    assert "config_overrides={'lr': ...}" in str(err.value)


def test_settings_read_when_used_stay_changeable(algo, tmp_path):
    algo.config.checkpointing(export_native_model_files=True)
    algo.config.evaluation(evaluation_interval=1, evaluation_duration=1)
    algo.config.resources(torch_num_threads=1)
    algo.config.fault_tolerance(sample_timeout_s=120.0)
    algo.config.evaluation_duration = 2  # an attribute as well as the fluent method
    assert algo.train()["evaluation"]["num_episodes"] == 2  # read by this iteration
    path = algo.save(tmp_path / "ckpt")
    assert (tmp_path / "ckpt" / "policies" / "default_policy" / "model").is_dir()
    assert cairn.Algorithm.from_checkpoint(path).config.evaluation_duration == 2


def test_a_copy_of_a_built_config_and_the_config_built_from_are_not_frozen(algo):
    changed = algo.config.copy().training(lr=1e-5)
    assert changed.lr == 1e-5 and not changed.is_frozen and algo.config.is_frozen
    other = changed.build()
    try:
        assert _optimizer_lrs(other) == [1e-5]
    finally:
        other.stop()
    config = small_ppo()
    config.build().stop()
    assert config.training(lr=1e-4).lr == 1e-4  # the algorithm froze its own copy


def test_a_config_after_add_policy_stays_frozen(algo):
    other = cairn.Policy.from_state(algo.get_policy().get_state())  # a copy, as a frozen opponent
    algo.add_policy("other", other,
                    policy_mapping_fn={"default_agent": "default_policy"})
    assert "other" in algo.config.policies
    with pytest.raises(ConfigError, match="Config 'lr' cannot change"):
        algo.config.lr = 1e-5


@pytest.mark.parametrize("config_cls", [PPOConfig, IMPALAConfig, APPOConfig, DQNConfig, SACConfig, TD3Config])
def test_a_frozen_config_refuses_exactly_the_settings_outside_the_live_sections(config_cls):
    config = config_cls()
    config.freeze()
    for key, field in config_cls.FIELDS.items():
        value = getattr(config, key)
        if field.section in AlgorithmConfig.LIVE_SECTIONS:
            setattr(config, key, value)
        else:
            with pytest.raises(ConfigError, match=f"Config {key!r} cannot change"):
                setattr(config, key, value)
