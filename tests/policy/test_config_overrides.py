"""``Policy.from_checkpoint(..., config_overrides=...)`` (issue 36, "Also"): the policy's config keys,
set as ``Algorithm.from_checkpoint`` sets them (a ``model`` dict merges, other values replace),
for Policy checkpoints and for the policies of an Algorithm checkpoint; unknown keys are a
ConfigError naming the key and the valid ones."""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

import cairn
from cairn.algorithms.dqn import DQNPolicy
from cairn.errors import CheckpointConfigError, CheckpointFormatError, ConfigError
from tests.helpers import small_ppo
from tests.models.nets import TwoHeads

OBS, ACT = gym.spaces.Box(-1, 1, (4,)), gym.spaces.Discrete(2)
ROWS = np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4)


class MainNet(TwoHeads):
    """Stands for a model defined in the script run as ``__main__`` (its reference is
    ``'__main__:MainNet'``; another process cannot import it)."""


def _saved_with_main_model(monkeypatch: pytest.MonkeyPatch,
                           tmp_path: Path) -> tuple[cairn.Policy, Path, Path]:
    """A policy with the ``__main__`` model saved alone and inside an algorithm; then the class
    is gone from ``__main__``, as in a new process."""
    monkeypatch.setattr(MainNet, "__module__", "__main__")
    with monkeypatch.context() as in_main, warnings.catch_warnings():
        in_main.setattr(sys.modules["__main__"], "MainNet", MainNet, raising=False)
        warnings.simplefilter("ignore")  # the __main__ warnings have their own tests
        algo = small_ppo(model={"custom_model": MainNet, "custom_model_config": {"width": 8}}).build()
        policy = algo.get_policy()
        assert policy.config["model"]["custom_model"] == "__main__:MainNet"
        policy.export_checkpoint(tmp_path / "policy")
        algo.save(tmp_path / "algo")
        algo.stop()
    return policy, tmp_path / "policy", tmp_path / "algo"


def test_a_main_model_comes_back_through_config_overrides(monkeypatch: pytest.MonkeyPatch,
                                                          tmp_path: Path) -> None:
    policy, policy_dir, algo_dir = _saved_with_main_model(monkeypatch, tmp_path)
    with pytest.raises(CheckpointConfigError, match=r"__main__.*config_overrides"):
        cairn.Policy.from_checkpoint(policy_dir)
    with pytest.raises(CheckpointConfigError, match=r"__main__.*config_overrides"):
        cairn.Policy.from_checkpoint(algo_dir)
    overrides = {"model": {"custom_model": TwoHeads}}
    alone = cairn.Policy.from_checkpoint(policy_dir, config_overrides=overrides)
    from_algo = cairn.Policy.from_checkpoint(algo_dir, config_overrides=overrides)
    subset = cairn.Policy.from_checkpoint(algo_dir, policy_ids="default_policy", config_overrides=overrides)
    typed = cairn.Policy.from_policy_checkpoint(policy_dir, config_overrides=overrides)
    assert isinstance(from_algo, dict) and isinstance(alone, cairn.Policy)
    for restored in (alone, from_algo["default_policy"], subset["default_policy"], typed):
        assert type(restored.model) is TwoHeads
        # Only the class changed: the rest of the stored model config and the weights are kept.
        stored_model = {**policy.config["model"], "custom_model": "tests.models.nets:TwoHeads"}
        assert restored.config["model"] == stored_model
        for name, value in policy.get_weights().items():
            np.testing.assert_array_equal(restored.get_weights()[name], value)
        np.testing.assert_array_equal(restored.compute_action_inputs(ROWS),
                                      policy.compute_action_inputs(ROWS))


