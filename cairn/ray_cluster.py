"""Ray, imported and initialised on first use by the remote env runners and the remote learners
alike (the ``ray`` extra): ``import cairn`` stays fast and works without it."""

from __future__ import annotations

import logging
import os
import signal
from typing import Any

from cairn.errors import ConfigError

__all__ = ["ensure_ray", "ray_sigterm_handler"]

logger = logging.getLogger("cairn")

_ray_sigterm_handler: Any = None


def ray_sigterm_handler() -> Any:
    """The SIGTERM handler that ``ray.init`` installed (it exits the process at once) when cairn
    started Ray over Python's default SIGTERM disposition, else None: it stands for that default,
    so ``cairn train`` may replace it as it replaces the default one."""
    return _ray_sigterm_handler


def ensure_ray(
    needed_by: str = "num_env_runners > 0",
    instead: str = "set num_env_runners=0 to sample in this process",
) -> Any:
    """The ``ray`` module, with Ray initialised: the user's cluster when ``ray.init`` ran
    (or ``RAY_ADDRESS`` names one), else a local one that cairn starts and says so.
    ``needed_by`` and ``instead`` name, in the error without Ray, the setting that asked for it
    and the way to do without."""
    try:
        import ray
    except ImportError:
        raise ConfigError(
            f"{needed_by} needs Ray: pip install 'cairn-rl[ray]', or {instead}."
        ) from None
    if not ray.is_initialized():
        address = os.environ.get("RAY_ADDRESS")
        logger.info(
            "cairn: Ray is not initialised; starting %s for %s (call ray.init(...) first to "
            "choose the cluster).",
            f"a connection to RAY_ADDRESS={address}" if address else "a local Ray instance",
            needed_by,
        )
        global _ray_sigterm_handler
        before = signal.getsignal(signal.SIGTERM)
        ray.init(include_dashboard=False, log_to_driver=False, configure_logging=False)
        after = signal.getsignal(signal.SIGTERM)
        _ray_sigterm_handler = after if before is signal.SIG_DFL and after is not before else None
    return ray
