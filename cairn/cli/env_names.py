"""What ``--env`` and ``--import`` take on the command line.

``--env`` names an environment in one of these forms, tried in this order:

1. a name registered with :func:`cairn.register_env` (by a module that ``--import`` names);
2. ``pettingzoo.<family>.<env>`` (or ``...:parallel_env``): one of PettingZoo's own envs (a
   turn-based game without ``parallel_env``, such as ``pettingzoo.classic.connect_four_v3``,
   through its AEC ``env()``),
   created by :func:`cairn.envs.pettingzoo_env.make_pettingzoo_env`;
3. ``package.module:function``: an env creator ``function(env_config) -> env``, resolved by
   :func:`cairn.registry.resolve_callable` (a module-level function; checkpoints store the
   reference, and a restore imports it again);
4. ``package.module:EnvId-v0``: Gymnasium's form, "import the module, then make the ID": when
   the module has no function of that name, the module is imported (it registers the ID) and the
   bare ID is what the config keeps (a checkpoint never imports modules for environments; later
   commands import it through ``--import package.module``);
5. a Gymnasium ID, ``ALE/Breakout-v5`` included (its namespace's package is imported).

Modules the user names (``--import``, and the module part of forms 3-4) are imported with the
working directory first on ``sys.path``, as ``python -m`` would, only while they are imported;
what a checkpoint names later resolves only against installed modules and those already imported.
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import os
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from cairn.cli.common import UsageError
from cairn.registry import CALLABLE_KEY, callable_reference

__all__ = ["add_import_option", "import_user_modules", "resolve_env", "env_label", "ENV_HELP", "ENV_FORMS",
           "ENV_HINT"]

ENV_HELP = ("a Gymnasium ID (ALE/Breakout-v5), a name registered with cairn.register_env (see --import), "
            "package.module:make_env (a creator(env_config) -> env), "
            "package.module:EnvId-v0 (import, then make), "
            "or a PettingZoo env module (pettingzoo.classic.rps_v2)")

ENV_FORMS = """\
--env takes: a Gymnasium ID (CartPole-v1; ALE/Breakout-v5 imports ale_py itself); a name
registered with cairn.register_env in a module that --import names; package.module:make_env, a
function make_env(env_config) -> env (stored in checkpoints by reference); package.module:EnvId-v0,
Gymnasium's "import the module, then make EnvId-v0" (checkpoints keep the bare ID: later commands
need --import package.module); or a PettingZoo env module, pettingzoo.classic.rps_v2 (its
parallel_env(), keyword arguments from --config env_config=...). --import MODULE (repeatable)
imports your module first, from the working directory or the installed packages."""

ENV_HINT = ("--env also takes a name registered with cairn.register_env by a module that "
            "--import MODULE names, package.module:make_env (a function make_env(env_config) -> env), "
            "package.module:EnvId-v0, and PettingZoo env modules (pettingzoo.classic.rps_v2); "
            "cairn train --help lists the forms.")

#: The creator behind ``--env pettingzoo.<family>.<env>`` (its env_config names the module).
_PETTINGZOO_CREATOR = "cairn.envs.pettingzoo_env:make_pettingzoo_env"


def env_label(env: Any, env_config: Any = None) -> str:
    """The environment as a user names it, for titles and progress lines: a Gymnasium ID or
    registered name as it is; a PettingZoo env module (``pettingzoo.classic.connect_four_v3``)
    for :func:`~cairn.envs.pettingzoo_env.make_pettingzoo_env`; another creator by its
    ``module:function`` reference (or its name when it has none). ``env`` is the config's value
    or its JSON form in config.json (a creator stored as ``{"__callable__": ..., "name": ...}``)."""
    if isinstance(env, str):
        return env
    if isinstance(env, dict):  # config.json's form of a creator
        reference, name = env.get(CALLABLE_KEY), env.get("name")
    else:
        reference = callable_reference(env) if callable(env) else None
        name = getattr(env, "__qualname__", None)
    module = env_config.get("env_module") if isinstance(env_config, dict) else None
    if reference == _PETTINGZOO_CREATOR and isinstance(module, str) and module:
        return module
    return str(reference or name or "env")


def add_import_option(parser: argparse.ArgumentParser) -> None:
    """Add ``--import MODULE`` (repeatable) to a command's parser."""
    parser.add_argument("--import", action="append", default=[], dest="imports", metavar="MODULE",
                        help="import MODULE before anything else (repeatable), so that its "
                             "cairn.register_env and cairn.register_class calls run; "
                             "looked up in the working directory first")


@contextmanager
def _working_directory_importable() -> Iterator[None]:
    """The working directory first on ``sys.path`` for the block (the ``cairn`` script, unlike
    ``python -m cairn``, does not put it there), removed again afterwards."""
    cwd = os.getcwd()
    added = cwd not in sys.path and "" not in sys.path
    if added:
        sys.path.insert(0, cwd)
    try:
        yield
    finally:
        if added and cwd in sys.path:
            sys.path.remove(cwd)


def _import(module: str, flag: str) -> Any:
    if not module or not all(part.isidentifier() for part in module.split(".")):
        raise UsageError(f"{flag}: {module!r} is not a module name (package.module).")
    try:
        with _working_directory_importable():
            return importlib.import_module(module)
    except ImportError as exc:
        raise UsageError(f"{flag}: cannot import {module!r} ({exc}); is it installed, or a .py file in the "
                         "working directory?") from None


