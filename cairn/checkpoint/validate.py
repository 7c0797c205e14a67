"""Structural checks on loaded state trees that know no class above the checkpoint layer.

A state that passed its hash check is still untrusted data: whoever can edit the files can edit
the manifest. The layers that build objects from a tree check what their objects need
(:mod:`cairn.policy.state_check`, :mod:`cairn.algorithms.save_restore`) with these helpers,
which turn a tree of the wrong shape into a clear ``CheckpointFormatError``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from cairn.errors import CheckpointFormatError
from cairn.registry import check_class_reference_form

__all__ = ["MAX_COUNT", "require_types", "require_counts", "array_map", "check_policy_ids_agree",
           "check_class_agrees", "stored_class"]

#: The largest counter a checkpoint may hold (int64's): iterations, env steps, timesteps.
MAX_COUNT = (1 << 63) - 1


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


def require_counts(counts: Mapping[str, Any], where: Any, what: str) -> None:
    """Refuse counters (iterations, steps, updates) that are not ints in ``[0, MAX_COUNT]``:
    ``-7`` or ``10**300`` in a state would load silently and break schedules, metrics and
    exports later, far from the file that caused it."""
    for key, value in counts.items():
        if type(value) is not int or not 0 <= value <= MAX_COUNT:
            raise CheckpointFormatError(
                f"{where}: the {what} counter {key!r} is {value!r:.40}; counters are ints from 0 "
                f"to {MAX_COUNT} (2**63 - 1)."
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


def stored_class(state: Mapping[str, Any], checkpoint_type: str) -> Any:
    """The class reference a state tree of ``checkpoint_type`` holds: an Algorithm state's
    ``algorithm_class``, a Policy state's ``spec.policy_class`` (None when absent)."""
    if checkpoint_type == "Algorithm":
        return state.get("algorithm_class")
    spec = state.get("spec")
    return spec.get("policy_class") if isinstance(spec, Mapping) else None


def check_class_agrees(state: Mapping[str, Any], manifest: Mapping[str, Any], where: Any) -> None:
    """A checkpoint's manifest ``class`` must be the class its state names (the writer copies
    one into the other; docs/checkpoint-format.md, section 5): ``cairn checkpoint info`` and the
    class check of ``PPO.from_checkpoint`` read the manifest, the build reads the state."""
    found = stored_class(state, manifest["type"])
    if isinstance(found, str):  # refused as unsafe before a mismatch
        check_class_reference_form(found, what=f"{where}: the state's class")
    if found != manifest["class"]:
        raise CheckpointFormatError(
            f"{where}: the manifest names class {manifest['class']!r:.100}, the state "
            f"{found!r:.100}; a checkpoint names one class in both."
        )
