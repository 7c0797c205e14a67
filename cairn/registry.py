"""Name -> object registries, and import references that never run arbitrary code by accident.

Every class and function a config or a checkpoint names goes through one resolver,
:func:`resolve_reference`, with one rule set (docs/security.md, "References"): never the
standard library (refused before anything is imported), classes only as subclasses of the
expected base, functions only as plain functions defined in the module named. Its two uses:

* **class references** (``"PPO"`` or ``"cairn.algorithms.ppo:PPO"``): :func:`resolve_class`
  (algorithm and policy classes).
* **function references** (``"my_project.envs:make_env"``): :func:`resolve_callable` (env
  creators, policy mapping functions, Keras model builders). In a config's JSON form a callable
  is the object ``{CALLABLE_KEY: reference or None, "name": ...}``.

It also names the one route from the policy layer up to ``cairn.export``'s writers
(:data:`NATIVE_MODEL_WRITER`, :data:`MODEL_EXPORTER`), resolved when a policy writes its model;
nothing is registered at import time.
"""

from __future__ import annotations

import inspect
import sys
import types
import warnings
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from cairn.errors import CheckpointConfigError, ConfigError, UnsafeCheckpointError
from cairn.module_trust import import_referenced_module

__all__ = [
    "register_env",
    "registered_envs",
    "register_class",
    "class_reference",
    "resolve_class",
    "register_model_class",
    "registered_model_classes",
    "model_class_reference",
    "resolve_model_class",
    "callable_reference",
    "resolve_callable",
    "resolve_reference",
    "check_reference_form",
    "check_class_reference_form",
    "CALLABLE_KEY",
    "NativeModelWriter",
    "NATIVE_MODEL_WRITER",
    "native_model_writer",
    "NATIVE_MODEL_REUSES",
    "native_model_reuses",
    "ModelExporter",
    "MODEL_EXPORTER",
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
_MODELS: dict[str, type] = {}
#: ``exporter(policy, export_dir, *, onnx) -> signature``: ``cairn.export.export_model``.
ModelExporter = Callable[..., dict[str, Any]]
#: The one route to native-model writing: cairn.export's two writers, named here and resolved
#: by the one resolver when a policy writes its model (``Policy.export_model``,
#: ``export_checkpoint``, and ``Algorithm.save`` through the same policy-layer call). Nothing
#: installs them at import time; the policy layer, below export, names them instead of
#: importing them.
NATIVE_MODEL_WRITER = "cairn.export.checkpoint_files:write_native_model_files"
MODEL_EXPORTER = "cairn.export.model_export:export_model"
#: ``reuses(record, *, keras, full) -> bool``: whether an earlier ``native_model`` record is what
#: the writer would write in this process for a policy with ``keras`` and ``full`` (the same
#: files, and ``model.onnx`` skipped only for packages missing here too), for an incremental
#: save's reuse of a policy's files.
NATIVE_MODEL_REUSES = "cairn.export.checkpoint_files:native_files_hold"

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


def native_model_writer() -> NativeModelWriter:
    """cairn.export's writer of a policy's ``model/`` files (:data:`NATIVE_MODEL_WRITER`)."""
    return resolve_callable(NATIVE_MODEL_WRITER, what="native model writer")  # type: ignore[no-any-return]


def native_model_reuses() -> Callable[..., bool]:
    """cairn.export's check of an earlier ``native_model`` record (:data:`NATIVE_MODEL_REUSES`)."""
    return resolve_callable(NATIVE_MODEL_REUSES, what="native model reuse check")  # type: ignore[no-any-return]


def model_exporter() -> ModelExporter:
    """cairn.export's ``export_model`` (:data:`MODEL_EXPORTER`), behind ``Policy.export_model``."""
    return resolve_callable(MODEL_EXPORTER, what="model exporter")  # type: ignore[no-any-return]


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


def _import_attribute(reference: str, error: type[Exception], what: str = "reference") -> Any:
    module_name, _, qualname = reference.partition(":")
    try:
        obj: Any = import_referenced_module(module_name, what=what, reference=reference)
        for part in qualname.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError) as exc:
        if module_name == "__main__":
            raise error(
                f"Could not resolve {reference!r}: it names {qualname!r} in __main__, the script "
                "that was running when it was stored, and this process's __main__ has no such "
                "name (another process cannot import a class or function defined in a script). "
                "Fix: pass it again, e.g. config_overrides={'model': {'custom_model': MyModel}} "
                "or {'callbacks_class': MyCallbacks} on restore, or define it in an importable "
                "module (my_project/models.py) and save again."
            ) from exc
        raise error(
            f"Could not resolve {reference!r}: {exc}. Install or import the package that "
            "defines it, or pass the object explicitly."
        ) from exc
    return obj


