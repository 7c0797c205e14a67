"""The config of a restored algorithm: the stored one, with the restore call's changes."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from cairn.callbacks.base import callbacks_reference
from cairn.config.algorithm_config import AlgorithmConfig, PolicyMapping, merge_setting
from cairn.errors import ConfigError, UnknownPolicyIdError
from cairn.policy_ids import normalize_policy_ids

__all__ = ["restored_config"]


def restored_config(
    state: Mapping[str, Any],
    policy_ids: str | Sequence[str] | None,
    policy_mapping_fn: PolicyMapping | None,
    policies_to_train: Sequence[str] | None,
    config_overrides: Mapping[str, Any] | None,
) -> AlgorithmConfig:
    """Rebuild the config stored in an algorithm ``state`` and apply ``Algorithm.from_state``'s
    arguments: keep ``policy_ids``, replace the mapping and the learning policies, and set
    ``config_overrides`` (flat ``to_dict()`` keys; callables replace stored references).

    An override of a dict-valued training setting (``model``, DQN's ``replay_buffer_config``:
    ``AlgorithmConfig.merged_fields()``) is merged into the stored value as ``training()``
    merges it; every other override replaces the stored value, as its fluent method does.
    """
    data = dict(state["config"])
    merged = AlgorithmConfig.class_for(data.get("algo_class")).merged_fields()
    callables: dict[str, Any] = {}
    for key, value in (config_overrides or {}).items():
        if key in ("policies", "algo_class"):
            raise ConfigError(
                f"config_overrides cannot change {key!r}; use policy_ids=[...] to restore a subset."
            )
        if key == "callbacks_class":  # a class, as config.callbacks() takes it, or its reference
            data[key] = callbacks_reference(value)
        elif callable(value) and not isinstance(value, Mapping):
            callables[key] = value
        elif key in merged and isinstance(value, Mapping) and isinstance(data.get(key), Mapping):
            data[key] = merge_setting(data[key], value)
        else:
            data[key] = value
    if policy_mapping_fn is not None:
        callables["policy_mapping_fn"] = policy_mapping_fn
    available = list(state["policies"]) if "policies" in state else list(data["policies"])
    policy_ids = normalize_policy_ids(policy_ids)
    if policy_ids is not None:
        unknown = [pid for pid in policy_ids if pid not in data["policies"]]
        if unknown:
            raise UnknownPolicyIdError(
                f"Policy IDs {unknown} are not in the checkpoint; it has {sorted(data['policies'])}."
            )
        data["policies"] = {pid: data["policies"][pid] for pid in policy_ids}
        if data.get("policies_to_train") is not None:
            data["policies_to_train"] = [p for p in data["policies_to_train"] if p in policy_ids]
    else:
        data["policies"] = {pid: s for pid, s in data["policies"].items() if pid in available}
    if policies_to_train is not None:
        data["policies_to_train"] = list(policies_to_train)
    config = AlgorithmConfig.from_dict(data, callables=callables)
    config.validate()
    return config
