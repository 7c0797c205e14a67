"""Declarative config fields: one place that knows each key's section, default and check."""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from cairn.errors import ConfigError
from cairn.validation import check_section

__all__ = [
    "Field", "positive_int", "int_in", "non_negative_int", "number", "choice", "optional", "boolean",
    "check_section",
]

Check = Callable[[str, Any], None]


@dataclass(frozen=True)
class Field:
    """One config key: the fluent method (section) that sets it, its default, its check, and
    whether it may hold a callable (stored by import reference, ``{"__callable__": ...}``; a
    callable under any other key is an error)."""

    section: str
    default: Any
    check: Check
    doc: str
    holds_callable: bool = False

    def default_value(self) -> Any:
        return copy.deepcopy(self.default)


def _fail(key: str, value: Any, expected: str) -> None:
    raise ConfigError(f"Config {key!r}={value!r} is invalid: expected {expected}.")


def positive_int(key: str, value: Any) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        _fail(key, value, "an int >= 1")


def int_in(low: int, high: int, why: str) -> Check:
    """An int in ``[low, high]``; ``why`` says where the upper bound comes from."""
    def check(key: str, value: Any) -> None:
        if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
            _fail(key, value, f"an int from {low} to {high:,} ({why})")

    return check


def non_negative_int(key: str, value: Any) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        _fail(key, value, "an int >= 0")


def boolean(key: str, value: Any) -> None:
    if not isinstance(value, bool):
        _fail(key, value, "True or False")


def number(low: float, high: float, *, low_open: bool = False) -> Check:
    """A real number in ``[low, high]`` (``(low, high]`` with ``low_open``)."""
    expected = f"a number in {'(' if low_open else '['}{low}, {high}]"

    def check(key: str, value: Any) -> None:
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            _fail(key, value, expected)
        if not (low < value if low_open else low <= value) or not value <= high:
            _fail(key, value, expected)

    return check


def choice(*allowed: Any) -> Check:
    def check(key: str, value: Any) -> None:
        if value not in allowed:
            _fail(key, value, f"one of {list(allowed)}")

    return check


def optional(inner: Check) -> Check:
    def check(key: str, value: Any) -> None:
        if value is not None:
            inner(key, value)

    return check
