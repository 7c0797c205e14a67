"""Merging config dicts: a dict setting set over the current one, and a config over defaults."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

__all__ = ["deep_merge", "merge_setting"]


def merge_setting(current: Mapping[str, Any], given: Mapping[str, Any]) -> dict[str, Any]:
    """A dict-valued setting (``model``, ``replay_buffer_config``, ``env_config``) after
    ``given`` is set over ``current``: one level deep, as a copy, as RLlib's
    ``config.training(model=...)`` updates it (``self.model.update(model)``). A key ``given``
    names replaces the current value whole, also where both are dicts: a new
    ``custom_model_config`` is the model's config, not the old one's keys plus its own.

    This is the one rule for ``training()``, a restore's ``config_overrides``
    (``Algorithm.from_checkpoint``, ``Policy.from_checkpoint``), a PolicySpec's config over the
    shared one, Tune's ``param_space`` and ``cairn train --config``.

    >>> merge_setting({"hidden": [64], "custom_model_config": {"width": 32}},
    ...               {"custom_model_config": {"heads": 4}})
    {'hidden': [64], 'custom_model_config': {'heads': 4}}
    """
    return copy.deepcopy({**current, **given})


def deep_merge(base: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    """A deep copy of ``base`` with ``override`` merged in; nested dicts merge key by key.

    For filling a policy's config in from its class's defaults (``Policy.DEFAULT_CONFIG``,
    whose only nested dict is ``model``, itself without nested dicts): a setting set over
    another is merged by :func:`merge_setting` instead."""
    out = copy.deepcopy(dict(base))
    for key, value in override.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out
