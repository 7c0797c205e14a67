"""The directories a checkpoint load must never import code from: the checkpoint itself and
every checkpoint or :class:`~cairn.checkpoint.manager.CheckpointManager` root around it.

A hostile checkpoint can ship ``payload.py``; when the directory holding it is on ``sys.path``
(``python -c``, ``python -m cairn``, Jupyter, a script beside it) a reference such as
``"victimckpt.payload:Evil"`` would import it. The loaders open :func:`loading_checkpoint`, and
the one resolver (:mod:`cairn.module_trust`) refuses any module located in these directories
before importing it (docs/security.md, "References").
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping
from typing import Any

from cairn.checkpoint.manager import resolve_checkpoint
from cairn.checkpoint.manager_store import open_store
from cairn.checkpoint.storage import LocalStorage, resolve_storage
from cairn.errors import CheckpointError
from cairn.module_trust import checkpoint_references

__all__ = ["checkpoint_directories", "checkpoint_holding", "loading_checkpoint"]


def _local(location: Any, storage_options: Mapping[str, Any] | None) -> str | None:
    """The absolute local path of ``location``, or None for an object-store URL (nothing there
    can be imported)."""
    if not isinstance(location, (str, os.PathLike)):
        return None
    try:
        storage = resolve_storage(location, storage_options=storage_options)
    except (CheckpointError, OSError, ValueError):
        return None
    return os.path.realpath(storage.path) if isinstance(storage, LocalStorage) else None


def _holds_checkpoints(directory: str) -> bool:
    """True when ``directory`` is a checkpoint or a manager root (checkpoints inside)."""
    try:
        return open_store(directory).is_committed("") or resolve_checkpoint(directory) != directory
    except (CheckpointError, OSError):
        return False


def checkpoint_directories(location: Any, storage_options: Mapping[str, Any] | None = None) -> list[str]:
    """``location`` (a checkpoint, or a manager root), the checkpoint it means, and each parent
    directory that is itself a checkpoint or a manager root (a policy inside an Algorithm
    checkpoint, a checkpoint inside a manager root), as real local paths."""
    found = [path for path in (_local(location, storage_options),
                               _local(resolve_checkpoint(location, storage_options=storage_options),
                                      storage_options)) if path is not None]
    for start in list(found):
        parent = os.path.dirname(start)
        while parent != start and _holds_checkpoints(parent):
            found.append(parent)
            start, parent = parent, os.path.dirname(parent)
    return sorted(set(found))


def checkpoint_holding(path: str | os.PathLike[str]) -> str | None:
    """The checkpoint or manager root that holds the local file or directory ``path`` (itself,
    or the nearest such ancestor), or None. The CLI asks it before suggesting ``--import``."""
    current = os.path.realpath(os.fspath(path))
    while True:
        if os.path.isdir(current) and _holds_checkpoints(current):
            return current
        parent = os.path.dirname(current)
        if parent == current:
            return None
        current = parent


@contextlib.contextmanager
def loading_checkpoint(location: Any, storage_options: Mapping[str, Any] | None = None) -> Iterator[None]:
    """Resolve references inside the block as read from the checkpoint at ``location``
    (:func:`cairn.module_trust.checkpoint_references` of :func:`checkpoint_directories`)."""
    with checkpoint_references(*checkpoint_directories(location, storage_options)):
        yield
