"""Name -> object registries, and import references that never run arbitrary code by accident.

Two kinds of references appear in configs and checkpoints:

* **class references** (``"PPO"`` or ``"cairn.algorithms.ppo:PPO"``): resolved by
  :func:`resolve_class`, which imports the module and then refuses anything that is not a
  subclass of the expected base class (:class:`~cairn.errors.UnsafeCheckpointError`).
* **callable references** (``"my_project.envs:make_env"``): resolved by
  :func:`resolve_callable`, which accepts only plain Python functions defined at module level
  in the named module, and never from the standard library. In a config's JSON form a callable
  is the object ``{CALLABLE_KEY: reference or None, "name": ...}``.

It also holds the one hook that lets a lower layer call a higher one without importing it:
:func:`register_native_model_writer`, through which ``cairn.export`` (registered when it is
imported, which ``import cairn`` does) writes a policy's native model files into a checkpoint.
"""

from __future__ import annotations

import importlib
import inspect
import sys
import types
from collections.abc import Callable
from typing import Any, TypeVar

from cairn.errors import ConfigError, UnsafeCheckpointError

__all__ = [
    "register_env",
    "registered_envs",
    "register_class",
    "class_reference",
    "resolve_class",
    "callable_reference",
    "resolve_callable",
    "CALLABLE_KEY",
    "NativeModelWriter",
    "register_native_model_writer",
    "native_model_writer",
    "ModelExporter",
    "register_model_exporter",
    "model_exporter",
]

#: Key of the JSON object that stands for a callable in ``AlgorithmConfig.to_dict()``: its value
#: is the :func:`callable_reference`, or None for a callable that has none (not stored).
CALLABLE_KEY = "__callable__"

#: ``writer(policy, directory, files, *, full=True) -> native_model record``: exports ``policy``'s
#: model into ``directory / "model"`` (``full=False``: only a Keras policy's ``model.keras``), adds
#: each file's size and hash to ``files``, and returns the manifest's ``native_model`` entry
#: (``cairn.export.write_native_model_files``).
NativeModelWriter = Callable[..., dict[str, Any]]

_ENV_CREATORS: dict[str, Callable[[dict[str, Any]], Any]] = {}
_CLASSES: dict[str, type] = {}
#: ``exporter(policy, export_dir, *, onnx) -> signature``: ``cairn.export.export_model``.
ModelExporter = Callable[..., dict[str, Any]]
#: Functions a higher layer installs for a lower one (name -> function), e.g. cairn.export's
#: writers for the policy layer, which may not import it.
_HOOKS: dict[str, Callable[..., Any]] = {}

T = TypeVar("T")


def register_env(name: str, creator: Callable[[dict[str, Any]], Any]) -> None:
    """Register ``creator(env_config) -> env`` under ``name`` for ``config.environment(name)``.

    The creator may return a Gymnasium ``Env`` or a PettingZoo ``ParallelEnv``.

    >>> import gymnasium as gym
    >>> register_env("my_cartpole", lambda cfg: gym.make("CartPole-v1", **cfg))
    """
    if not isinstance(name, str) or not name:
        raise ConfigError(f"register_env needs a non-empty str name, got {name!r}.")
    if not callable(creator):
        raise ConfigError(
            f"register_env({name!r}, ...) needs a callable creator(env_config) -> env, "
            f"got {type(creator).__name__}."
        )
    _ENV_CREATORS[name] = creator


def registered_envs() -> dict[str, Callable[[dict[str, Any]], Any]]:
    """Return a copy of the env registry (name -> creator)."""
    return dict(_ENV_CREATORS)


def register_native_model_writer(writer: NativeModelWriter) -> None:
    """Install the function that writes native model files into checkpoints (replacing any).

    ``cairn.export`` registers ``write_native_model_files`` when it is imported, so that the
    policy layer, below export, can offer ``export_checkpoint(..., export_native_model_files=True)``.
    """
    _install("register_native_model_writer", writer)


def native_model_writer() -> NativeModelWriter | None:
    """The function installed by :func:`register_native_model_writer`, or None."""
    return _HOOKS.get("register_native_model_writer")


def register_model_exporter(exporter: ModelExporter) -> None:
    """Install the function behind :meth:`cairn.Policy.export_model` (replacing any).

    ``cairn.export`` registers ``export_model`` when it is imported (``import cairn`` does),
    so that the policy layer, below export, offers the method without importing upward.
    """
    _install("register_model_exporter", exporter)


