"""``config_overrides`` for a policy restored from a checkpoint (``Policy.from_checkpoint``).

The keys are the policy's own config keys (``policy.config``: ``model``, ``lr``,
``observation_filter``, DQN's ``epsilon``, SAC's ``actor_lr``, ...). As in
``Algorithm.from_checkpoint``, a dict for ``model`` merges into the stored model config (as
``config.training(model=...)`` merges it), with model classes stored as their references
(:func:`~cairn.policy.custom_model.model_references`); every other value replaces the stored
one. That is how a model class defined in ``__main__`` is brought back:
``config_overrides={"model": {"custom_model": MyModel}}``. The overrides are applied to the
stored spec before the state is checked, so the checks (and the policy built) see the config
that will be used.

Both restores follow one rule for ``model`` (this module's :func:`with_model_classes` and
:func:`check_model_follows`): a model class given again replaces the stored reference where
the stored policy names one (the class may have moved, or lived in ``__main__``); any other
``model`` setting must be the one the stored network was built with, else
:class:`~cairn.errors.RestoredSettingError`: a restored network keeps its structure and
weights, so ``activation="relu"`` on a tanh network would act with the stored weights through
another function, with no error.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from cairn.errors import ConfigError, RestoredSettingError
from cairn.policy.custom_model import MODEL_CLASS_KEYS, model_references
from cairn.policy.merge import merge_setting
from cairn.policy.mlp_actor_critic import check_model_config

__all__ = ["check_model_follows", "with_config_overrides", "with_model_classes"]

#: The ``model`` keys that name code (a class or a Keras builder), which a restore may give again.
MODEL_CODE_KEYS = (*MODEL_CLASS_KEYS, "keras_model")


def with_config_overrides(state: Mapping[str, Any], overrides: Mapping[str, Any] | None,
                          where: Any) -> Mapping[str, Any]:
    """``state`` with ``overrides`` set in its spec's config (``state`` is not changed).

    Raises :class:`~cairn.errors.ConfigError` naming ``where`` for a key the policy's config does
    not have (with the keys it has) or an invalid ``model`` section, and
    :class:`~cairn.errors.RestoredSettingError` for an ``observation_filter`` of another kind
    than the stored one (its statistics are the policy's state) or a ``model`` setting other
    than the one the stored network was built with (:func:`check_model_follows`). A state without a dict spec
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
            given = model_references(value)
            built = with_model_classes(stored["model"] or {}, given)
            config["model"] = merge_setting(built, given)
            check_model_config(config["model"])
            check_model_follows(given, built, where)
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


def with_model_classes(stored: Mapping[str, Any], model: Mapping[str, Any]) -> dict[str, Any]:
    """The stored ``model`` config of a restored policy with the model classes (and Keras
    builder) that a restore's ``model`` names put in where ``stored`` names one.

    A restored policy rebuilds its network from its own stored model config, but a class
    reference may resolve only in the process that saved it (a class defined in ``__main__``,
    or moved to another module since): replacing the reference is how a user brings that class
    back. A class for a policy stored without one is not put in (:func:`check_model_follows`
    then refuses it: the stored weights are the built-in network's). ``stored`` is not changed.
    """
    given = model_references({key: model[key] for key in MODEL_CODE_KEYS if key in model})
    return {**stored, **{key: value for key, value in given.items() if stored.get(key)}}


def check_model_follows(model: Any, built: Mapping[str, Any], where: Any = None) -> None:
    """RestoredSettingError for a setting of ``model`` (a restore's ``model`` config) that
    differs from ``built``, the one a restored policy's network was built with (its model
    classes as :func:`with_model_classes` gives them); a key ``built`` lacks counts when it is
    set (not None, False or empty). ``where`` (the checkpoint), when given, starts the message.
    Nothing to check when ``model`` is not a dict."""
    if not isinstance(model, Mapping):
        return
    for name, given in model_references(model).items():
        stored = built.get(name)
        if (given == stored) if name in built else (given is None or given is False or given == {}):
            continue
        raise RestoredSettingError(
            f"{f'{where}: ' if where is not None else ''}"
            f"Config 'model.{name}'={given!r:.200}, but this restored policy's network was built "
            f"with model.{name}={stored!r:.200} and keeps its stored structure and weights: the "
            "config would describe a network the policy does not have. Fix: restore without "
            "that override (the policy keeps its network), or start a new run with the model "
            "you want; to start it from these weights where their shapes fit, build it and "
            "load them with algo.restore_from_path(checkpoint, component='policies/<id>/weights').",
            setting=f"model.{name}", given=given, stored=stored)