def main_module_references(tree: Any, path: str = "") -> list[tuple[str, str]]:
    """``(key path, reference)`` for every ``"__main__:Name"`` reference in a config tree
    (``config.to_dict()``): classes defined in the running script, which this process can
    resolve but another process (a Ray worker, ``cairn evaluate``, a later script) cannot."""
    if isinstance(tree, str):
        return [(path, tree)] if tree.startswith("__main__:") else []
    if isinstance(tree, Mapping):
        return [found for key, value in tree.items()
                for found in main_module_references(value, f"{path}.{key}" if path else str(key))]
    if isinstance(tree, (list, tuple)):
        return [found for index, value in enumerate(tree)
                for found in main_module_references(value, f"{path}[{index}]")]
    return []


def warn_main_module_references(config: Mapping[str, Any], *, when: str, stacklevel: int) -> None:
    """Warn once per call about :func:`main_module_references` in ``config`` (``when``:
    ``"build()"`` or ``"save()"``)."""
    found = main_module_references(config)
    if found:
        listed = ", ".join(f"{key}={reference!r}" for key, reference in found)
        warnings.warn(
            f"At {when}: the config names {listed}, defined in the script run as __main__. This "
            "process can restore its checkpoints, but another process (a Ray worker, `cairn "
            "evaluate`, a later script) cannot import it. Fix: define it in an importable module "
            "(e.g. my_project/models.py) and import it from there.",
            stacklevel=stacklevel + 1)


def check_reference_form(reference: Any, *, what: str) -> str:
    """``reference`` if it has the form ``"package.module:QualifiedName"`` and names no module
    of the standard library; else :class:`~cairn.errors.UnsafeCheckpointError`. Imports nothing:
    this is the part of :func:`resolve_reference`'s rule that holds before any import."""
    if not isinstance(reference, str):
        raise UnsafeCheckpointError(f"The reference for {what} must be a str, got {reference!r:.100}.")
    module_name, _, qualname = reference.partition(":")
    if not module_name or not qualname or not all(
        part.isidentifier() for part in module_name.split(".") + qualname.split(".")
    ):
        raise UnsafeCheckpointError(
            f"Malformed reference {reference!r:.100} for {what}; expected 'package.module:QualifiedName'."
        )
    if module_name.split(".")[0] in sys.stdlib_module_names:
        raise UnsafeCheckpointError(
            f"Refusing {what} reference {reference!r}: it names the standard-library module "
            f"{module_name!r}, and cairn never imports or calls the standard library for a "
            f"reference (a checkpoint or config naming it is refused). Pass {what} explicitly."
        )
    return reference


def check_class_reference_form(reference: str, *, what: str) -> str:
    """:func:`check_reference_form` for a class reference, which may also be a bare identifier
    (a short name :func:`register_class` may know; whether it does is checked on resolving)."""
    return reference if reference.isidentifier() else check_reference_form(reference, what=what)


def resolve_reference(reference: Any, *, what: str, base: type[T] | None = None,
                      functions: bool = False) -> Any:
    """The one resolver of every class and function a config or checkpoint names.

    The rule (docs/security.md, "References"):

    1. ``reference`` is a str: a short name registered with :func:`register_class` (classes
       only), or ``"package.module:QualifiedName"`` made of Python identifiers.
    2. A module of the standard library (``builtins``, ``os``, ``code``, ``webbrowser``,
       ``antigravity``, ...) is refused *before anything is imported*, by name and, for
       modules not named in :data:`sys.stdlib_module_names` (``test``, ``__hello__``), by
       location.
    3. The module is located, one package level at a time, before it is imported
       (:func:`cairn.module_trust.import_referenced_module`): while a checkpoint is loaded, a
       module inside it or the manager root holding it, a namespace package, and in strict mode
       (:func:`cairn.module_trust.trust_modules`) a module the user did not trust, are refused.
       Then it is imported and the name looked up in it.
    4. With ``base``: the object must be a class and a subclass of ``base``. Without: it must
       be a plain Python function (no class, builtin, method or partial) defined in that very
       module, not one imported into it from elsewhere. ``functions=True`` with ``base``
       accepts either (a scripted opponent is a function or a class of callables).

    A module or name that does not exist raises :class:`~cairn.errors.CheckpointConfigError`
    (a ``ConfigError`` and a ``CheckpointError``: nothing unsafe happened). Anything else
    raises :class:`~cairn.errors.UnsafeCheckpointError` naming ``what`` (the config key or
    role, e.g. ``"model.keras_model"``) and the reference.
    """
    if base is not None and isinstance(reference, str) and reference in _CLASSES:
        obj: Any = _CLASSES[reference]
    else:
        check_reference_form(reference, what=what)
        # Nothing unsafe happened when a module or name is missing: a ConfigError at build(), a
        # CheckpointConfigError (also a CheckpointError) on restore.
        obj = _import_attribute(reference, CheckpointConfigError, what)
    if base is not None and not (functions and inspect.isfunction(obj)):
        if not (isinstance(obj, type) and issubclass(obj, base)):
            raise UnsafeCheckpointError(
                f"Refusing {what} reference {reference!r}: it resolves to {obj!r:.100}, which is "
                f"not a subclass of {base.__module__}.{base.__qualname__}."
            )
        return obj
    module_name = reference.partition(":")[0]
    if not inspect.isfunction(obj) or obj.__module__ != module_name:
        raise UnsafeCheckpointError(
            f"Refusing {what} reference {reference!r}: it resolves to {obj!r:.100}, not a "
            f"function defined in {module_name!r}. Pass {what} explicitly."
        )
    return obj


