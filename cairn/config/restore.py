"""The config of a restored algorithm: the stored one, with the restore call's changes."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from cairn.config.algorithm_config import AlgorithmConfig, PolicyMapping
from cairn.errors import ConfigError, UnknownPolicyIdError

__all__ = ["restored_config"]


def restored_config(
    state: Mapping[str, Any],
    policy_ids: Sequence[str] | None,
    policy_mapping_fn: PolicyMapping | None,
    policies_to_train: Sequence[str] | None,
    config_overrides: Mapping[str, Any] | None,
) -> AlgorithmConfig:
    """Rebuild the config stored in an algorithm ``state`` and apply ``Algorithm.from_state``'s
    arguments: keep ``policy_ids``, replace the mapping and the learning policies, and set
    ``config_overrides`` (flat ``to_dict()`` keys; callables replace stored references)."""
    data = dict(state["config"])
    callables: dict[str, Any] = {}
    for key, value in (config_overrides or {}).items():
        if key in ("policies", "algo_class"):
            raise ConfigError(
                f"config_overrides cannot change {key!r}; use policy_ids=[...] to restore a subset."
            )
        if callable(value) and not isinstance(value, Mapping):
            callables[key] = value
        else:
            data[key] = value
    if policy_mapping_fn is not None:
        callables["policy_mapping_fn"] = policy_mapping_fn
    available = list(state["policies"]) if "policies" in state else list(data["policies"])
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
