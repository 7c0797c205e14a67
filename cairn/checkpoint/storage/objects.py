"""Object stores (``s3://``, ``gs://``, ``memory://``, any fsspec URL) as a
:class:`~cairn.checkpoint.storage.base.Storage`.

fsspec and its backends are imported here only, when a URL is first used: ``import cairn`` and
local checkpoints never load them. Credentials and endpoints come from where the backend looks
(for s3fs: the AWS environment variables, ``AWS_ENDPOINT_URL``, ``~/.aws``), or from
``storage_options``. Every backend failure is raised as a
:class:`~cairn.errors.CheckpointStorageError` subclass naming the URL and the cause, never as
a bare botocore or aiohttp exception.

Transfers of many files run in a thread pool (:func:`ObjectStorage.put_files`,
:func:`ObjectStorage.copy_files`, :func:`ObjectStorage.read_many`); large files are read in
concurrent ranges (:meth:`ObjectStorage.read_exact`).

Object stores have no rename: a save commits a checkpoint by uploading its manifest last
(:mod:`cairn.checkpoint.storage.object_commit`), and readers refuse a prefix without one
(:mod:`cairn.checkpoint.storage.object_dir`); a manager deletes a checkpoint's manifest first.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

from cairn.alignment import empty_aligned
from cairn.checkpoint.format import MANIFEST_FILE
from cairn.checkpoint.storage.base import Listed, NotTaken, Storage, WriteTarget, relative_parts
from cairn.checkpoint.storage.object_cleanup import discard
from cairn.checkpoint.storage.object_commit import check_prefix, object_writing
from cairn.checkpoint.storage.object_dir import ObjectStoreDir
from cairn.checkpoint.storage.object_prefix import ObjectPrefix
from cairn.checkpoint.storage.object_stage import (
    committed_stage,
    reading_location,
    roll_forward,
    staged_name,
)
from cairn.checkpoint.storage.reuse_check import not_taken, object_problem
from cairn.errors import (
    CheckpointCorruptedError,
    CheckpointNotFoundError,
    CheckpointStorageError,
    StorageBackendMissingError,
    StorageNotFoundError,
    StoragePermissionError,
    UnsupportedCheckpointLocationError,
)

__all__ = ["ObjectStorage", "TRANSFER_THREADS", "RANGE_BYTES"]

#: Parallel transfers (files, or ranges of one large file) of a save or a restore.
TRANSFER_THREADS = 16
#: Large files are downloaded in ranges of this size, concurrently.
RANGE_BYTES = 8 << 20
#: The extra that installs each scheme's fsspec backend.
_EXTRAS = {"s3": "s3", "s3a": "s3", "gs": "gcs", "gcs": "gcs"}
_CREDENTIAL_ERRORS = ("NoCredentialsError", "PartialCredentialsError", "NoAuthTokenError",
                      "CredentialRetrievalError", "DefaultCredentialsError", "RefreshError")

T = TypeVar("T")


def _parallel(fn: Callable[[T], Any], items: Sequence[T]) -> list[Any]:
    """``[fn(item) for item in items]``, run in up to ``TRANSFER_THREADS`` threads."""
    if len(items) <= 1:
        return [fn(item) for item in items]
    with ThreadPoolExecutor(min(TRANSFER_THREADS, len(items))) as pool:
        return list(pool.map(fn, items))


class ObjectStorage(Storage):
    """A prefix of an fsspec file system (a bucket and key prefix, on S3)."""

    def __init__(self, fs: Any, root: str, url: str) -> None:
        self.fs, self.root, self.url = fs, root.rstrip("/"), url.rstrip("/")

    @classmethod
    def from_url(cls, url: str, storage_options: Mapping[str, Any]) -> ObjectStorage:
        """The storage of ``url``, its fsspec file system built with ``storage_options``."""
        given = url
        scheme, rest = url.split("://", 1)
        scheme = scheme.lower()  # schemes are case-insensitive (RFC 3986); fsspec's are lowercase
        url = f"{scheme}://{rest}"
        try:
            from fsspec.core import url_to_fs
        except ImportError:  # pragma: no cover - fsspec is a dependency of cairn and torch
            raise StorageBackendMissingError(
                f"Cannot use {given!r}: fsspec is not installed. Install it: pip install fsspec."
            ) from None
        try:
            fs, root = url_to_fs(url, **dict(storage_options))
        except ImportError as exc:
            extra = _EXTRAS.get(scheme)
            fix = (f"pip install 'cairn-rl[{extra}]'" if extra else
                   f"install the fsspec backend of {scheme}:// ({exc})")
            raise StorageBackendMissingError(
                f"Cannot use the checkpoint URL {given!r}: the {scheme}:// backend is not "
                f"installed. Install it: {fix}."
            ) from exc
        except ValueError as exc:
            if "protocol not known" not in str(exc).lower():
                raise CheckpointStorageError(f"Cannot use the checkpoint URL {given!r}: {exc}.") from exc
            raise UnsupportedCheckpointLocationError(
                f"Cannot use the checkpoint URL {given!r}: fsspec knows no {scheme}:// file "
                "system. Use a local path, file://, s3:// (cairn-rl[s3]), gs:// (cairn-rl[gcs]), "
                "memory://, or install the fsspec backend of that scheme."
            ) from exc
        except TypeError as exc:
            raise CheckpointStorageError(
                f"Cannot use the checkpoint URL {given!r}: its file system refused "
                f"storage_options {sorted(storage_options)}: {exc}."
            ) from exc
        if not root.strip("/"):
            raise UnsupportedCheckpointLocationError(
                f"Cannot use the checkpoint URL {given!r}: it names no prefix inside the store; "
                "a checkpoint needs its own prefix, e.g. s3://bucket/runs/checkpoint_000010."
            )
        return cls(fs, root, _display_url(url))

    # ----------------------------------------------------------------------- addressing
    def path(self, relative: str = "") -> str:
        """The file system path (no protocol) of ``relative``."""
        parts = relative_parts(relative)
        return "/".join([self.root, *parts]) if parts else self.root

    def url_of(self, relative: str = "") -> str:
        parts = relative_parts(relative)
        return "/".join([self.url, *parts]) if parts else self.url

    def child(self, relative: str) -> ObjectStorage:
        return ObjectStorage(self.fs, self.path(relative), self.url_of(relative))

    @property
    def name(self) -> str:
        """The last component of the prefix (``ckpt`` of ``s3://bucket/runs/ckpt``)."""
        return self.root.rsplit("/", 1)[-1]

    @property
    def has_parent(self) -> bool:
        """Whether the prefix lies inside another one (``s3://bucket/runs/ckpt`` does;
        ``s3://bucket`` does not), so that :meth:`sibling` names a prefix of the same store."""
        return "/" in self.root.strip("/")

    def sibling(self, name: str) -> ObjectStorage:
        """The prefix ``name`` beside this one (``s3://bucket/runs/<name>``); needs
        :attr:`has_parent`."""
        if not self.has_parent or relative_parts(name) != [name]:
            raise ValueError(f"{self.url} has no sibling {name!r}.")
        return ObjectStorage(self.fs, f"{self.root.rsplit('/', 1)[0]}/{name}",
                             f"{self.url.rsplit('/', 1)[0]}/{name}")

    def parent(self) -> ObjectStorage | None:
        """The prefix holding this one, or None when it is a bucket's top level."""
        if not self.has_parent:
            return None
        return ObjectStorage(self.fs, self.root.rsplit("/", 1)[0], self.url.rsplit("/", 1)[0])

    def list_siblings(self, start: str) -> list[str]:
        """The names of the prefixes and objects beside this one whose name starts with
        ``start`` (one listing filtered by the store where the backend can, as s3fs and gcsfs)."""
        if not self.has_parent:
            return []
        parent = self.root.rsplit("/", 1)[0]
        with self.errors("", "list the prefixes beside"):
            self.fs.invalidate_cache(parent)
            try:
                found = self.fs.find(parent, prefix=start, withdirs=False)
            except TypeError:  # a backend without server-side prefixes: list the parent
                found = self.fs.ls(parent, detail=False)
            except FileNotFoundError as exc:
                if "bucket" in str(exc).lower():
                    raise
                return []
        parent = parent.lstrip("/") + "/"
        names = {path.lstrip("/")[len(parent):].split("/", 1)[0] for path in found
                 if path.lstrip("/").startswith(parent)}
        return sorted(name for name in names if name.startswith(start))

    @contextlib.contextmanager
    def errors(self, relative: str, action: str) -> Iterator[None]:
        """Turn what the backend raises while ``action``-ing ``relative`` into cairn errors."""
        where = self.url_of(relative)
        try:
            yield
        except CheckpointStorageError:
            raise
        except FileNotFoundError as exc:
            if "bucket" in str(exc).lower():
                raise StorageNotFoundError(
                    f"Cannot {action} {where}: its bucket does not exist ({exc}). Create the "
                    "bucket, or fix the URL."
                ) from None
            raise CheckpointNotFoundError(f"{where} does not exist.") from None
        except PermissionError as exc:
            raise StoragePermissionError(
                f"Cannot {action} {where}: permission denied ({exc}). Check the credentials and "
                "the bucket policy (storage_options, or the AWS_*/GOOGLE_* environment)."
            ) from None
        except Exception as exc:
            if type(exc).__name__ in _CREDENTIAL_ERRORS:
                raise StoragePermissionError(
                    f"Cannot {action} {where}: no credentials were found ({exc}). Set them in the "
                    "environment (AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY, or a profile in "
                    "~/.aws), or pass storage_options={'key': ..., 'secret': ...}; for a public "
                    "bucket, storage_options={'anon': True}."
                ) from None
            if isinstance(exc, (OSError, ValueError)) or type(exc).__module__.split(".")[0] in (
                    "botocore", "aiobotocore", "aiohttp", "google", "gcsfs", "s3fs", "fsspec"):
                raise CheckpointStorageError(
                    f"Cannot {action} {where}: {type(exc).__name__}: {exc}"
                ) from None
            raise

    # ------------------------------------------------------------------------- Storage
    def exists(self, relative: str = "") -> bool:
        with self.errors(relative, "look up"):
            self.fs.invalidate_cache(self.path(relative))
            return bool(self.fs.exists(self.path(relative)))

    def list_files(self, relative: str = "") -> list[str]:
        start = self.path(relative)
        with self.errors(relative, "list"):
            self.fs.invalidate_cache(start)
            try:
                found = self.fs.find(start, withdirs=False)
            except FileNotFoundError as exc:
                if "bucket" in str(exc).lower():
                    raise
                return []
        prefix = self.root.lstrip("/") + "/"
        names = []
        for path in found:
            path = path.lstrip("/")
            if path.startswith(prefix):
                names.append(path[len(prefix):])
            elif path == self.root.lstrip("/"):  # the storage itself is one object
                names.append("")
        return sorted(name for name in names if name)

    def file_sizes(self) -> dict[str, int]:
        with self.errors("", "list"):
            self.fs.invalidate_cache(self.path())
            try:
                found = self.fs.find(self.path(), withdirs=False, detail=True)
            except FileNotFoundError:
                return {}
        prefix = self.root.lstrip("/") + "/"
        return {path.lstrip("/")[len(prefix):]: int(info["size"]) for path, info in found.items()
                if path.lstrip("/").startswith(prefix) and info.get("type") != "directory"}

    def read_bytes(self, relative: str, *, limit: int) -> bytes:
        with self.errors(relative, "read"):
            data = self.fs.cat_file(self.path(relative), start=0, end=limit + 1)
        if len(data) > limit:
            raise CheckpointCorruptedError(f"{self.url_of(relative)} has more than {limit} bytes.")
        return bytes(data)

    def read_exact(self, relative: str, size: int | None, *, limit: int) -> memoryview:
        """Read ``relative`` into 64-byte-aligned memory, refusing (before reading it whole) a
        file that is not ``size`` bytes (when given) or is over ``limit``. Files over
        ``RANGE_BYTES`` come in concurrent ranges."""
        where = self.url_of(relative)
        if size is None or size <= RANGE_BYTES:
            data = self.read_bytes(relative, limit=limit if size is None else min(limit, size))
            if size is not None and len(data) != size:
                raise _size_error(where, len(data), size)
            view = empty_aligned(len(data)).data
            view[:] = data
            return view
        if size > limit:
            raise CheckpointCorruptedError(f"{where}: the manifest says {size} bytes, more than {limit}.")
        # The object's real size, asked once (a HEAD on S3), before any range is read: the
        # manifest may claim far more than the object holds (a 1 TiB claim would otherwise be
        # 131,072 ranged reads), and what a load reads is then bounded by what it declares.
        real = self.size(relative)
        if real != size:
            raise _size_error(where, real, size, exact=True)
        starts = list(range(0, size, RANGE_BYTES))
        ends = [*starts[1:], size + 1]  # one byte past the end: a longer file is seen
        path = self.path(relative)
        with self.errors(relative, "read"):
            chunks = self.fs.cat_ranges([path] * len(starts), starts, ends, on_error="raise")
        got = sum(len(chunk) for chunk in chunks)
        if got != size:
            raise _size_error(where, got, size)
        view = empty_aligned(size).data
        for start, chunk in zip(starts, chunks):
            view[start:start + len(chunk)] = chunk
        return view

    def size(self, relative: str) -> int:
        """The size in bytes of the object ``relative``, asked of the store (not of a cached
        listing, which another process's save may have made stale)."""
        path = self.path(relative)
        with self.errors(relative, "look up"):
            self.fs.invalidate_cache(path)
            info = self.fs.info(path)
        if info.get("type") != "file" or not isinstance(info.get("size"), int):
            raise CheckpointNotFoundError(f"{self.url_of(relative)} does not exist "
                                          "(it is a prefix, not an object).")
        return int(info["size"])

    def read_many(self, names: Sequence[tuple[str, int | None]], *, limit: int) -> list[memoryview]:
        """:meth:`read_exact` of several ``(relative, size)``, in parallel."""
        return _parallel(lambda item: self.read_exact(item[0], item[1], limit=limit), names)

    def write_bytes(self, relative: str, data: bytes) -> None:
        with self.errors(relative, "write"):
            self.fs.pipe_file(self.path(relative), bytes(data))

    def put_files(self, pairs: Sequence[tuple[str | os.PathLike[str], str]]) -> None:
        """Upload local files: ``[(local path, relative name)]``, in parallel."""
        def put(pair: tuple[str | os.PathLike[str], str]) -> None:
            with self.errors(pair[1], "write"):
                self.fs.put_file(os.fspath(pair[0]), self.path(pair[1]))

        _parallel(put, pairs)

    def copy_files(self, pairs: Sequence[tuple[ObjectPrefix, str, str]]) -> None:
        """Server-side copies ``[(source storage, source name, relative name)]``, in parallel
        (no byte passes through this process on S3 or GCS)."""
        def copy(item: tuple[ObjectPrefix, str, str]) -> None:
            source, name, relative = item
            with self.errors(relative, "copy into"):
                # cp_file, not copy: copy lists the destination first (a request per file)
                self.fs.cp_file(source.path(name), self.path(relative))

        _parallel(copy, pairs)

    def delete(self, relative: str) -> None:
        with self.errors(relative, "delete"), contextlib.suppress(FileNotFoundError):
            self.fs.rm_file(self.path(relative))

    def delete_files(self, names: Sequence[str]) -> None:
        """Delete several files (one bulk request where the backend has one)."""
        if not names:
            return
        with self.errors("", "delete files in"), contextlib.suppress(FileNotFoundError):
            self.fs.rm([self.path(name) for name in names])

    def delete_prefix(self, relative: str = "") -> None:
        names = self.list_files(relative)
        if relative and self.exists(relative) and not names:
            names = [relative]  # a single object
        self.delete_files(names)

    # ------------------------------------------------------------------ checkpoints
    def check_writable(self) -> None:
        check_prefix(self, self.list_files())

    @contextlib.contextmanager
    def loose_files(self) -> Iterator[Path]:
        with tempfile.TemporaryDirectory(prefix="cairn-upload-") as local:
            yield Path(local)
            names = sorted(p.relative_to(local).as_posix() for p in Path(local).rglob("*") if p.is_file())
            self.put_files([(Path(local) / name, name) for name in names])

    def writing(self) -> contextlib.AbstractContextManager[WriteTarget]:
        return object_writing(self, lambda directory: WriteTarget(directory, self))

    def can_reuse_from(self, source: Storage) -> bool:
        # the same bucket connection (server-side copies), but not this prefix itself: it is
        # uncommitted while it is rewritten
        return isinstance(source, ObjectStorage) and source.fs is self.fs and source.url != self.url

    def reuse_dirs_into(self, target: WriteTarget, source: Storage, dirs: Listed) -> list[NotTaken]:
        # Copied server-side at the commit, from where a load reads (reading_location): each
        # object is first read whole from there and hashed (reuse_check); no byte is uploaded.
        assert isinstance(source, ObjectStorage)
        where = reading_location(source)
        listed = [(f"{directory}/{file}", entry)
                  for directory, files in dirs.items() for file, entry in files.items()]
        found = _parallel(lambda item: object_problem(where, *item), listed)
        return not_taken(dirs, dict(zip([name for name, _ in listed], found)),
                               lambda name: target.copies.append((source, name, name)))

    def open_reader(self) -> ObjectStoreDir:
        # a replacement's committed stage holds the checkpoint whole where this prefix may not
        return ObjectStoreDir.open(self, reading_location)

    # ------------------------------------------------------------------- manager roots
    def list_entries(self) -> list[str]:
        return sorted({relative.split("/", 1)[0] for relative in self.list_files()})

    def is_committed(self, relative: str = "") -> bool:
        return self.exists(f"{relative}/{MANIFEST_FILE}" if relative else MANIFEST_FILE)

    def write_record(self, relative: str, data: bytes) -> None:
        self.write_bytes(relative, data)

    def remove_checkpoint(self, relative: str) -> None:
        checkpoint = self.child(relative)
        checkpoint.delete(MANIFEST_FILE)  # uncommitted from here on (a stage still loads)
        stage = committed_stage(checkpoint)
        if stage is not None:  # a replacement never completed: it goes too, before any file
            discard(stage)
        checkpoint.delete_prefix()

    def remove_leftovers(self, writer_gone: Callable[[str], bool]) -> None:
        for name in self.list_entries():
            checkpoint = staged_name(name)
            if checkpoint is None:
                continue
            # the stage of a replacement of a checkpoint (object_commit): a committed one holds
            # the new checkpoint whole and is completed (repeatable, so safe beside its writer),
            # never deleted; one without a manifest may be an upload in progress, deleted only
            # once the checkpoint's record proves its writer gone. Its name proves nothing (its
            # process ID is of some host), and it was listed before the record is read: a
            # writer renews its record before it uploads the first object of a stage.
            stage = self.child(name)
            if stage.exists(MANIFEST_FILE):
                roll_forward(self.child(checkpoint), stage)
            elif writer_gone(checkpoint):
                stage.delete_prefix()


def _size_error(where: str, got: int, expected: int, *, exact: bool = False) -> CheckpointCorruptedError:
    """``where`` is not the size its manifest declares; ``got`` bytes were read (reads stop one
    byte past the declared size, so more is "at least"), or are its real size when ``exact``."""
    more = got > expected and not exact
    return CheckpointCorruptedError(
        f"{where} has {'at least ' if more else ''}{got} bytes, but the manifest says "
        f"{expected}; the checkpoint is truncated or was modified. Restore it from a good copy."
    )


def _display_url(url: str) -> str:
    """``url`` without a trailing slash (``s3://b/x/`` and ``s3://b/x`` name one prefix)."""
    scheme, rest = url.split("://", 1)
    return f"{scheme}://{rest.rstrip('/')}"
