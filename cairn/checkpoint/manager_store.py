"""The few storage operations a :class:`~cairn.checkpoint.manager.CheckpointManager` needs on its
root: list it, tell a committed checkpoint, read and write a small JSON record atomically, and
delete a checkpoint so that it is never seen half deleted.

:class:`ManagerStore` works on any :class:`~cairn.checkpoint.storage.Storage`; how each step is
made safe on a medium is the storage's (a local checkpoint is renamed to a temporary name
before it is deleted, an object-store one loses its manifest first: docs/storage.md).
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Callable, Collection, Mapping
from typing import Any

from cairn.checkpoint.format import MANIFEST_FILE
from cairn.checkpoint.storage import Storage, resolve_storage
from cairn.errors import (
    CairnError,
    CheckpointError,
    CheckpointNotFoundError,
    CheckpointStorageError,
    StorageCleanupWarning,
)

__all__ = ["ManagerStore", "incomplete_save_error", "open_store", "retention_failure_warning",
           "unread_record_warning"]

_RECORD_LIMIT = 1 << 20
_MANIFEST_LIMIT = 64 << 20


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
            return self.read_json_strictly(name)
        except (CheckpointError, OSError, ValueError):
            return None

    def read_json_strictly(self, name: str) -> Any:
        """The JSON value of the file ``name``; None when there is no such file. Unlike
        :meth:`read_json`, a file that is there but cannot be read or parsed (a store that
        failed to answer, damaged bytes) raises (``CheckpointError``, ``OSError`` or
        ``ValueError``): retention must not take it for a checkpoint without a metric."""
        try:
            data = self.storage.read_bytes(name, limit=_RECORD_LIMIT)
        except CheckpointNotFoundError:
            if self.storage.exists(name):
                raise  # there, but the read failed (a local file that cannot be opened)
            return None
        return json.loads(data)

    def manifest_bytes(self, name: str) -> bytes | None:
        """The bytes of the manifest that a load of the checkpoint ``name`` reads (on an object
        store, a replacement's committed stage: the checkpoint the prefix is becoming), which
        name every file of it by its hash and when it was made; None when it cannot be read."""
        try:
            reader = self.storage.child(name).open_reader()
            try:
                return bytes(reader.read_file(MANIFEST_FILE, "manifest", expected_size=None,
                                              limit=_MANIFEST_LIMIT))
            finally:
                reader.close()
        except (CheckpointError, OSError):
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
                    record_suffix: str, abandoned: Callable[[Any], bool]) -> None:
        """Remove what crashed saves left, and only what is proven abandoned: temporaries of
        dead processes, the stages of replacements (``save(force=True)`` on an object store)
        whose checkpoint's record is abandoned (a stage that holds a checkpoint whole is
        completed instead: :meth:`Storage.remove_leftovers`), and each record
        (``<checkpoint name><record_suffix>``) of no committed checkpoint for which
        ``abandoned(record)`` holds, with the uncommitted checkpoint beside it
        (:mod:`cairn.checkpoint.manager_records`). What another writer may be using (a record
        it renews, files without a record) is left alone."""
        def writer_gone(checkpoint: str) -> bool:
            """No save of ``checkpoint`` runs: its record is abandoned, or it has none and is
            not committed (retention deleted it; a writer writes the record before any file)."""
            record = checkpoint + record_suffix
            if self.storage.exists(record):
                return abandoned(self.read_json(record))
            return not self.is_committed(checkpoint)

        self.storage.remove_leftovers(writer_gone)
        for name in self.list_names():
            checkpoint = name[:-len(record_suffix)]
            if (not name.endswith(record_suffix) or checkpoint in committed
                    or not abandoned(self.read_json(name))):
                continue
            if is_checkpoint(checkpoint) and not self.is_committed(checkpoint):
                self.storage.delete_prefix(checkpoint)  # a checkpoint that never committed
            self.storage.delete(name)  # last: until the files are gone, it says whose they were

    def problems(self, name: str, *, strict: bool = False) -> list[str]:
        """What of the committed checkpoint ``name`` is not as its manifests say: each file a
        manifest lists (the root's, and those of the manifests it lists, such as a policy's)
        that is missing or of another size, or a manifest that cannot be read; ``[]`` when every
        file is there with its size. (Sizes, not hashes: it catches files deleted or cut short
        by another process, at the cost of one listing and the small manifests.) With
        ``strict``, a store that fails to answer a manifest's read raises its
        ``CheckpointStorageError`` instead: that says nothing about the checkpoint."""
        storage = self.storage.child(name)
        sizes = storage.file_sizes()
        found: list[str] = []
        pending = [""]
        while pending:
            prefix = pending.pop()
            try:
                files = json.loads(storage.read_bytes(prefix + MANIFEST_FILE, limit=_MANIFEST_LIMIT))["files"]
                entries = list(files.items())
            except (CairnError, OSError, ValueError, TypeError, KeyError, AttributeError) as exc:
                if strict and isinstance(exc, CheckpointStorageError) and not isinstance(
                        exc, CheckpointNotFoundError):
                    raise
                found.append(f"{prefix}{MANIFEST_FILE} cannot be read ({type(exc).__name__})")
                continue
            for relative, entry in entries:
                path = f"{prefix}{relative}"
                size = entry.get("size") if isinstance(entry, dict) else None
                if path not in sizes:
                    found.append(f"{path} is missing")
                elif sizes[path] != size:
                    found.append(f"{path} has {sizes[path]} bytes, its manifest says {size}")
                elif path.endswith("/" + MANIFEST_FILE):
                    pending.append(path[:-len(MANIFEST_FILE)])
        return found

    def __repr__(self) -> str:
        return f"ManagerStore({self.storage.url!r})"


def open_store(root: str | os.PathLike[str],
               storage_options: Mapping[str, Any] | None = None) -> ManagerStore:
    """The store of a manager root: a local path or ``file://`` URL, or any URL the checkpoint
    layer's storage takes (``s3://``, ``gs://``, ``memory://``), with its ``storage_options``."""
    return ManagerStore(resolve_storage(root, storage_options=storage_options).absolute())


