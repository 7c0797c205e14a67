"""The few storage operations a :class:`~cairn.checkpoint.manager.CheckpointManager` needs on its
root: list it, tell a committed checkpoint, read and write a small JSON record atomically, and
delete a checkpoint so that it is never seen half deleted.

:class:`LocalStore` works on a directory: a deleted checkpoint is first renamed to a temporary
name (one atomic step), which :func:`cairn.checkpoint.atomic.cleanup` removes if the process
dies before the rest. :class:`ObjectStore` works through the checkpoint layer's
:class:`~cairn.checkpoint.storage.Storage` (fsspec): without rename, a deleted checkpoint
loses its manifest first (it is then uncommitted, which readers refuse), then its objects.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
from collections.abc import Callable, Collection, Mapping
from pathlib import Path
from typing import Any, Protocol

from cairn.checkpoint.atomic import TMP_MARKER, cleanup, fsync_dir, owner_pid, pid_alive
from cairn.checkpoint.format import MANIFEST_FILE
from cairn.checkpoint.storage import Storage, resolve_storage
from cairn.errors import CheckpointCorruptedError, CheckpointNotFoundError

__all__ = ["ManagerStore", "LocalStore", "ObjectStore", "open_store"]

_RECORD_LIMIT = 1 << 20


class ManagerStore(Protocol):
    """A manager's root; names are entries directly under it ("" is the root itself)."""

    def location(self, name: str) -> str:
        """The location of ``name`` (a path or URI that the checkpoint functions accept)."""
        ...

    def list_names(self) -> list[str]:
        """The names of the entries under the root (none when the root does not exist)."""
        ...

    def is_committed(self, name: str) -> bool:
        """Whether ``name`` is a committed checkpoint (its manifest is there)."""
        ...

    def read_json(self, name: str) -> Any:
        """The JSON value of the file ``name``; None when missing or unreadable."""
        ...

    def write_json(self, name: str, data: Any) -> None:
        """Write ``data`` as the file ``name``: readers see the old file or the whole new one."""
        ...

    def remove_checkpoint(self, name: str) -> None:
        """Delete the checkpoint ``name``; it stops being committed before any file goes."""
        ...

    def remove_file(self, name: str) -> None:
        """Delete the file ``name`` if it exists."""
        ...

    def clean_stale(self, committed: Collection[str], *, is_checkpoint: Callable[[str], bool],
                    record_suffix: str) -> None:
        """Remove what crashed saves left: temporaries of dead processes, uncommitted
        checkpoints, and records (``<checkpoint name><record_suffix>``) of no committed one."""
        ...


