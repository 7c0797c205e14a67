"""The few storage operations a :class:`~cairn.checkpoint.manager.CheckpointManager` needs on its
root: list it, tell a committed checkpoint, read and write a small JSON record atomically, and
delete a checkpoint so that it is never seen half deleted.

:class:`ManagerStore` works on any :class:`~cairn.checkpoint.storage.Storage`; how each step is
made safe on a medium is the storage's (a local checkpoint is renamed to a temporary name
before it is deleted, an object-store one loses its manifest first: docs/storage.md).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Collection, Mapping
from typing import Any

from cairn.checkpoint.storage import Storage, resolve_storage
from cairn.errors import CheckpointError

__all__ = ["ManagerStore", "open_store"]

_RECORD_LIMIT = 1 << 20


class ManagerStore:
    """A manager's root; names are entries directly under it ("" is the root itself)."""

    def __init__(self, storage: Storage) -> None:
        self.storage = storage

    def location(self, name: str) -> str:
        """The location of ``name`` (a path or URI that the checkpoint functions accept)."""
        return self.storage.child(name).url if name else self.storage.url

    def list_names(self) -> list[str]:
        """The names of the entries under the root (none when the root does not exist)."""
        return self.storage.list_entries()

    def is_committed(self, name: str) -> bool:
        """Whether ``name`` is a committed checkpoint (its manifest is there)."""
        return self.storage.is_committed(name)

    def read_json(self, name: str) -> Any:
        """The JSON value of the file ``name``; None when missing or unreadable."""
        try:
            return json.loads(self.storage.read_bytes(name, limit=_RECORD_LIMIT))
        except (CheckpointError, OSError, ValueError):
            return None

    def write_json(self, name: str, data: Any) -> None:
        """Write ``data`` as the file ``name``: readers see the old file or the whole new one."""
        self.storage.write_record(name, json.dumps(data, indent=1, allow_nan=False).encode())

    def remove_checkpoint(self, name: str) -> None:
        """Delete the checkpoint ``name``; it stops being committed before any file goes."""
        self.storage.remove_checkpoint(name)

    def remove_file(self, name: str) -> None:
        """Delete the file ``name`` if it exists."""
        self.storage.delete(name)

    def clean_stale(self, committed: Collection[str], *, is_checkpoint: Callable[[str], bool],
                    record_suffix: str) -> None:
        """Remove what crashed saves left: temporaries of dead processes, uncommitted
        checkpoints, and records (``<checkpoint name><record_suffix>``) of no committed one."""
        self.storage.remove_leftovers()
        for name in self.list_names():
            if name.endswith(record_suffix) and name[:-len(record_suffix)] not in committed:
                self.storage.delete(name)  # the record of a save that never committed
            elif is_checkpoint(name) and name not in committed:
                self.storage.delete_prefix(name)  # a checkpoint that never committed

    def __repr__(self) -> str:
        return f"ManagerStore({self.storage.url!r})"


def open_store(root: str | os.PathLike[str],
               storage_options: Mapping[str, Any] | None = None) -> ManagerStore:
    """The store of a manager root: a local path or ``file://`` URL, or any URL the checkpoint
    layer's storage takes (``s3://``, ``gs://``, ``memory://``), with its ``storage_options``."""
    return ManagerStore(resolve_storage(root, storage_options=storage_options).absolute())