def incomplete_save_error(location: str, problems: list[str], *, latest: str | None) -> CheckpointError:
    """The error of a save to ``location`` that committed although files its manifests list are
    not there (:meth:`ManagerStore.problems`), once the broken checkpoint has been removed."""
    more = f" and {len(problems) - 3} more" if len(problems) > 3 else ""
    return CheckpointError(
        f"The save to {location} committed a manifest, but its files are not all there: "
        f"{'; '.join(problems[:3])}{more}. Something deleted or changed them while the save ran "
        "(another process cleaning this root?). The broken checkpoint was removed and no other "
        f"was deleted (retention did not run): latest() is {latest!r}. Save again.")


def retention_failure_warning(store: ManagerStore, name: str, error: CheckpointError | OSError, *,
                              saved: str) -> StorageCleanupWarning:
    """The warning of a retention that could not delete the checkpoint ``name`` after the save
    to ``saved`` committed: the save stands, and what ``name`` holds now is read back (its
    manifest goes first, so it is either still whole or no longer committed)."""
    committed: bool | None = None
    with contextlib.suppress(CheckpointError, OSError):
        committed = store.is_committed(name)
    location = store.location(name)
    held = {
        True: f"{location} is still whole and loads; the next save's retention deletes it again.",
        False: (f"{location} is no longer committed (loads refuse it); what is left of its files is "
                "removed by a CheckpointManager opened on this root."),
        None: (f"Looking {location} up failed too: it is either still whole (the next save's "
               "retention deletes it again) or no longer committed (a CheckpointManager opened on "
               "this root removes its files)."),
    }[committed]
    return StorageCleanupWarning(
        f"The save to {saved} committed and loads, but retention could not delete {location} "
        f"({type(error).__name__}: {error}). {held}")


def unread_record_warning(store: ManagerStore, name: str, record: str, error: BaseException, *,
                          metric: str) -> StorageCleanupWarning:
    """The warning of a retention that kept the checkpoint ``name`` because its record
    ``record`` is there but could not be read: its ``keep_best`` ``metric`` is unknown, and
    taking it for none could delete the best checkpoint."""
    return StorageCleanupWarning(
        f"Retention kept {store.location(name)}: its record {store.location(record)} is there but "
        f"could not be read ({type(error).__name__}: {' '.join(str(error).split())}), so whether it "
        f"is among the best by {metric!r} is unknown. The next save's retention reads the record "
        "again. If the record is damaged, delete it (the checkpoint then has no metric), or delete "
        "the checkpoint (CheckpointManager.delete).")
