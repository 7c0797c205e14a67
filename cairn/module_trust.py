"""Which modules a checkpoint may make cairn import: located before they run, trusted by the user.

A reference such as ``"my_project.models:Net"`` makes :func:`cairn.registry.resolve_reference`
import ``my_project.models``. Importing runs the module's top-level code, so *where* the module
is decides whether that is safe, and it is decided before anything runs
(:func:`import_referenced_module`), one package level at a time: a top-level name is located
with :func:`importlib.util.find_spec` (which runs no code of the module), then imported; each
submodule is located in its (now imported, checked) parent's ``__path__`` before it is imported.

Never imported for a reference, anywhere:

* the standard library, by location (``sysconfig``'s ``stdlib``/``platstdlib`` outside the
  site-packages directories, built-in and frozen modules such as ``__hello__``), not only by
  :data:`sys.stdlib_module_names` (which lacks ``test`` and ``__hello__``).

Never imported because of a checkpoint, that is inside :func:`checkpoint_references` (the
loaders of ``Algorithm.from_checkpoint``, ``Algorithm.restore``, ``Policy.from_checkpoint`` and
component restores open it with the checkpoint's directory and any manager root holding it):

* a module located inside one of those directories (a ``payload.py`` shipped in a hostile
  checkpoint whose parent happens to be on ``sys.path``: ``python -c``, Jupyter, a script beside it);
* a namespace package (a directory without ``__init__.py``: any directory on ``sys.path``
  qualifies, a checkpoint's included), nor a submodule located outside its top-level package;
* in strict mode (:func:`trust_modules`, or the ``CAIRN_TRUSTED_MODULES`` environment
  variable), any module outside ``cairn`` and the packages the user named, imported or not.

A module that is already imported was imported by the user, not by the checkpoint: it is
checked only against the standard-library rule and strict mode. So ``import my_models`` (or
the CLI's ``--import my_models``) before loading is the way to use a namespace package.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import importlib.util
import os
import site
import sys
import sysconfig
from collections.abc import Iterable, Iterator
from contextvars import ContextVar
from importlib.machinery import ModuleSpec
from types import ModuleType

from cairn.errors import ConfigError, UnsafeCheckpointError

__all__ = [
    "TRUSTED_MODULES_ENV",
    "trust_modules",
    "trusted_modules",
    "checkpoint_references",
    "import_referenced_module",
    "is_standard_library",
]

#: Environment variable that turns strict mode on in processes that did not call
#: :func:`trust_modules` (a comma-separated list of top-level or dotted module names).
TRUSTED_MODULES_ENV = "CAIRN_TRUSTED_MODULES"

#: The directories of the checkpoints being loaded in this context (real paths), or None
#: outside every load.
_CHECKPOINT_DIRS: ContextVar[tuple[str, ...] | None] = ContextVar("cairn_checkpoint_dirs", default=None)
_trusted: tuple[str, ...] | None = None
_ALWAYS_TRUSTED = ("cairn",)


def trust_modules(modules: Iterable[str] | None) -> None:
    """Strict mode: from now on, a checkpoint may make cairn import (or use) only modules in
    ``modules`` (and their submodules) and ``cairn`` itself; ``None`` returns to the default
    mode (any installed module outside the standard library). Like skops' ``trusted=`` and
    torch's ``add_safe_globals``: what a checkpoint may name is what you listed.

    >>> trust_modules(["my_project"])   # my_project.models:Net loads, other_pkg.x:Y is refused
    >>> trust_modules(None)             # back to the default
    """
    global _trusted
    if modules is None:
        _trusted = None
        return
    if isinstance(modules, str):
        raise ConfigError(f"trust_modules takes a list of module names, got the str {modules!r}; "
                          f"write trust_modules([{modules!r}]).")
    names = tuple(modules)
    for name in names:
        if not isinstance(name, str) or not name or not all(p.isidentifier() for p in name.split(".")):
            raise ConfigError(f"trust_modules: {name!r} is not a module name ('package' or "
                              "'package.module').")
    _trusted = names


def trusted_modules() -> tuple[str, ...] | None:
    """The modules strict mode allows (:func:`trust_modules`, else ``$CAIRN_TRUSTED_MODULES``),
    ``cairn`` included; None in the default mode."""
    names = _trusted
    if names is None:
        listed = os.environ.get(TRUSTED_MODULES_ENV)
        if listed is None:
            return None
        names = tuple(name.strip() for name in listed.split(",") if name.strip())
    return _ALWAYS_TRUSTED + names


@contextlib.contextmanager
def checkpoint_references(*directories: str | os.PathLike[str]) -> Iterator[None]:
    """Within the block, references are resolved as read from a checkpoint whose local
    ``directories`` (the checkpoint, a manager root holding it) no module may come from.
    Blocks nest; their directories add up."""
    found = tuple(os.path.realpath(os.fspath(d)) for d in directories)
    token = _CHECKPOINT_DIRS.set((_CHECKPOINT_DIRS.get() or ()) + found)
    try:
        yield
    finally:
        _CHECKPOINT_DIRS.reset(token)


def _inside(path: str, directory: str) -> bool:
    return path == directory or path.startswith(directory.rstrip(os.sep) + os.sep)


@functools.lru_cache(maxsize=1)
def _library_dirs() -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(standard-library directories, site-packages directories), real paths; fixed for the
    life of the process (sysconfig's scheme)."""
    paths = sysconfig.get_paths()
    user = site.getusersitepackages()
    sites = [paths["purelib"], paths["platlib"], *site.getsitepackages(),
             *([user] if isinstance(user, str) else user)]
    stdlib = [paths["stdlib"], paths["platstdlib"]]
    return tuple(os.path.realpath(d) for d in stdlib), tuple(os.path.realpath(d) for d in sites)