def import_user_modules(modules: Sequence[str]) -> None:
    """Import each module of ``--import``, in order (their ``register_env`` calls run)."""
    for module in modules:
        _import(module, f"--import {module}")


def resolve_env(value: str, flag: str = "--env") -> tuple[Any, dict[str, Any]]:
    """The config's ``env`` for ``--env value``, and ``env_config`` entries it needs (the
    PettingZoo module's name); see the module docstring for the forms and their order."""
    from cairn.registry import registered_envs

    if value in registered_envs():
        return value, {}
    module, colon, attribute = value.partition(":")
    if module.split(".")[0] == "pettingzoo" and attribute in ("", "parallel_env"):
        return _pettingzoo(module, flag), {"env_module": module}
    if colon:
        return _import_path(value, module, attribute, flag), {}
    return _gymnasium_id(value, flag), {}


def _pettingzoo(module: str, flag: str) -> Any:
    from cairn.envs.pettingzoo_env import make_pettingzoo_env

    imported = _import(module, f"{flag} {module}")
    if not any(callable(getattr(imported, name, None)) for name in ("parallel_env", "env")):
        raise UsageError(f"{flag} {module}: it has no parallel_env() or env(); name a PettingZoo env module "
                         "such as pettingzoo.classic.rps_v2 or pettingzoo.classic.connect_four_v3.")
    return make_pettingzoo_env


def _import_path(value: str, module_name: str, attribute: str, flag: str) -> Any:
    """``package.module:make_env`` (a creator function) or ``package.module:EnvId-v0``."""
    import gymnasium as gym

    from cairn.errors import CairnError
    from cairn.registry import resolve_callable

    module = _import(module_name, f"{flag} {value}")
    found = getattr(module, attribute, None) if attribute.isidentifier() else None
    if inspect.isfunction(found):
        try:
            return resolve_callable(value, what="env")
        except CairnError as exc:  # e.g. re-exported from another module: name where it is defined
            raise UsageError(f"{flag} {value}: {exc}") from None
    if found is not None:
        raise UsageError(f"{flag} {value}: {attribute!r} is a {type(found).__name__}, not a function; name a "
                         "module-level function make_env(env_config) -> env (it is stored by reference).")
    try:
        gym.spec(attribute)  # Gymnasium's module:EnvId: importing the module registered it
    except gym.error.Error:
        raise UsageError(f"{flag} {value}: {module_name!r} has no function {attribute!r}, and importing it "
                         f"registered no Gymnasium ID {attribute!r}. {ENV_HINT}") from None
    return attribute


def _gymnasium_id(value: str, flag: str) -> str:
    from cairn.config.checks import check_env
    from cairn.errors import ConfigError

    try:
        check_env(value)  # imports the package of a namespace cairn knows (ALE/...)
    except ConfigError as exc:
        raise UsageError(f"{flag} {value}: {exc} {ENV_HINT}") from None
    return value


def restore_hint(exc: BaseException, *, env_option: bool = True) -> str | None:
    """How the command line gives a checkpoint back what its restore lacked: the module that
    registers its environment or defines a class, creator or scripted opponent it names
    (``--import``), or, where the command has ``--env`` (``env_option``), the environment
    itself, as ``config_overrides={'env': ...}`` would (a creator that was not stored). None
    for other failures."""
    import re

    from cairn.errors import CheckpointEnvError, MissingCallableError

    chain: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and len(chain) < 8:
        chain.append(current)
        current = current.__cause__
    name_env = "--env ENV gives the environment (package.module:make_env, a Gymnasium ID, ...; see --help)"
    for error in chain:
        if isinstance(error, MissingCallableError) and "'env'" in str(error) and env_option:
            return f"From the command line: {name_env}."
        if isinstance(error, CheckpointEnvError):
            return ("From the command line: --import MODULE runs the module that registers it "
                    "(from the working directory or the installed packages)"
                    f"{', or ' + name_env if env_option else ''}.")
    reference = re.search(r"Could not resolve (?:opponent )?'([\w.]+):", str(exc))
    if reference and any(isinstance(error, ModuleNotFoundError) for error in chain):
        module = reference.group(1)
        holder = _checkpoint_holding_module(module)
        if holder is not None:  # --import would run code that came with a checkpoint
            return (f"{module!r} would be imported from inside {holder}, which holds checkpoints: "
                    "never import code that comes with a checkpoint; it may be hostile.")
        return (f"From the command line: --import {module} "
                f"(run in the directory that holds {module.split('.')[0]}, or install it).")
    return None


def _checkpoint_holding_module(module: str) -> str | None:
    """The checkpoint (or manager root) that ``--import module`` would import its top-level
    package from, located as ``--import`` would (the working directory first) without running
    it; None when it would come from elsewhere or is not found."""
    import importlib.util

    from cairn.checkpoint.reference_scope import checkpoint_holding

    top = module.split(".")[0]
    loaded = sys.modules.get(top)
    with _working_directory_importable():
        spec = loaded.__spec__ if loaded is not None else importlib.util.find_spec(top)
    if spec is None:
        return None
    places = [*([spec.origin] if spec.has_location and spec.origin else []),
              *(spec.submodule_search_locations or [])]
    return next((holder for place in places if (holder := checkpoint_holding(place)) is not None), None)
