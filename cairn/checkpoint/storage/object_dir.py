"""A checkpoint on an object store opened for reading: the reader's view of a prefix.

:class:`ObjectStoreDir` is the object store's
:class:`~cairn.checkpoint.storage.base.ReadHandle` (``path``, ``subdir``, ``read_file``,
``prefetch``, ``replaced``), as :class:`~cairn.checkpoint.dirhandle.CheckpointDir` is a local
directory's, so one reader serves both. On an object store:

* the manifest is the commit point: a prefix with objects but no manifest is an interrupted
  (or running) save, refused with :class:`~cairn.errors.UncommittedCheckpointError`;
* there are no links, FIFOs or devices to refuse; sizes and hashes are verified as locally;
* :meth:`prefetch` downloads the files the reader is about to read in parallel, and only
  those (a subset restore reads only the selected policies' objects);
* a replacement's committed stage is read in place of the prefix it replaces
  (:func:`~cairn.checkpoint.storage.object_stage.reading_location`): the new checkpoint, whole;
* :meth:`replaced` tells whether the manifest changed since it was read, or a stage was
  committed or completed meanwhile (a writer replaced the checkpoint), so that the reader
  retries.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from cairn.checkpoint.format import MANIFEST_FILE, MAX_MANIFEST_BYTES
from cairn.checkpoint.storage.object_prefix import ObjectPrefix
from cairn.errors import (
    CheckpointCorruptedError,
    CheckpointNotFoundError,
    CheckpointStorageError,
    UncommittedCheckpointError,
)

__all__ = ["ObjectStoreDir", "UrlPath"]


class UrlPath:
    """A URL shown in messages, joined with ``/`` like a path (``Path`` would fold ``//``)."""

    def __init__(self, url: str) -> None:
        self.url = url

    def __truediv__(self, relative: str) -> UrlPath:
        return UrlPath(f"{self.url}/{relative}")

    def __str__(self) -> str:
        return self.url

    def __repr__(self) -> str:
        return repr(self.url)

    @property
    def name(self) -> str:
        return self.url.rsplit("/", 1)[-1]


class ObjectStoreDir:
    """One checkpoint (a prefix) of an object store, opened for reading."""

    fd = None  # as CheckpointDir on platforms without dir_fd: nothing to close

    def __init__(self, storage: ObjectPrefix, cache: dict[str, memoryview] | None = None,
                 root: ObjectStoreDir | None = None) -> None:
        self.storage = storage
        self.path = UrlPath(storage.url)
        self._cache = {} if cache is None else cache
        self._root = root or self
        self._manifest: bytes | None = None
        #: The location asked for, and how to find where its checkpoint is read (the root's).
        self._asked = storage
        self._locate: Callable[[ObjectPrefix], ObjectPrefix] | None = None

    @classmethod
    def open(cls, storage: ObjectPrefix,
             locate: Callable[[ObjectPrefix], ObjectPrefix] | None = None) -> ObjectStoreDir:
        """Open ``storage``'s prefix, or the prefix ``locate(storage)`` names where a load of
        it reads (a replacement's committed stage); nothing else is read until a file is."""
        opened = cls(locate(storage) if locate else storage)
        opened._asked, opened._locate = storage, locate
        return opened

    def close(self) -> None:
        self._cache.clear()

    def __enter__(self) -> ObjectStoreDir:
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._root is self:
            self.close()

    def subdir(self, relative: str) -> ObjectStoreDir:
        """The sub-prefix ``relative``; it shares this one's prefetched files."""
        return ObjectStoreDir(self.storage.child(relative), self._cache, self._root)

    def _key(self, relative: str) -> str:
        return self.storage.path(relative)

    def prefetch(self, names: Sequence[tuple[str, int]], *, limit: int) -> None:
        """Download ``[(relative, size)]`` in parallel now, for :meth:`read_file` to serve."""
        todo = [(name, size) for name, size in names if self._key(name) not in self._cache]
        if len(todo) < 2:
            return
        for (name, _), data in zip(todo, self.storage.read_many(todo, limit=limit)):
            self._cache[self._key(name)] = data

    def read_file(self, relative: str, what: str, *, expected_size: int | None, limit: int) -> memoryview:
        """Read ``relative`` whole, checking its size against ``expected_size`` (when given)
        and ``limit`` (as :meth:`CheckpointDir.read_file
        <cairn.checkpoint.dirhandle.CheckpointDir.read_file>`)."""
        cached = self._cache.pop(self._key(relative), None)
        if cached is not None:
            if expected_size is not None and len(cached) != expected_size:
                raise CheckpointCorruptedError(
                    f"{self.path / relative} has {len(cached)} bytes, but the manifest says "
                    f"{expected_size}; the checkpoint is truncated or was modified."
                )
            return cached
        try:
            data: memoryview = self.storage.read_exact(relative, expected_size, limit=limit)
        except (UncommittedCheckpointError, CheckpointStorageError):
            raise
        except CheckpointNotFoundError:
            if relative == MANIFEST_FILE and self.storage.list_files():
                raise UncommittedCheckpointError(
                    f"{self.path} holds checkpoint files but no committed {MANIFEST_FILE}: a save "
                    "there was interrupted or is still running, and the manifest, written last, "
                    "is what commits a checkpoint on an object store. Load another checkpoint, "
                    "or save there again."
                ) from None
            raise
        if relative == MANIFEST_FILE:
            self._manifest = data.tobytes()
        return data

    def replaced(self) -> bool:
        """True when the manifest is no longer the one this read started from."""
        if self._root is not self:
            return self._root.replaced()
        if self._locate is not None and self._locate(self._asked).url != self.storage.url:
            return True  # a replacement's stage was committed, or completed, meanwhile
        if self._manifest is None:
            return False
        try:
            now = self.storage.read_bytes(MANIFEST_FILE, limit=MAX_MANIFEST_BYTES)
        except CheckpointNotFoundError:
            return True
        return now != self._manifest
