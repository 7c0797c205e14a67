"""Read-only dicts and lists: what a frozen config (:meth:`AlgorithmConfig.freeze
<cairn.config.algorithm_config.AlgorithmConfig.freeze>`) holds in its dict- and list-valued
settings, so that ``algo.config.model["hidden"] = [8]`` raises as ``algo.config.model = ...``
does instead of changing what a checkpoint stores while the built policies keep the old value.

They are ``dict`` and ``list`` subclasses, so everything that reads a setting works on them
unchanged (``isinstance``, ``==`` with plain dicts and lists, ``json.dumps``); only writes raise
a :class:`~cairn.errors.ConfigError` with the message of the setting they belong to. A copy is
the caller's to change: ``copy()``, ``copy.copy`` and ``dict(...)``/``list(...)`` give a
plain shallow copy, ``copy.deepcopy`` a plain deep one, and pickling (Ray, a
child process) keeps them read-only. A numpy array in such a setting becomes a read-only copy
(``flags.writeable`` False), which numpy itself guards.
"""

from __future__ import annotations

import copy
from typing import Any, NoReturn

import gymnasium as gym
import numpy as np

from cairn.errors import ConfigError
from cairn.policy.spec import PolicySpec

__all__ = ["ReadOnlyDict", "ReadOnlyList", "read_only", "read_only_space"]


class ReadOnlyDict(dict[Any, Any]):
    """A dict whose writes raise ConfigError(``refusal``); read it as any dict."""

    __slots__ = ("refusal",)

    def __init__(self, items: Any = (), refusal: str = "This dict is read-only.") -> None:
        super().__init__(items)
        self.refusal = refusal

    def _refuse(self, *args: Any, **kwargs: Any) -> NoReturn:
        raise ConfigError(self.refusal)

    __setitem__ = __delitem__ = clear = pop = popitem = setdefault = update = _refuse
    __ior__ = _refuse  # type: ignore[assignment]

    def copy(self) -> dict[Any, Any]:
        """A plain (changeable) shallow copy, as ``dict.copy`` gives."""
        return dict(self)

    def __copy__(self) -> dict[Any, Any]:
        return dict(self)

    def __deepcopy__(self, memo: dict[int, Any]) -> dict[Any, Any]:
        out: dict[Any, Any] = {}
        memo[id(self)] = out
        for key, value in self.items():
            out[copy.deepcopy(key, memo)] = copy.deepcopy(value, memo)
        return out

    def __reduce__(self) -> tuple[Any, ...]:
        return (ReadOnlyDict, (dict(self), self.refusal))

    def __or__(self, other: Any) -> Any:
        return dict(self) | other

    def __repr__(self) -> str:
        return dict.__repr__(self)


class ReadOnlyList(list[Any]):
    """A list whose writes raise ConfigError(``refusal``); read it as any list."""

    __slots__ = ("refusal",)

    def __init__(self, items: Any = (), refusal: str = "This list is read-only.") -> None:
        super().__init__(items)
        self.refusal = refusal

    def _refuse(self, *args: Any, **kwargs: Any) -> NoReturn:
        raise ConfigError(self.refusal)

    __setitem__ = __delitem__ = append = extend = insert = pop = remove = clear = sort = _refuse
    reverse = _refuse
    __iadd__ = __imul__ = _refuse  # type: ignore[assignment]

    def copy(self) -> list[Any]:
        """A plain (changeable) shallow copy, as ``list.copy`` gives."""
        return list(self)

    def __copy__(self) -> list[Any]:
        return list(self)

    def __deepcopy__(self, memo: dict[int, Any]) -> list[Any]:
        out: list[Any] = []
        memo[id(self)] = out
        out.extend(copy.deepcopy(value, memo) for value in self)
        return out

    def __reduce__(self) -> tuple[Any, ...]:
        return (ReadOnlyList, (list(self), self.refusal))

    def __repr__(self) -> str:
        return list.__repr__(self)


def read_only(value: Any, refusal: str) -> Any:
    """``value`` with every plain dict and list in it (through dicts, lists and tuples) made
    read-only, their writes raising ConfigError(``refusal``), and every numpy array in them a
    read-only copy (``flags.writeable`` False: a write raises numpy's ValueError "assignment
    destination is read-only"); other objects (a user's object in ``env_config``, a dict
    subclass) are kept as they are; a :class:`PolicySpec` becomes its
    :meth:`~PolicySpec.read_only_copy`. ``value`` itself is not changed."""
    kind = type(value)
    if kind is dict or kind is ReadOnlyDict:
        return ReadOnlyDict({key: read_only(item, refusal) for key, item in value.items()}, refusal)
    if kind is list or kind is ReadOnlyList:
        return ReadOnlyList([read_only(item, refusal) for item in value], refusal)
    if kind is tuple:
        return tuple(read_only(item, refusal) for item in value)
    if kind is np.ndarray:  # a copy: the caller's array (or one still in use) stays changeable
        frozen = value.copy()
        frozen.flags.writeable = False
        return frozen
    if kind is PolicySpec:  # its attributes too (algo.config.policies[pid].config = ...)
        spaces = (read_only_space(value.observation_space, refusal),
                  read_only_space(value.action_space, refusal))
        return value.read_only_copy(read_only(value.config, refusal), refusal, spaces=spaces)
    return value


def read_only_space(space: gym.Space[Any] | None, refusal: str) -> gym.Space[Any] | None:
    """A deep copy of ``space`` (None: None) whose numpy arrays (a Box's ``low``/``high``, a
    MultiDiscrete's ``nvec``, ...), its subspaces' too, are read-only, and whose Dict subspaces
    are a :class:`ReadOnlyDict` (``space["y"] = ...`` raises ConfigError(``refusal``)).

    A copy: the config's PolicySpec held the policy's own space objects (the env's, for an
    inferred one), so ``algo.config.policies[pid].action_space.low[0] = 1.5`` changed what the
    policy's checkpoints stored while its action distribution kept the bounds it was built
    with, and a restore used the new ones."""
    if space is None:
        return None
    frozen = copy.deepcopy(space)
    _lock_space(frozen, refusal)
    return frozen


def _lock_space(space: Any, refusal: str) -> None:
    for name, value in vars(space).items():
        if isinstance(value, np.ndarray):
            value.flags.writeable = False
        elif isinstance(value, gym.Space):
            _lock_space(value, refusal)
        elif type(value) in (dict, tuple, list):  # a Dict's or Tuple's subspaces
            items = value.values() if isinstance(value, dict) else value
            for item in items:
                if isinstance(item, gym.Space):
                    _lock_space(item, refusal)
            if type(value) is dict:
                vars(space)[name] = ReadOnlyDict(value, refusal)

