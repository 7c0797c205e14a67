"""Each config field is declared once as a Field (section, default, check, callable or not) and
typed once as a class annotation, the form mypy reads for ``config.lr``; this test holds the two
together, so a field cannot gain one without the other."""

from __future__ import annotations

import pytest

from cairn import APPOConfig, DQNConfig, IMPALAConfig, PPOConfig, SACConfig, TD3Config
from cairn.config.algorithm_config import AlgorithmConfig
from cairn.policy.policy import Policy


def _annotated_fields(cls: type) -> set[str]:
    names: set[str] = set()
    for klass in cls.__mro__:
        for name, annotation in vars(klass).get("__annotations__", {}).items():
            if not str(annotation).startswith("ClassVar"):
                names.add(name)
    return names


@pytest.mark.parametrize("config_cls", [AlgorithmConfig, PPOConfig, IMPALAConfig, APPOConfig, DQNConfig,
                                        SACConfig, TD3Config])
def test_every_field_has_one_annotation_and_every_annotation_a_field(config_cls):
    assert _annotated_fields(config_cls) == set(config_cls.FIELDS)


def test_callable_keys_are_a_property_of_their_fields():
    assert AlgorithmConfig.callable_fields() == {"env", "policy_mapping_fn"}
    assert PPOConfig.callable_fields() == {"env", "policy_mapping_fn"}


def test_policy_settings_default_to_the_policy_layer_defaults():
    config = AlgorithmConfig()
    for key in ("lr", "observation_filter", "model"):
        assert getattr(config, key) == Policy.DEFAULT_CONFIG[key]