def test_an_algorithm_restored_with_a_model_class_stores_its_reference_and_saves(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # The class given by config_overrides stayed in the restored algorithm's config (training()
    # stores a class's reference): the algorithm trained, and its first save failed ("value at
    # 'config/model/custom_model' has type type, which is not state data").
    _, _, algo_dir = _saved_with_main_model(monkeypatch, tmp_path)
    algo = cairn.Algorithm.from_checkpoint(algo_dir, config_overrides={"model": {"custom_model": TwoHeads}})
    try:
        assert algo.config.model["custom_model"] == "tests.models.nets:TwoHeads"
        assert type(algo.get_policy().model) is TwoHeads
        algo.train()
        again = algo.save(tmp_path / "again")
    finally:
        algo.stop()
    restored = cairn.Algorithm.from_checkpoint(again)  # no override needed any more
    try:
        assert type(restored.get_policy().model) is TwoHeads
    finally:
        restored.stop()


def test_overrides_replace_values_and_the_restored_policy_uses_them(tmp_path: Path) -> None:
    policy = DQNPolicy(OBS, ACT, {"model": {"hidden": [8]}, "lr": 1e-3}, seed=0)
    policy.optimizer  # noqa: B018  (built, so that its state is saved)
    policy.export_checkpoint(tmp_path / "p")
    restored = cairn.Policy.from_checkpoint(
        tmp_path / "p", config_overrides={"lr": 5e-4, "epsilon": [[0, 0.5]]})
    assert isinstance(restored, DQNPolicy)
    assert restored.config["lr"] == 5e-4 and restored.config["epsilon"] == [[0, 0.5]]
    assert [g["lr"] for g in restored.optimizer.param_groups] == [5e-4]
    assert restored.config["model"] == policy.config["model"]
    with pytest.raises(ConfigError, match="epsilon"):  # each value is checked as the class checks it
        cairn.Policy.from_checkpoint(tmp_path / "p", config_overrides={"epsilon": [[0, 2.0]]})


def test_unknown_or_invalid_keys_are_config_errors_naming_the_valid_ones(tmp_path: Path) -> None:
    cairn.Policy(OBS, ACT, {"model": {"hidden": [8]}}, seed=0).export_checkpoint(tmp_path / "p")
    algo = small_ppo(model={"hidden": [8]}).build()
    algo.save(tmp_path / "a")
    algo.stop()
    for path in (tmp_path / "p", tmp_path / "a"):
        with pytest.raises(ConfigError, match=r"'learning_rate'.*\['lr', 'model', 'observation_filter'\]"):
            cairn.Policy.from_checkpoint(path, config_overrides={"learning_rate": 1e-4})
        with pytest.raises(ConfigError, match=r"Unknown model keys \['hiden'\]"):
            cairn.Policy.from_checkpoint(path, config_overrides={"model": {"hiden": [8]}})
        with pytest.raises(ConfigError, match="'model' must be a dict"):
            cairn.Policy.from_checkpoint(path, config_overrides={"model": [8]})


def test_an_override_that_reshapes_the_network_is_refused_not_ignored(tmp_path: Path) -> None:
    """The stored weights cannot fill another network: an error, never a policy silently built
    from the stored config while reporting the overridden one. (It was the weight check's
    CheckpointFormatError; the restore now refuses the setting itself, before the weights, as
    Algorithm.from_checkpoint does: a RestoredSettingError naming it.)"""
    from cairn.errors import RestoredSettingError

    cairn.Policy(OBS, ACT, {"model": {"hidden": [8]}}, seed=0).export_checkpoint(tmp_path / "p")
    with pytest.raises(RestoredSettingError, match=r"'model\.hidden'=\[16\].*model\.hidden=\[8\]"):
        cairn.Policy.from_checkpoint(tmp_path / "p", config_overrides={"model": {"hidden": [16]}})


@pytest.mark.parametrize("override", [{"activation": "relu"}, {"custom_model": TwoHeads}])
def test_a_model_override_the_network_was_not_built_with_is_refused_as_by_an_algorithm_restore(
        tmp_path: Path, override: dict) -> None:
    """config_overrides={"model": {"activation": "relu"}} on a tanh policy restored the stored
    weights into a relu network with no error (its greedy actions changed), while
    Algorithm.from_checkpoint refused the same override. Both follow one rule now: a model
    setting other than the stored network's is a RestoredSettingError naming it, for Policy and
    Algorithm checkpoints; a custom model class for a built-in network too (its weights are the
    built-in network's). The stored value given again restores the same policy."""
    from cairn.errors import RestoredSettingError

    algo = small_ppo(model={"hidden": [8], "activation": "tanh"}).build()
    policy = algo.get_policy()
    policy.export_checkpoint(tmp_path / "p")
    algo.save(tmp_path / "a")
    algo.stop()
    name = next(iter(override))
    for path in (tmp_path / "p", tmp_path / "a"):
        with pytest.raises(RestoredSettingError, match=rf"'model\.{name}'=.*model\.{name}=") as raised:
            cairn.Policy.from_checkpoint(path, config_overrides={"model": override})
        assert raised.value.setting == f"model.{name}" and str(path) in str(raised.value)
        with pytest.raises(ConfigError, match=rf"'model\.{name}'="):  # the algorithm's own refusal
            cairn.Algorithm.from_checkpoint(path if path.name == "a" else tmp_path / "a",
                                            config_overrides={"model": override})
        same = cairn.Policy.from_checkpoint(path, config_overrides={"model": {"activation": "tanh"}})
        same = same["default_policy"] if isinstance(same, dict) else same
        assert same.config["model"] == policy.config["model"]
        np.testing.assert_array_equal(same.compute_action_inputs(ROWS), policy.compute_action_inputs(ROWS))


def test_an_observation_filter_override_of_another_kind_is_a_config_error_naming_the_fix(
        tmp_path: Path) -> None:
    """Another filter than the stored one was a CheckpointFormatError wrapping the filter check's
    bare ValueError ("State has observation filter ...") with no fix, as if the checkpoint were
    damaged: it is a ConfigError (RestoredSettingError) naming the setting, the stored filter and
    the fix, as Algorithm.from_checkpoint words the same refusal. The same filter still restores."""
    from cairn.errors import RestoredSettingError

    policy = cairn.Policy(OBS, ACT, {"model": {"hidden": [8]}, "observation_filter": "MeanStdFilter"}, seed=0)
    policy.process_observations(ROWS, update=True)
    policy.export_checkpoint(tmp_path / "p")
    algo = small_ppo(model={"hidden": [8]}).env_runners(observation_filter="MeanStdFilter").build()
    algo.save(tmp_path / "a")
    algo.stop()
    for path in (tmp_path / "p", tmp_path / "a"):
        with pytest.raises(ConfigError, match=r"'observation_filter'='NoFilter'.*'MeanStdFilter'") as raised:
            cairn.Policy.from_checkpoint(path, config_overrides={"observation_filter": "NoFilter"})
        assert isinstance(raised.value, RestoredSettingError)
        assert not isinstance(raised.value, CheckpointFormatError)  # the checkpoint is fine
        assert "Fix: restore without that override" in str(raised.value) and str(path) in str(raised.value)
        same = cairn.Policy.from_checkpoint(path, config_overrides={"observation_filter": "MeanStdFilter"})
        same = same["default_policy"] if isinstance(same, dict) else same  # an Algorithm checkpoint's
        assert same.observation_filter.name == "MeanStdFilter"
        if path == tmp_path / "p":  # the stored statistics, as saved
            np.testing.assert_array_equal(same.process_observations(ROWS, update=False),
                                          policy.process_observations(ROWS, update=False))
