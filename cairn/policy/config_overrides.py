"""``config_overrides`` for a policy restored from a checkpoint (``Policy.from_checkpoint``).

The keys are the policy's own config keys (``policy.config``: ``model``, ``lr``,
``observation_filter``, DQN's ``epsilon``, SAC's ``actor_lr``, ...). As in
``Algorithm.from_checkpoint``, a dict for ``model`` merges into the stored model config (as
``config.training(model=...)`` merges it), with model classes stored as their references
(:func:`~cairn.policy.custom_model.model_references`); every other value replaces the stored
one. That is how a model class defined in ``__main__`` is brought back:
``config_overrides={"model": {"custom_model": MyModel}}``. The overrides are applied to the
stored spec before the state is checked, so the checks (and the policy built) see the config
that will be used; a setting that changes the network's shape then fails the weight check.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from cairn.errors import ConfigError, RestoredSettingError
from cairn.policy.custom_model import model_references
from cairn.policy.merge import merge_setting
from cairn.policy.mlp_actor_critic import check_model_config

__all__ = ["with_config_overrides"]


def with_config_overrides(state: Mapping[str, Any], overrides: Mapping[str, Any] | None,
                          where: Any) -> Mapping[str, Any]:
    """``state`` with ``overrides`` set in its spec's config (``state`` is not changed).

    Raises :class:`~cairn.errors.ConfigError` naming ``where`` for a key the policy's config does
    not have (with the keys it has) or an invalid ``model`` section, and
    :class:`~cairn.errors.RestoredSettingError` for an ``observation_filter`` of another kind
    than the stored one (its statistics are the policy's state). A state without a dict spec
    config is returned as it is, for the state check to refuse.
    """
    if not overrides:
        return state
    if not isinstance(overrides, Mapping):
        raise ConfigError(f"config_overrides must be a dict of policy config keys, got {overrides!r:.100}.")
    spec = state.get("spec")
    if not isinstance(spec, Mapping) or not isinstance(spec.get("config"), Mapping):
        return state
    stored = spec["config"]
    config = dict(stored)
    for key, value in overrides.items():
        if key not in stored:
            raise ConfigError(
                f"config_overrides has key {key!r}, which the policy of {where} does not have; its "
                f"config keys are {sorted(stored)}.")
        if key == "model":
            if not isinstance(value, Mapping):
                raise ConfigError(f"config_overrides 'model' must be a dict, got {value!r:.100}.")
            config["model"] = merge_setting(stored["model"] or {}, model_references(value))
            check_model_config(config["model"])
        elif key == "observation_filter" and value != stored[key]:
            raise RestoredSettingError(
                f"{where}: config_overrides 'observation_filter'={value!r:.100}, but the stored policy "
                f"normalises with {stored[key]!r}, whose statistics are part of its state and cannot "
                "become another filter's. Fix: restore without that override (the policy keeps its "
                "filter), or train a new policy with the filter you want.",
                setting="observation_filter", given=value, stored=stored[key])
        else:
            config[key] = value
    return {**state, "spec": {**dict(spec), "config": config}}
