"""Which algorithm a config builds, and which config class a stored ``algo_class`` names.

The config layer sits below the algorithms and imports none of them: an algorithm is found by
its registry name (``@register_class`` registers it when its module is imported, which
``import cairn`` does for cairn's own) and checked to be an algorithm
(:class:`cairn.core.AlgorithmLike`) before it is used. Config classes register themselves here
under the name of the algorithm they build (``algo_class_name``).
"""

from __future__ import annotations

from typing import Any, cast

from cairn.core import AlgorithmLike
from cairn.errors import ConfigError, UnsafeCheckpointError
from cairn.registry import resolve_class

__all__ = ["register_config_class", "registered_config_class", "algorithm_class", "config_class_for",
           "missing_config_class"]

#: Config classes by the registry name of the algorithm they build (``algo_class_name``).
_CONFIG_CLASSES: dict[str, type] = {}


def register_config_class(name: str, config_cls: type) -> None:
    """Record ``config_cls`` as the config of the algorithm registered as ``name``."""
    _CONFIG_CLASSES[name] = config_cls


def registered_config_class(name: str) -> type | None:
    """The config class registered for algorithm ``name``, or None."""
    return _CONFIG_CLASSES.get(name)


def algorithm_class(name: str) -> type:
    """The algorithm class registered as ``name`` (or named ``"module:QualName"``).

    An unregistered short name raises :class:`~cairn.errors.ConfigError` saying to import the
    algorithm's module; a refused import reference keeps its
    :class:`~cairn.errors.UnsafeCheckpointError` (a crafted checkpoint's ``"os:system"``).
    """
    try:
        return resolve_class(name, cast("type[Any]", AlgorithmLike))
    except UnsafeCheckpointError as exc:
        if ":" in name:
            raise
        raise ConfigError(
            f"Unknown algo_class {name!r}: no algorithm is registered under that name ({exc}). "
            "Import the module that defines the algorithm (its class is registered with "
            "cairn.register_class when the module is imported), or name it as "
            "'package.module:ClassName'."
        ) from exc


def config_class_for(config_cls: type, algo_class: Any) -> Any:
    """What names the config class of the algorithm ``algo_class`` names: ``config_cls`` itself
    for None or its own algorithm's name, else the registered config class, or the algorithm's
    ``config_class`` (None when it has none; ``AlgorithmConfig.class_for`` checks the result)."""
    if algo_class is None or algo_class == getattr(config_cls, "algo_class_name", None):
        return config_cls
    return registered_config_class(algo_class) or getattr(
        algorithm_class(algo_class), "config_class", None)


def missing_config_class(algo_class: Any) -> ConfigError:
    """The error for an ``algo_class`` whose algorithm has no config class."""
    return ConfigError(
        f"algo_class {algo_class!r} names an algorithm without a config_class (a subclass "
        "of AlgorithmConfig); give the algorithm class one."
    )
