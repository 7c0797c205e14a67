"""Gymnasium spaces as JSON data: how checkpoints and export signatures store them, and the one
way cairn compares two spaces.

Spaces are stored as plain JSON (never pickled), so that a checkpoint can be read without
executing code and inspected by hand. Non-finite float bounds are written as the strings ``"inf"``,
``"-inf"`` and ``"nan"`` so that the JSON stays strict; integer bounds as exact integers. A space
read back is checked as untrusted input (sizes, depth, dtypes) before gymnasium builds it.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np

__all__ = ["MAX_SPACE_DEPTH", "MAX_SPACE_ELEMENTS", "mismatched_space", "space_from_json", "space_to_json",
           "spaces_equal"]

MAX_SPACE_ELEMENTS = 1 << 26  # 64M elements: far beyond any policy input, small enough to refuse.
MAX_SPACE_DEPTH = 16

_FLOAT_NAMES = {"inf": math.inf, "-inf": -math.inf, "nan": math.nan}


def _float_to_json(x: float) -> float | str:
    if math.isfinite(x):
        return x
    return "nan" if math.isnan(x) else ("inf" if x > 0 else "-inf")


def _floats_to_json(values: np.ndarray) -> list[float | str]:
    floats: list[Any] = values.astype(np.float64).reshape(-1).tolist()
    return floats if all(map(math.isfinite, floats)) else [_float_to_json(x) for x in floats]


def _float_from_json(x: Any) -> float:
    if isinstance(x, str) and x in _FLOAT_NAMES:
        return _FLOAT_NAMES[x]
    if isinstance(x, (int, float)) and not isinstance(x, bool):
        return float(x)
    raise ValueError(f"expected a number or 'inf'/'-inf'/'nan', got {x!r}")


def _bounds_to_json(values: np.ndarray) -> list[Any]:
    if values.dtype.kind in "iu":  # exact ints: float64 cannot hold the int64 range (2**63 - 1)
        ints: list[Any] = values.reshape(-1).tolist()
        return ints
    return _floats_to_json(values)


def _int_bound_from_json(x: Any, info: np.iinfo[Any]) -> int:
    """One bound of an integer Box: an int (exact), or the integral float an earlier version
    wrote, whose float64 rounding of the dtype's limits (``2**63`` for ``2**63 - 1``) is read
    back as those limits."""
    value: int | None = None
    if isinstance(x, int) and not isinstance(x, bool):
        value = x
    elif isinstance(x, float) and x.is_integer():
        value = info.max if x == float(info.max) else info.min if x == float(info.min) else int(x)
    if value is None or not info.min <= value <= info.max:
        raise ValueError(f"integer Box bounds must be integers in [{info.min}, {info.max}] "
                         f"({info.dtype}), got {x!r}")
    return value


def _bounds_from_json(values: list[Any], shape: tuple[int, ...], dtype: np.dtype[Any]) -> np.ndarray:
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return np.array([_int_bound_from_json(v, info) for v in values], dtype=dtype).reshape(shape)
    return np.array([_float_from_json(v) for v in values], dtype=np.float64).reshape(shape).astype(dtype)


def space_to_json(space: gym.Space[Any]) -> dict[str, Any]:
    """Describe a Box, Discrete, MultiDiscrete, MultiBinary, Dict or Tuple space as JSON data."""
    if isinstance(space, gym.spaces.Box):
        return {
            "type": "Box",
            "shape": list(space.shape),
            "dtype": np.dtype(space.dtype).name,
            "low": _bounds_to_json(space.low),
            "high": _bounds_to_json(space.high),
        }
    if isinstance(space, gym.spaces.Discrete):
        return {"type": "Discrete", "n": int(space.n), "start": int(space.start)}
    if isinstance(space, gym.spaces.MultiDiscrete):
        return {
            "type": "MultiDiscrete",
            "nvec": space.nvec.reshape(-1).tolist(),
            "start": space.start.reshape(-1).tolist(),
            "shape": list(space.shape),
            "dtype": np.dtype(space.dtype).name,
        }
    if isinstance(space, gym.spaces.MultiBinary):
        return {"type": "MultiBinary", "shape": list(space.shape)}
    if isinstance(space, gym.spaces.Dict):
        return {"type": "Dict", "spaces": [[k, space_to_json(s)] for k, s in space.spaces.items()]}
    if isinstance(space, gym.spaces.Tuple):
        return {"type": "Tuple", "spaces": [space_to_json(s) for s in space.spaces]}
    raise ValueError(
        f"Cannot describe space {space!r} as data: supported are Box, Discrete, "
        "MultiDiscrete, MultiBinary, Dict and Tuple."
    )


def spaces_equal(a: gym.Space[Any], b: gym.Space[Any]) -> bool:
    """Structural equality of two spaces through their JSON form (the one space comparison
    cairn makes: a restored policy against the environment, a PolicySpec against its agents).

    >>> spaces_equal(gym.spaces.Discrete(2), gym.spaces.Discrete(2))
    True
    """
    return a is b or space_to_json(a) == space_to_json(b)


def mismatched_space(
    expected: tuple[gym.Space[Any] | None, gym.Space[Any] | None],
    actual: tuple[gym.Space[Any], gym.Space[Any]],
    *,
    equal: Callable[[gym.Space[Any], gym.Space[Any]], bool] = spaces_equal,
) -> tuple[str, gym.Space[Any], gym.Space[Any]] | None:
    """The first of ``(observation, action)`` spaces where ``expected`` (None: anything goes)
    differs from ``actual``, as ``(name, expected, actual)``; None when both fit.

    Callers raise their own error (they know which policy and which agent are involved).

    >>> box, two = gym.spaces.Box(-1.0, 1.0, (4,)), gym.spaces.Discrete(2)
    >>> mismatched_space((None, gym.spaces.Discrete(3)), (box, two))[0]
    'action'
    """
    for name, given, found in (("observation", expected[0], actual[0]), ("action", expected[1], actual[1])):
        if given is not None and not equal(given, found):
            return name, given, found
    return None


def _shape(value: Any) -> tuple[int, ...]:
    if not isinstance(value, list) or len(value) > 32:
        raise ValueError(f"expected a shape (list of at most 32 ints), got {value!r}")
    if not all(isinstance(d, int) and not isinstance(d, bool) and 0 <= d for d in value):
        raise ValueError(f"shape entries must be non-negative ints, got {value!r}")
    if math.prod(value) > MAX_SPACE_ELEMENTS:
        raise ValueError(f"shape {value!r} has more than {MAX_SPACE_ELEMENTS} elements")
    return tuple(value)


def _int_list(value: Any, length: int, what: str) -> list[int]:
    if not isinstance(value, list) or len(value) != length:
        raise ValueError(f"{what} must be a list of {length} ints, got {value!r}")
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        raise ValueError(f"{what} must contain ints, got {value!r}")
    return value


def _dtype(name: Any, kinds: str) -> np.dtype[Any]:
    if not isinstance(name, str):
        raise ValueError(f"dtype must be a str, got {name!r}")
    try:
        dtype = np.dtype(name)
    except TypeError as exc:
        raise ValueError(f"unknown dtype {name!r}") from exc
    if dtype.kind not in kinds:
        raise ValueError(f"dtype {name!r} is not allowed here")
    return dtype


def space_from_json(data: Any, _depth: int = 0) -> gym.Space[Any]:
    """Rebuild a space written by :func:`space_to_json`; raises ValueError on anything else."""
    if _depth > MAX_SPACE_DEPTH:
        raise ValueError(f"spaces nested deeper than {MAX_SPACE_DEPTH} levels")
    if not isinstance(data, dict) or not isinstance(data.get("type"), str):
        raise ValueError(f"expected a space description with a 'type', got {data!r:.200}")
    kind = data["type"]
    if kind == "Box":
        shape = _shape(data.get("shape"))
        size = int(np.prod(shape, dtype=np.int64))
        low, high = data.get("low"), data.get("high")
        if not isinstance(low, list) or not isinstance(high, list):
            raise ValueError("Box 'low' and 'high' must be lists")
        if len(low) != size or len(high) != size:
            raise ValueError(f"Box bounds must have {size} entries for shape {list(shape)}")
        dtype = _dtype(data.get("dtype"), "fiu")
        return gym.spaces.Box(low=_bounds_from_json(low, shape, dtype),
                              high=_bounds_from_json(high, shape, dtype), dtype=dtype)
    if kind == "Discrete":
        n, start = data.get("n"), data.get("start", 0)
        if not isinstance(n, int) or isinstance(n, bool) or not 1 <= n <= MAX_SPACE_ELEMENTS:
            raise ValueError(f"Discrete 'n' must be an int in [1, {MAX_SPACE_ELEMENTS}], got {n!r}")
        if not isinstance(start, int) or isinstance(start, bool):
            raise ValueError(f"Discrete 'start' must be an int, got {start!r}")
        return gym.spaces.Discrete(n, start=start)
    if kind == "MultiDiscrete":
        shape = _shape(data.get("shape"))
        size = int(np.prod(shape, dtype=np.int64))
        nvec = _int_list(data.get("nvec"), size, "MultiDiscrete 'nvec'")
        start = _int_list(data.get("start"), size, "MultiDiscrete 'start'")
        if not all(1 <= n <= MAX_SPACE_ELEMENTS for n in nvec):
            raise ValueError("MultiDiscrete 'nvec' entries must be positive")
        dtype = _dtype(data.get("dtype", "int64"), "iu")
        return gym.spaces.MultiDiscrete(
            np.array(nvec).reshape(shape), dtype=dtype, start=np.array(start).reshape(shape)
        )
    if kind == "MultiBinary":
        shape = _shape(data.get("shape"))
        return gym.spaces.MultiBinary(shape[0] if len(shape) == 1 else list(shape))
    if kind in ("Dict", "Tuple"):
        subs = data.get("spaces")
        if not isinstance(subs, list) or len(subs) > 1024:
            raise ValueError(f"{kind} 'spaces' must be a list of at most 1024 entries")
        if kind == "Tuple":
            return gym.spaces.Tuple([space_from_json(s, _depth + 1) for s in subs])
        items = []
        for item in subs:
            if not (isinstance(item, list) and len(item) == 2 and isinstance(item[0], str)):
                raise ValueError(f"Dict entries must be [key, space] pairs, got {item!r:.200}")
            items.append((item[0], space_from_json(item[1], _depth + 1)))
        # Pairs, not a dict: gymnasium sorts a dict's keys, and the stored order is the order
        # gymnasium.spaces.flatten (hence the policy's network) reads the parts in.
        return gym.spaces.Dict(items)
    raise ValueError(f"unknown space type {kind!r}")
