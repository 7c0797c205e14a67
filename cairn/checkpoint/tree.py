"""Split a state tree into JSON and arrays, and join them again.

A state tree holds dicts with str keys, lists, str, bool, int, float, None and numpy arrays.
Arrays are replaced by ``{"__array__": "<name>"}`` and stored in a safetensors file; floats that
JSON cannot hold (nan, inf) become ``{"__float__": "nan" | "inf" | "-inf"}``.
"""

from __future__ import annotations

import math
import reprlib
from collections.abc import Mapping
from typing import Any

import numpy as np

__all__ = ["split_arrays", "join_arrays", "TreeError", "MAX_DEPTH"]

ARRAY_KEY = "__array__"
FLOAT_KEY = "__float__"
MAX_DEPTH = 64
_SPECIAL_FLOATS = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}
_CONTAINERS = (dict, list)  # what json.loads builds that may hold an array reference
_SCALARS = frozenset([str, int, bool, type(None)])  # JSON as they are (not float: nan, inf)
_NUMBERS = frozenset([int, float, bool])


class TreeError(ValueError):
    """The tree holds something that is not state data, or references a missing array."""


_REPR = reprlib.Repr()
_REPR.maxstring = _REPR.maxother = 80


def _short_repr(value: Any) -> str:
    """``repr(value)``, shortened (reprlib: a ``__repr__`` that raises gives a placeholder)."""
    return _REPR.repr(value)


def _float_json(x: float) -> Any:
    if math.isfinite(x):
        return x
    return {FLOAT_KEY: "nan" if math.isnan(x) else ("inf" if x > 0 else "-inf")}


def _plain_numbers(values: list[Any]) -> bool:
    """Whether ``values`` holds only ints, bools and finite floats (JSON as they are)."""
    types = set(map(type, values))
    if not types <= _NUMBERS:
        return False
    try:
        return float not in types or all(map(math.isfinite, values))
    except OverflowError:  # an int too large for a float: finite, but let the walk say so
        return False


def split_arrays(tree: Any) -> tuple[Any, dict[str, np.ndarray]]:
    """Return ``(json_tree, {name: array})`` for a state tree."""
    arrays: dict[str, np.ndarray] = {}

    def walk(node: Any, path: str, depth: int) -> Any:
        if depth > MAX_DEPTH:
            raise TreeError(f"state nested deeper than {MAX_DEPTH} levels at {path!r}")
        kind = type(node)  # the common exact types first: isinstance against an ABC is slow
        if kind is str or kind is int or kind is bool or node is None:
            return node
        if kind is float:
            return node if math.isfinite(node) else _float_json(node)
        if isinstance(node, np.ndarray):
            if node.dtype.kind not in "biuf":
                raise TreeError(f"array at {path!r} has dtype {node.dtype}; only numbers and bool")
            name = path or "root"
            while name in arrays:
                name += "_"
            arrays[name] = node
            return {ARRAY_KEY: name}
        if isinstance(node, Mapping):
            out = {}
            for key, value in node.items():
                if type(key) is not str:
                    raise TreeError(f"dict key {key!r} at {path!r} is not a str")
                if key in (ARRAY_KEY, FLOAT_KEY):
                    raise TreeError(f"dict key {key!r} at {path!r} is reserved")
                if type(value) in _SCALARS:  # most leaves: no call, no path built
                    out[key] = value
                else:
                    out[key] = walk(value, f"{path}/{key}" if path else key, depth + 1)
            return out
        if kind is list and _plain_numbers(node):
            return list(node)  # space bounds, counters, episode returns: JSON as they are
        if isinstance(node, (list, tuple)):
            return [walk(v, f"{path}/{i}", depth + 1) for i, v in enumerate(node)]
        if node is None or isinstance(node, (str, bool)):
            return node
        if isinstance(node, (int, np.integer)) and not isinstance(node, np.bool_):
            return int(node)
        if isinstance(node, np.bool_):
            return bool(node)
        if isinstance(node, (float, np.floating)):
            return _float_json(float(node))
        raise TreeError(f"value {_short_repr(node)} at {path!r} has type {type(node).__name__}, which is "
                        "not state data")

    return walk(tree, "", 0), arrays


def join_arrays(tree: Any, arrays: Mapping[str, np.ndarray]) -> Any:
    """Inverse of :func:`split_arrays`; every referenced array must exist."""

    def walk(node: Any, depth: int) -> Any:
        if depth > MAX_DEPTH:
            raise TreeError(f"state nested deeper than {MAX_DEPTH} levels")
        if isinstance(node, dict):
            if ARRAY_KEY in node:
                name = node[ARRAY_KEY]
                if len(node) != 1 or not isinstance(name, str):
                    raise TreeError(f"malformed array reference {node!r:.100}")
                if name not in arrays:
                    raise TreeError(f"state references array {name!r}, which is not stored")
                return arrays[name]
            if FLOAT_KEY in node:
                value = node[FLOAT_KEY]
                if len(node) != 1 or not isinstance(value, str) or value not in _SPECIAL_FLOATS:
                    raise TreeError(f"malformed float {node!r:.100}")
                return _SPECIAL_FLOATS[value]
            return {k: walk(v, depth + 1) for k, v in node.items()}
        if isinstance(node, list):
            if depth < MAX_DEPTH and not any(type(v) in _CONTAINERS for v in node):
                return node  # a list of plain values (space bounds, counters): nothing to join
            return [walk(v, depth + 1) for v in node]
        return node

    return walk(tree, 0)
