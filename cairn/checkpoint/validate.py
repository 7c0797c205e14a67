"""Structural checks on loaded state trees that know no class above the checkpoint layer.

A state that passed its hash check is still untrusted data: whoever can edit the files can edit
the manifest. The layers that build objects from a tree check what their objects need
(:mod:`cairn.policy.state_check`, :mod:`cairn.algorithms.checkpointing`) with these helpers,
which turn a tree of the wrong shape into a clear ``CheckpointFormatError``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from cairn.errors import CheckpointFormatError

__all__ = ["require_types", "array_map", "check_policy_ids_agree"]


def require_types(state: Mapping[str, Any], keys: Mapping[str, type], where: Any, what: str) -> None:
    """Refuse a ``state`` whose ``keys`` are missing or not of the given types (``bool`` is no
    ``int``), naming ``where`` and the ``what`` state."""
    for key, kind in keys.items():
        value = state.get(key)
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            raise CheckpointFormatError(
                f"{where}: the {what} state's {key!r} should be a {kind.__name__}, got "
                f"{type(value).__name__}."
            )


def array_map(tree: Any, where: Any, what: str) -> dict[str, np.ndarray]:
    """``tree`` if it maps str names to numpy arrays; else ``CheckpointFormatError``."""
    if not isinstance(tree, dict) or not all(
            isinstance(k, str) and isinstance(v, np.ndarray) for k, v in tree.items()):
        raise CheckpointFormatError(f"{where}: {what} must map parameter names to arrays.")
    return tree


def check_policy_ids_agree(state: Mapping[str, Any], manifest: Mapping[str, Any], where: Any) -> None:
    """An Algorithm state's ``policy_ids`` must be its manifest's (docs/checkpoint-format.md,
    section 5)."""
    if state.get("policy_ids") != manifest["policy_ids"]:
        raise CheckpointFormatError(
            f"{where}: the algorithm state lists policies {state.get('policy_ids')!r:.200}, the "
            f"manifest {manifest['policy_ids']!r:.200}."
        )