def model_exporter() -> ModelExporter | None:
    """The function installed by :func:`register_model_exporter`, or None."""
    return _HOOKS.get("register_model_exporter")


def _install(hook: str, fn: Callable[..., Any]) -> None:
    if not callable(fn):
        raise TypeError(f"{hook} needs a callable, got {type(fn).__name__}.")
    _HOOKS[hook] = fn


def register_class(cls: type[T], name: str | None = None) -> type[T]:
    """Register ``cls`` under a short name usable as a class reference (decorator-friendly)."""
    _CLASSES[name or cls.__name__] = cls
    return cls


def class_reference(cls: type) -> str:
    """The reference that :func:`resolve_class` turns back into ``cls``."""
    for name, registered in _CLASSES.items():
        if registered is cls:
            return name
    if "<locals>" in cls.__qualname__:
        raise ConfigError(
            f"Class {cls.__qualname__} is defined inside a function and cannot be referenced "
            "from a checkpoint. Define it at module level."
        )
    return f"{cls.__module__}:{cls.__qualname__}"


def _import_attribute(reference: str, error: type[Exception]) -> Any:
    module_name, _, qualname = reference.partition(":")
    if not module_name or not qualname or not all(
        part.isidentifier() for part in module_name.split(".") + qualname.split(".")
    ):
        raise error(
            f"Malformed reference {reference!r}; expected 'package.module:QualifiedName'."
        )
    try:
        obj: Any = importlib.import_module(module_name)
        for part in qualname.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError) as exc:
        raise error(
            f"Could not resolve {reference!r}: {exc}. Install or import the package that "
            "defines it, or pass the object explicitly."
        ) from exc
    return obj


def resolve_class(reference: str, base: type[T]) -> type[T]:
    """Turn a class reference into a class, refusing anything not a subclass of ``base``.

    ``reference`` is a registered short name or ``"module:QualName"``.
    """
    if not isinstance(reference, str):
        raise UnsafeCheckpointError(
            f"A class reference must be a str, got {type(reference).__name__}."
        )
    if reference in _CLASSES:
        obj: Any = _CLASSES[reference]
    else:
        module_name = reference.partition(":")[0]
        if module_name.split(".")[0] in sys.stdlib_module_names:
            raise UnsafeCheckpointError(
                f"Refusing class reference {reference!r}: it names a standard-library "
                f"module, but a subclass of {base.__module__}.{base.__qualname__} is expected."
            )
        obj = _import_attribute(reference, UnsafeCheckpointError)
    if not (isinstance(obj, type) and issubclass(obj, base)):
        raise UnsafeCheckpointError(
            f"Refusing class reference {reference!r}: it resolves to {obj!r}, which is not a "
            f"subclass of {base.__module__}.{base.__qualname__}."
        )
    return obj


def callable_reference(fn: Any) -> str | None:
    """Return ``"module:qualname"`` for a module-level function, or None if it has none.

    Lambdas, closures, bound methods, ``functools.partial`` objects and functions defined in
    ``__main__`` have no reference a later process could import.
    """
    if not isinstance(fn, types.FunctionType):
        return None
    module, qualname = fn.__module__, fn.__qualname__
    if module in (None, "__main__") or "<" in qualname:
        return None
    try:
        if _import_attribute(f"{module}:{qualname}", ConfigError) is not fn:
            return None
    except ConfigError:
        return None
    return f"{module}:{qualname}"


def resolve_callable(reference: str, *, what: str) -> Callable[..., Any]:
    """Resolve a callable reference written by :func:`callable_reference`.

    Only plain functions defined at module level in a non-standard-library module qualify, so
    that a crafted reference cannot name ``os:system`` or ``subprocess:run``.
    """
    if not isinstance(reference, str):
        raise UnsafeCheckpointError(f"The reference for {what} must be a str, got {reference!r}.")
    module_name = reference.partition(":")[0]
    if module_name.split(".")[0] in sys.stdlib_module_names:
        raise UnsafeCheckpointError(
            f"Refusing {what} reference {reference!r}: standard-library functions are never "
            f"called from a checkpoint. Pass {what}=... explicitly."
        )
    obj = _import_attribute(reference, UnsafeCheckpointError)
    if not inspect.isfunction(obj) or obj.__module__ != module_name:
        raise UnsafeCheckpointError(
            f"Refusing {what} reference {reference!r}: it resolves to {obj!r}, not a function "
            f"defined in {module_name!r}. Pass {what}=... explicitly."
        )
    return obj  # type: ignore[no-any-return]
