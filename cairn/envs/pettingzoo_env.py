"""PettingZoo's own environments by module name, for configs and the command line.

PettingZoo ships each environment as a module with a ``parallel_env(**kwargs)`` constructor
(``from pettingzoo.classic import rps_v2; rps_v2.parallel_env()``). cairn's env creators take
one ``env_config`` dict, so :func:`make_pettingzoo_env` stands between: ``env_config`` names the
module (``"env_module": "pettingzoo.classic.rps_v2"``) and holds its keyword arguments. Being a
module-level function, it is stored in checkpoints by reference; the module it imports must lie
inside the ``pettingzoo`` package, so a checkpoint's ``env_config`` cannot name any other.
For another package with PettingZoo's API, write a creator of your own.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any

from cairn.errors import ConfigError, EnvError

__all__ = ["make_pettingzoo_env", "PETTINGZOO_PACKAGE"]

PETTINGZOO_PACKAGE = "pettingzoo"


def make_pettingzoo_env(env_config: Mapping[str, Any] | None = None) -> Any:
    """``<env_module>.parallel_env(**rest)`` for ``env_config = {"env_module": "pettingzoo.<family>.<env>",
    **rest}``: a PettingZoo ParallelEnv; for a turn-based game with no ``parallel_env`` (the
    classic board games), its AEC ``env(**rest)``.

    Raises :class:`~cairn.errors.ConfigError` for a module outside ``pettingzoo`` or without
    ``parallel_env``/``env``, and :class:`~cairn.errors.EnvError` when it cannot be imported (PettingZoo's
    families need extras: ``pip install 'pettingzoo[butterfly]'``).

    >>> env = make_pettingzoo_env({"env_module": "pettingzoo.classic.rps_v2"})  # doctest: +SKIP
    >>> env.possible_agents  # doctest: +SKIP
    ['player_0', 'player_1']
    """
    options = dict(env_config or {})
    name = options.pop("env_module", None)
    parts = name.split(".") if isinstance(name, str) else []
    if len(parts) < 2 or parts[0] != PETTINGZOO_PACKAGE or not all(part.isidentifier() for part in parts):
        raise ConfigError("make_pettingzoo_env needs env_config['env_module'], a module of the "
                          f"pettingzoo package such as 'pettingzoo.classic.rps_v2'; got {name!r:.100}.")
    try:
        module = importlib.import_module(name)
    except ImportError as exc:
        raise EnvError(f"Could not import the PettingZoo env {name!r}: {exc}. Its family may need an extra "
                       f"(pip install 'pettingzoo[{parts[1]}]').") from exc
    # Games where agents take turns (pettingzoo.classic's connect_four_v3, tictactoe_v3, ...)
    # have only the AEC env(): cairn's turn-based runner steps it as it is (docs/multi-agent.md).
    constructor = getattr(module, "parallel_env", None) or getattr(module, "env", None)
    if not callable(constructor):
        raise ConfigError(f"{name!r} has no parallel_env() or env(): name one of PettingZoo's env modules, "
                          "such as 'pettingzoo.classic.rps_v2' or 'pettingzoo.classic.connect_four_v3'.")
    return constructor(**options)
