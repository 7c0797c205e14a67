"""A config as a flat, JSON-safe dict and back: what ``AlgorithmConfig.to_dict()`` writes into
checkpoints and run directories and ``from_dict()`` reads (docs/checkpoint-format.md).

Settings keep their RLlib-style keys; policies become their specs' dicts; a callable becomes an
import reference when it has one (:func:`~cairn.config.checks.encode_callable`).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any, ClassVar, Protocol

from cairn.checkpoint.writer_files import UnsaveableStateError, encode_state
from cairn.config.checks import (
    decode_callable,
    encode_callable,
    normalize_policies,
    require_mapping,
    suggest,
)
from cairn.config.fields import Field
from cairn.config.league_settings import DrawnMapping
from cairn.errors import ConfigError
from cairn.policy.custom_model import model_references
from cairn.policy.mlp_actor_critic import check_model_config
from cairn.policy.spec import PolicySpec

__all__ = ["FieldConfig", "owned_value", "config_to_dict", "check_saveable", "load_dict"]

#: Keys that ``load_dict`` leaves to ``validate()``: their checks need the other settings.
_CHECKED_IN_VALIDATE = ("env", "policies", "policy_mapping_fn", "policies_to_train")


class FieldConfig(Protocol):
    """What this module reads and sets of an ``AlgorithmConfig`` (which imports it): its fields,
    each an attribute, and the algorithm it builds."""

    FIELDS: ClassVar[dict[str, Field]]
    algo_class_name: ClassVar[str | None]

    def callable_fields(self) -> frozenset[str]: ...


def owned_value(field: Field, value: Any) -> Any:
    """``value`` to keep under ``field``: a copy, except a callable where the field holds one."""
    return value if field.holds_callable and callable(value) else copy.deepcopy(value)


def config_to_dict(config: FieldConfig) -> dict[str, Any]:
    """Every setting of ``config`` as a flat, JSON-safe dict (``AlgorithmConfig.to_dict()``)."""
    out: dict[str, Any] = {"algo_class": config.algo_class_name}
    for key, field in config.FIELDS.items():
        value = getattr(config, key)
        if key == "policies":
            value = {pid: spec.to_dict() for pid, spec in normalize_policies(value).items()}
        elif isinstance(value, DrawnMapping):
            value = None  # drawn by the league of league_config, rebuilt with it
        elif key == "policy_mapping_fn" and isinstance(value, Mapping):
            # A dict's agent IDs as the JSON strings a checkpoint keeps, looked up again by
            # str(agent_id) (checks.map_agent; docs/multi-agent.md): an int key failed the save
            # after training. check_policy_mapping refuses keys that two agents' str() share.
            value = {str(agent_id): pid for agent_id, pid in value.items()}
        elif field.holds_callable and callable(value) and not isinstance(value, Mapping):
            value = encode_callable(value)
        else:
            value = copy.deepcopy(value)
        out[key] = value
    return out


#: What to give instead, for the settings where a user's values reach the stored config.
_SAVEABLE_FIXES = {
    "env_config": "keep env_config to str keys and plain values, and pass an object by a string "
                  "the env creator resolves (a name, a 'package.module:Name' import path)",
    "policies": "keep each PolicySpec's config to str keys and plain values",
}


def check_saveable(data: Mapping[str, Any]) -> None:
    """ConfigError for the first setting of ``data`` (:func:`config_to_dict` output) that a
    checkpoint cannot store, by the save's own test (``encode_state``): without it the config
    trains, and its first ``algo.save()`` fails after the training ran."""
    for key, value in data.items():
        try:  # where a save puts it (cairn.algorithms.state): its path and depth in the tree
            encode_state({"config": {key: value}})
        except UnsaveableStateError as exc:
            fix = _SAVEABLE_FIXES.get(key, f"give {key!r} only such values")
            raise ConfigError(
                f"Config {key!r} cannot be saved in a checkpoint: {exc.reason}. Every checkpoint "
                "(algo.save(), a CheckpointManager's, cairn train's) stores the config as JSON "
                "and numpy arrays: dicts with str keys, lists and tuples (restored as lists), "
                "str, int, float, bool, None, numpy numbers, and numpy arrays of bools, ints or "
                f"floats up to float64. Fix: {fix}."
            ) from None


def load_dict(
    config: FieldConfig, data: Mapping[str, Any], callables: Mapping[str, Any] | None
) -> None:
    """Set ``config`` (a fresh one of the right class) from :func:`config_to_dict` output;
    ``callables`` supplies values for keys whose callable was not storable."""
    callables = dict(callables or {})
    unknown = set(data) - set(config.FIELDS) - {"algo_class"}
    if unknown:
        key = sorted(unknown)[0]
        raise ConfigError(
            f"Unknown config key {key!r} (value {data[key]!r:.80}); allowed keys: "
            f"{sorted(config.FIELDS)}." + suggest(key, config.FIELDS)
        )
    for key, value in data.items():
        if key == "algo_class":
            continue
        if key in callables:
            value = callables.pop(key)
        else:
            value = decode_callable(value, key, config.callable_fields())
        if key == "policies":
            value = {pid: PolicySpec.from_dict(s) for pid, s in require_mapping(value, key).items()}
        elif key == "model":
            if isinstance(value, Mapping):  # classes as references, as training() stores them: a
                value = model_references(value)  # restore's config_overrides may name the class
            check_model_config(value)
        setattr(config, key, owned_value(config.FIELDS[key], value))
    for key, value in callables.items():  # callables for keys absent from data
        setattr(config, key, value)
    for key, field in config.FIELDS.items():
        if key not in _CHECKED_IN_VALIDATE:
            field.check(key, getattr(config, key))
