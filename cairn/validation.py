"""Checks of plain data that several layers share (config sections, policy model settings)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from cairn.errors import ConfigError

__all__ = ["check_section"]


def check_section(key: str, value: Any, allowed: Iterable[str]) -> None:
    """Raise ConfigError unless ``value`` is a dict whose keys are all in ``allowed``.

    >>> check_section("model", {"hidden": [32]}, ["hidden", "activation"])
    >>> check_section("model", {"hiden": [32]}, ["hidden"])
    Traceback (most recent call last):
    ...
    cairn.errors.ConfigError: Unknown model keys ['hiden']; allowed: ['hidden'].
    """
    if not isinstance(value, dict):
        raise ConfigError(f"Config {key!r} must be a dict, got {value!r}.")
    unknown = set(value) - set(allowed)
    if unknown:
        raise ConfigError(f"Unknown {key} keys {sorted(unknown)}; allowed: {sorted(allowed)}.")