@functools.lru_cache(maxsize=4096)  # resolving cairn's own writer on every save stays cheap
def is_standard_library(path: str) -> bool:
    """True when the file or directory ``path`` belongs to the standard library: inside
    sysconfig's ``stdlib``/``platstdlib`` and not inside a site-packages directory (a virtual
    environment's ``platstdlib`` holds its site-packages; a base interpreter's
    ``lib/python3.X/site-packages`` is no standard library either)."""
    real = os.path.realpath(path)
    stdlib, sites = _library_dirs()
    if any(_inside(real, d) for d in sites):
        return False
    return any(_inside(real, d) and not {"site-packages", "dist-packages"} & set(
        os.path.relpath(real, d).split(os.sep)) for d in stdlib)


def _locations(spec: ModuleSpec | None, module: ModuleType | None = None) -> list[str]:
    """The files and directories a module is (or would be) loaded from."""
    found: list[str] = []
    if spec is not None:
        if spec.has_location and spec.origin:
            found.append(spec.origin)
        found.extend(spec.submodule_search_locations or ())
    elif module is not None:
        found.extend(p for p in [getattr(module, "__file__", None)] if isinstance(p, str))
        found.extend(p for p in getattr(module, "__path__", ()) if isinstance(p, str))
    return found


def _refuse(what: str, reference: str, why: str, fix: str) -> UnsafeCheckpointError:
    return UnsafeCheckpointError(f"Refusing {what} reference {reference!r}: {why}. {fix}")


def _check_standard_library(name: str, spec: ModuleSpec | None, module: ModuleType | None,
                            what: str, reference: str) -> None:
    frozen_or_builtin = spec is not None and spec.origin in ("built-in", "frozen")
    if frozen_or_builtin or any(is_standard_library(p) for p in _locations(spec, module)):
        raise _refuse(what, reference, f"the module {name!r} is part of the standard library, which "
                      "cairn never imports or calls for a reference", f"Pass {what} explicitly.")


def _check_trusted(module_name: str, what: str, reference: str) -> None:
    trusted = trusted_modules()
    if trusted is not None and _CHECKPOINT_DIRS.get() is not None and not any(
            module_name == t or module_name.startswith(t + ".") for t in trusted):
        raise _refuse(what, reference, f"strict mode trusts only the modules {list(trusted)}, and "
                      f"{module_name!r} is not one of them",
                      f"If you trust it, add it: cairn.trust_modules([..., {module_name.split('.')[0]!r}]) "
                      f"or {TRUSTED_MODULES_ENV}.")


def _check_located(name: str, spec: ModuleSpec, top: list[str], what: str, reference: str) -> None:
    """Refuse, before it is imported because of a checkpoint, a module inside the checkpoint,
    a namespace package, or a submodule outside its top-level package's directories."""
    dirs = _CHECKPOINT_DIRS.get() or ()
    where = [os.path.realpath(p) for p in _locations(spec)]
    inside = [d for d in dirs if any(_inside(p, d) for p in where)]
    if inside:
        raise _refuse(what, reference, f"the module {name!r} is located inside the checkpoint "
                      f"({inside[0]}), and cairn never imports code that comes with a checkpoint",
                      "Do not load this checkpoint; it may be hostile.")
    if spec.origin is None or (not spec.has_location and spec.submodule_search_locations is not None):
        raise _refuse(what, reference, f"{name!r} is a namespace package (a directory without "
                      "__init__.py, which any directory on sys.path can be), not imported yet",
                      "If it is your code, import it before loading (`import "
                      f"{reference.partition(':')[0]}`, or the CLI's --import), or make it a regular "
                      "package.")
    top = [os.path.realpath(p) for p in top]
    if top and not all(any(_inside(p, t) for t in top) for p in where):
        raise _refuse(what, reference, f"the submodule {name!r} is located at {where}, outside "
                      f"its top-level package ({top})", "Import it yourself before loading if you trust it.")


def import_referenced_module(module_name: str, *, what: str, reference: str) -> ModuleType:
    """Import ``module_name`` for ``reference`` (the place: ``what``) under the rules of this
    module's docstring; each package level is located and checked before it runs.

    Raises ``UnsafeCheckpointError`` for a refused module, ``ModuleNotFoundError`` for one that
    does not exist (the resolver turns it into a ``CheckpointConfigError``).
    """
    _check_trusted(module_name, what, reference)
    parts = module_name.split(".")
    top: list[str] = []
    for depth in range(1, len(parts) + 1):
        name = ".".join(parts[:depth])
        loaded = sys.modules.get(name)
        if loaded is not None:  # imported by the user (or cairn): only the stdlib rule applies
            spec = getattr(loaded, "__spec__", None)
            _check_standard_library(name, spec, loaded, what, reference)
            if depth == 1:
                top = _locations(spec, loaded)
            continue
        # The parent (if any) is imported and checked: find_spec looks in its __path__ and
        # runs nothing of ``name`` itself.
        spec = importlib.util.find_spec(name)
        if spec is None:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        _check_standard_library(name, spec, None, what, reference)
        if _CHECKPOINT_DIRS.get() is not None:
            _check_located(name, spec, top if depth > 1 else [], what, reference)
        importlib.import_module(name)
        if depth == 1:
            top = _locations(spec)
    return sys.modules[module_name]