class LocalStore:
    """A manager root on the local file system."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root).absolute()

    def location(self, name: str) -> str:
        return str(self.root / name) if name else str(self.root)

    def list_names(self) -> list[str]:
        try:
            return os.listdir(self.root)
        except (FileNotFoundError, NotADirectoryError):
            return []

    def is_committed(self, name: str) -> bool:
        return (self.root / name / MANIFEST_FILE).is_file()

    def read_json(self, name: str) -> Any:
        try:
            return json.loads((self.root / name).read_bytes())
        except (OSError, ValueError):
            return None

    def write_json(self, name: str, data: Any) -> None:
        # Atomic (rename), but not fsynced: a record is written just before a checkpoint whose
        # commit fsyncs this same directory, and a record lost to a power cut only loses a
        # metric (an unreadable record reads as none). It keeps save(blocking=False) cheap.
        self.root.mkdir(parents=True, exist_ok=True)
        tmp = self._temporary(name)
        try:
            tmp.write_bytes(json.dumps(data, indent=1, allow_nan=False).encode())
            os.replace(tmp, self.root / name)
        finally:
            with contextlib.suppress(FileNotFoundError):
                tmp.unlink()

    def remove_checkpoint(self, name: str) -> None:
        # One rename makes it invisible; cleanup() removes the rest if we die during rmtree.
        doomed = self._temporary(name)
        try:
            os.rename(self.root / name, doomed)
        except FileNotFoundError:
            return
        fsync_dir(self.root)
        shutil.rmtree(doomed)

    def remove_file(self, name: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            (self.root / name).unlink()

    def clean_stale(self, committed: Collection[str], *, is_checkpoint: Callable[[str], bool],
                    record_suffix: str) -> None:
        cleanup(self.root)  # temporary directories of dead processes
        for name in self.list_names():
            path = self.root / name
            if name.startswith(".") and TMP_MARKER in name and path.is_file() and not _alive(name):
                path.unlink()  # a record (or a deletion's) temporary file of a dead process
            elif name.endswith(record_suffix) and name[:-len(record_suffix)] not in committed:
                path.unlink()  # the record of a save that never committed
            elif is_checkpoint(name) and name not in committed and path.is_dir():
                shutil.rmtree(path)  # a checkpoint that never committed

    def _temporary(self, name: str) -> Path:
        return self.root / f".{name}{TMP_MARKER}{os.getpid()}-{secrets.token_hex(4)}"

    def __repr__(self) -> str:
        return f"LocalStore({str(self.root)!r})"


def _alive(temporary_name: str) -> bool:
    """Whether the process that made the temporary ``.<name>.cairn-tmp-<pid>-<hex>`` runs."""
    pid = owner_pid(temporary_name, TMP_MARKER)
    return pid is not None and pid != os.getpid() and pid_alive(pid)


class ObjectStore:
    """A manager root on an object store (any fsspec URL), through a checkpoint ``Storage``."""

    def __init__(self, storage: Storage) -> None:
        self.storage = storage

    def location(self, name: str) -> str:
        return self.storage.child(name).url if name else self.storage.url

    def list_names(self) -> list[str]:
        return sorted({relative.split("/", 1)[0] for relative in self.storage.list_files()})

    def is_committed(self, name: str) -> bool:
        return self.storage.exists(f"{name}/{MANIFEST_FILE}" if name else MANIFEST_FILE)

    def read_json(self, name: str) -> Any:
        try:
            return json.loads(self.storage.read_bytes(name, limit=_RECORD_LIMIT))
        except (CheckpointNotFoundError, CheckpointCorruptedError, ValueError):
            return None

    def write_json(self, name: str, data: Any) -> None:
        self.storage.write_bytes(name, json.dumps(data, indent=1, allow_nan=False).encode())

    def remove_checkpoint(self, name: str) -> None:
        self.storage.delete(f"{name}/{MANIFEST_FILE}")  # uncommitted from here on
        self.storage.delete_prefix(name)

    def remove_file(self, name: str) -> None:
        self.storage.delete(name)

    def clean_stale(self, committed: Collection[str], *, is_checkpoint: Callable[[str], bool],
                    record_suffix: str) -> None:
        for name in self.list_names():
            if name.endswith(record_suffix) and name[:-len(record_suffix)] not in committed:
                self.storage.delete(name)  # the record of a save that never committed
            elif is_checkpoint(name) and name not in committed:
                self.storage.delete_prefix(name)  # the objects of a save that never committed
            elif name.startswith(".") and TMP_MARKER in name:
                # where a replacement of a checkpoint uploaded its files (targets._replace) and
                # was killed; the root belongs to this run, so no other save is using it
                self.storage.delete_prefix(name)

    def __repr__(self) -> str:
        return f"ObjectStore({self.storage.url!r})"


def open_store(root: str | os.PathLike[str], storage_options: Mapping[str, Any] | None = None) -> ManagerStore:
    """The store of a manager root: a local path or ``file://`` URL, or any URL the checkpoint
    layer's storage takes (``s3://``, ``gs://``, ``memory://``), with its ``storage_options``."""
    storage = resolve_storage(root, storage_options=storage_options)
    if storage.is_local:
        return LocalStore(storage.url)
    return ObjectStore(storage)
