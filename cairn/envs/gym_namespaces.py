"""Gymnasium IDs whose namespace a package registers: ``ALE/Breakout-v5`` needs ``ale_py``.

Since Gymnasium 1.0 nothing imports such packages by itself (``gym.make("ALE/Pong-v5")`` says
"Namespace ALE not found" until ``import ale_py``). cairn imports them for the namespaces in
:data:`GYM_NAMESPACE_PACKAGES`, a fixed table: an env ID read from a checkpoint can make cairn
import only those packages, never a module of its choosing.
"""

from __future__ import annotations

import importlib

import gymnasium as gym

from cairn.errors import ConfigError

__all__ = ["GYM_NAMESPACE_PACKAGES", "import_env_namespace"]

#: Gymnasium namespace -> (the package whose import registers its IDs, how to install it).
GYM_NAMESPACE_PACKAGES: dict[str, tuple[str, str]] = {
    "ALE": ("ale_py", "pip install 'cairn-rl[atari]' (ale-py, which ships the ROMs)"),
}


def import_env_namespace(env_id: str) -> None:
    """Import the package that registers ``env_id``'s namespace, when it is one of
    :data:`GYM_NAMESPACE_PACKAGES` and not registered yet; other IDs are left alone.

    Raises :class:`~cairn.errors.ConfigError` naming the package when it is not installed.

    >>> import_env_namespace("ALE/Breakout-v5")  # doctest: +SKIP
    >>> gym.spec("ALE/Breakout-v5").id
    'ALE/Breakout-v5'
    """
    namespace, slash, _ = env_id.partition("/")
    if not slash or namespace not in GYM_NAMESPACE_PACKAGES:
        return
    if any(spec.namespace == namespace for spec in gym.envs.registry.values()):
        return
    package, install = GYM_NAMESPACE_PACKAGES[namespace]
    try:
        module = importlib.import_module(package)
    except ImportError as exc:
        raise ConfigError(f"Environment {env_id!r} is registered by the package {package!r}, "
                          f"which could not be imported ({exc}). Fix: {install}.") from exc
    gym.register_envs(module)
