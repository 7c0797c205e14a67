"""Dict settings merge one level deep, as RLlib's ``training(model=...)`` updates the model dict
(``self.model.update(model)``): a nested dict inside one (``model.custom_model_config``) is a
value, so a new one replaces the old whole. The merge was recursive, so a second model's
``custom_model_config`` silently kept the first one's keys: ``{"width": 32}`` then
``{"heads": 4}`` gave the model ``{"width": 32, "heads": 4}``. Each entry point that merges a
dict setting is checked here or beside its own tests (tests/ray/test_tune.py,
tests/cli/test_train_run.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

import cairn
from cairn.config.restore import restored_config
from cairn.errors import RestoredSettingError
from tests.helpers import small_ppo
from tests.models.nets import TwoHeads


class OtherHeads(TwoHeads):
    """A second model class, as when a config switches from one custom model to another."""


def test_training_replaces_a_nested_dict_of_model_whole():
    config = (cairn.PPOConfig()
              .training(model={"custom_model": TwoHeads, "custom_model_config": {"width": 32}})
              .training(model={"custom_model": OtherHeads, "custom_model_config": {"heads": 4}}))
    assert config.model["custom_model_config"] == {"heads": 4}
    assert config.model["custom_model"].endswith(":OtherHeads")
    assert config.model["activation"] == cairn.PPOConfig().model["activation"]  # one level: kept
    # An empty custom_model_config is the model's config too, not "no change".
    assert config.training(model={"custom_model_config": {}}).model["custom_model_config"] == {}


def test_a_policy_spec_model_replaces_a_nested_dict_of_the_shared_model():
    config = small_ppo(model={"custom_model": TwoHeads, "custom_model_config": {"width": 32}}).multi_agent(
        policies={"a": cairn.PolicySpec(config={"model": {"custom_model_config": {"heads": 4}}}),
                  "b": cairn.PolicySpec()},
        policy_mapping_fn={"agent_0": "a", "agent_1": "b"})
    a, b = config.policy_config("a")["model"], config.policy_config("b")["model"]
    assert a["custom_model_config"] == {"heads": 4}
    assert a["custom_model"] == b["custom_model"]  # the keys the spec does not name stay
    assert b["custom_model_config"] == {"width": 32}


def _saved(tmp_path: Path) -> tuple[cairn.Algorithm, Path]:
    model = {"custom_model": TwoHeads, "custom_model_config": {"width": 8, "depth": 2}}
    algo = small_ppo(model=model).build()
    return algo, algo.save(tmp_path / "c")


def test_a_restore_override_replaces_a_nested_dict_of_the_stored_model(tmp_path):
    """config_overrides={"model": {"custom_model_config": {"width": 8}}} took the stored
    {"width": 8, "depth": 2} with no error: the restored config kept a key the override left out.
    The restored config now holds the override's dict, which the network restored with
    {"depth": 2} was not built with, so the restore is refused (RestoredSettingError, a
    ConfigError naming the setting), as for any model setting the network was not built with."""
    algo, path = _saved(tmp_path)
    override = {"model": {"custom_model_config": {"width": 8}}}
    config = restored_config(algo.get_state(), None, None, None, override)
    assert config.model["custom_model_config"] == {"width": 8}
    assert config.model["custom_model"] == algo.config.model["custom_model"]
    with pytest.raises(cairn.errors.ConfigError, match="custom_model_config"):
        cairn.Algorithm.from_checkpoint(path, config_overrides=override)
    with pytest.raises(RestoredSettingError, match="custom_model_config"):
        cairn.Algorithm.from_state(algo.get_state(), config_overrides=override)
    same = {"model": {"custom_model_config": {"width": 8, "depth": 2}}}  # the stored one: accepted
    restored = cairn.Algorithm.from_checkpoint(path, config_overrides=same)
    assert restored.config.model == algo.config.model
    restored.stop()
    algo.stop()


def test_a_policy_restore_override_replaces_a_nested_dict_of_the_stored_model(tmp_path):
    """As for the algorithm restore above: the override's dict replaces the stored one whole,
    which the restored network was not built with, so Policy.from_checkpoint refuses it too (it
    restored a policy whose config said {"width": 8} for a network built with {"depth": 2}
    besides). A merge that kept the stored "depth" would accept it: this fails then too."""
    algo, _ = _saved(tmp_path)
    algo.get_policy().export_checkpoint(tmp_path / "p")
    with pytest.raises(RestoredSettingError, match="custom_model_config") as raised:
        cairn.Policy.from_checkpoint(
            tmp_path / "p", config_overrides={"model": {"custom_model_config": {"width": 8}}})
    assert raised.value.given == {"width": 8} and raised.value.stored == {"width": 8, "depth": 2}
    same = {"model": {"custom_model_config": {"width": 8, "depth": 2}}}  # the stored one: accepted
    restored = cairn.Policy.from_checkpoint(tmp_path / "p", config_overrides=same)
    assert restored.config["model"]["custom_model_config"] == {"width": 8, "depth": 2}
    assert restored.config["model"]["custom_model"] == algo.config.model["custom_model"]
    algo.stop()


@pytest.mark.parametrize("model", [5, None, [("hidden", [8])]])
def test_a_policy_spec_model_that_is_not_a_dict_is_a_config_error_naming_it(model):
    """PolicySpec(config={"model": 5}) passed multi_agent() and then failed build() with
    "TypeError: 'int' object is not a mapping", naming neither the policy nor the setting."""
    config = small_ppo().multi_agent(policies={"a": cairn.PolicySpec(config={"model": model})},
                                     policy_mapping_fn={"agent_0": "a"})
    with pytest.raises(cairn.errors.ConfigError, match=r"policies\['a'\]\.config\['model'\].*must be a dict"):
        config.validate()
    config.multi_agent(policies={"a": cairn.PolicySpec(config={"model": {"hidden": [8]}})})
    config.validate()  # the config is usable once the spec is fixed
    assert config.policy_config("a")["model"]["hidden"] == [8]