def resolve_class(reference: str, base: type[T]) -> type[T]:
    """Turn a class reference into a class, refusing anything not a subclass of ``base``
    (:func:`resolve_reference` with ``base``).

    ``reference`` is a registered short name or ``"module:QualName"``.
    """
    return resolve_reference(reference, what=f"{base.__qualname__} class", base=base)  # type: ignore[no-any-return]


def register_model_class(name: str, model_class: type) -> None:
    """Register a user's model class under ``name`` (``cairn.models.register_model``)."""
    if not isinstance(name, str) or not name or ":" in name:
        raise ConfigError(
            f"A model name must be a non-empty str without ':' (those are import references), "
            f"got {name!r:.100}.")
    _MODELS[name] = model_class


def registered_model_classes() -> dict[str, type]:
    """``{name: class}`` registered with :func:`register_model_class`."""
    return dict(_MODELS)


def model_class_reference(model_class: Any, *, what: str) -> str:
    """What a config stores for a model class: the name it is registered under, else its
    ``"module:QualName"``, which must import back to this very class (else ConfigError with
    the fix). A str is returned as it is (checked when resolved)."""
    if isinstance(model_class, str):
        return model_class
    if not isinstance(model_class, type):
        raise ConfigError(
            f"Config {what!r}={model_class!r:.100} must be a model class, a registered model "
            "name or a 'package.module:QualName' reference.")
    for name, registered in _MODELS.items():
        if registered is model_class:
            return name
    reference = f"{model_class.__module__}:{model_class.__qualname__}"
    try:
        importable = "<" not in reference and _import_attribute(reference, ConfigError) is model_class
    except ConfigError:
        importable = False
    if not importable:
        raise ConfigError(
            f"Config {what!r}: the class {model_class.__qualname__} (module {model_class.__module__!r}) "
            "cannot be imported back by its name, so a checkpoint could not name it. Define it at "
            "the top level of an importable module, or register it with "
            f"cairn.models.register_model('{model_class.__name__}', {model_class.__name__}) and pass "
            "that name.")
    return reference


def resolve_model_class(reference: Any, base: type[T], *, what: str) -> type[T]:
    """The model class a config or checkpoint names (a :func:`register_model_class` name or
    ``"module:QualName"``), which must subclass ``base`` (else UnsafeCheckpointError); an
    unknown name or a class that cannot be imported raises ConfigError naming the fix."""
    if isinstance(reference, str) and reference in _MODELS:
        model_class = _MODELS[reference]
        if not issubclass(model_class, base):
            raise UnsafeCheckpointError(
                f"Refusing {what}={reference!r}: the registered class {model_class.__qualname__} is "
                f"not a subclass of {base.__module__}.{base.__qualname__}.")
        return model_class
    if isinstance(reference, str) and ":" not in reference:
        raise ConfigError(
            f"{what}={reference!r} is not a registered model name (registered: {sorted(_MODELS)}). "
            f"Fix: import the module that calls cairn.models.register_model({reference!r}, ...) "
            "before building or restoring, or name the class as 'package.module:QualName'.")
    check_reference_form(reference, what=what)
    module_name = reference.partition(":")[0]
    try:
        import_referenced_module(module_name, what=what, reference=reference)
    except ImportError as exc:
        raise ConfigError(
            f"{what}={reference!r}: the module {module_name!r} that defines the model cannot be "
            f"imported ({exc}). Fix: install the package or put its directory on sys.path "
            "(PYTHONPATH) in this process, so that `import "
            f"{module_name}` works.") from exc
    return resolve_reference(reference, what=what, base=base)  # type: ignore[no-any-return]


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
    """Resolve a callable reference written by :func:`callable_reference`
    (:func:`resolve_reference` without a base class).

    Only plain functions defined at module level in a non-standard-library module qualify, so
    that a crafted reference cannot name ``os:system`` or ``subprocess:run``.
    """
    return resolve_reference(reference, what=what)  # type: ignore[no-any-return]
