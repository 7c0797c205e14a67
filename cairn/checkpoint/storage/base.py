"""The one storage interface: :class:`Storage`, implemented once per medium.

A :class:`Storage` names a directory (a prefix, on an object store); its methods take paths
relative to it, POSIX style (``"policies/p0/cairn_checkpoint.json"``), ``""`` for itself. It
gives the checkpoint writer, reader and manager everything that differs between media, so
that none of them asks "local or object store?":

* small files: :meth:`~Storage.list_files`, :meth:`~Storage.read_bytes`,
  :meth:`~Storage.write_bytes`, :meth:`~Storage.delete`, :meth:`~Storage.delete_prefix`;
* writing a checkpoint: :meth:`~Storage.check_writable` (before any state is gathered) and
  :meth:`~Storage.writing`, which yields a :class:`WriteTarget` and commits it (atomic rename
  locally; the manifest uploaded last on an object store);
* reading one: :meth:`~Storage.open_reader`, a :class:`ReadHandle`;
* a manager's root: :meth:`~Storage.list_entries`, :meth:`~Storage.is_committed`,
  :meth:`~Storage.write_record`, :meth:`~Storage.remove_checkpoint`,
  :meth:`~Storage.remove_leftovers`.

The media: :class:`~cairn.checkpoint.storage.local.LocalStorage` and
:class:`~cairn.checkpoint.storage.objects.ObjectStorage`.
"""

from __future__ import annotations

import abc
import contextlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from cairn.errors import UnsafeCheckpointError

__all__ = ["Listed", "NotTaken", "Storage", "ReadHandle", "WriteTarget", "relative_parts"]

#: ``{directory: {file name: {"size": int, "hash": str}}}``: files of an earlier checkpoint
#: to take, as its manifests list them (:meth:`Storage.reuse_dirs_into`).
Listed = Mapping[str, Mapping[str, Mapping[str, Any]]]


@dataclass(frozen=True)
class NotTaken:
    """A directory :meth:`Storage.reuse_dirs_into` did not take: ``file`` of it is not what its
    manifest lists (``problem`` says how, e.g. "does not match its hash")."""

    directory: str  #: relative to the source storage
    file: str  #: the file's name inside ``directory``
    problem: str  #: what is wrong with it, a phrase that follows the file's name


@runtime_checkable
class ReadHandle(Protocol):
    """A checkpoint opened for reading: every file comes from the one checkpoint opened first
    (a directory descriptor locally; the manifest read first, on an object store)."""

    #: The checkpoint's location, joined with ``/`` in messages.
    path: Any

    def subdir(self, relative: str) -> ReadHandle:
        """The sub-directory ``relative``, opened from this one."""
        ...

    def read_file(self, relative: str, what: str, *, expected_size: int | None, limit: int) -> memoryview:
        """``relative`` whole, its size checked against ``expected_size`` and ``limit`` first."""
        ...

    def prefetch(self, names: Sequence[tuple[str, int]], *, limit: int) -> None:
        """Fetch ``[(relative, size)]`` ahead of :meth:`read_file`, where that is faster."""
        ...

    def replaced(self) -> bool:
        """Whether a writer replaced the checkpoint since it was opened (the reader retries)."""
        ...

    def close(self) -> None:
        """Release what the handle holds."""
        ...

    def __enter__(self) -> ReadHandle: ...

    def __exit__(self, *exc: Any) -> None: ...


class WriteTarget:
    """Where a checkpoint is being written: a local directory the writer fills (the files of
    the checkpoint, as laid out in docs/checkpoint-format.md), plus :meth:`reuse_dirs`, which takes
    files of an earlier checkpoint without writing their bytes again (incremental saves)."""

    def __init__(self, directory: Path, storage: Storage) -> None:
        #: Write the checkpoint's new files here (a local directory for every medium).
        self.directory = directory
        #: The final location.
        self.storage = storage
        #: ``[(source storage, source name, relative)]`` for the medium to copy at commit.
        self.copies: list[tuple[Any, str, str]] = []

    def reuse_dirs(self, source: Storage, dirs: Listed) -> list[NotTaken]:
        """Take the files of several directories of ``source`` (which :meth:`Storage.can_reuse_from`)
        under the same names here, each directory only if the bytes taken are those listed
        (:meth:`Storage.reuse_dirs_into`); the directories not taken."""
        return self.storage.reuse_dirs_into(self, source, dirs)


class Storage(abc.ABC):
    """A directory of files, local or on an object store, addressed by relative POSIX paths."""

    #: The location as the user would write it (a local path, or a URL), for messages and
    #: return values.
    url: str

    # ---------------------------------------------------------------------- small files
    @abc.abstractmethod
    def child(self, relative: str) -> Storage:
        """The storage of the sub-directory (sub-prefix) ``relative``."""

    @abc.abstractmethod
    def exists(self, relative: str = "") -> bool:
        """Whether ``relative`` is a file, or a directory (prefix) holding at least one file
        (locally: any directory, even empty)."""

    @abc.abstractmethod
    def list_files(self, relative: str = "") -> list[str]:
        """Every file below ``relative``, recursively, as sorted paths relative to *this*
        storage (not to ``relative``); ``[]`` when there is none. Links are not followed."""

    @abc.abstractmethod
    def read_bytes(self, relative: str, *, limit: int) -> bytes:
        """The content of the file ``relative``, refused (``CheckpointCorruptedError``) when it
        is larger than ``limit`` bytes; ``CheckpointNotFoundError`` when it does not exist."""

    @abc.abstractmethod
    def write_bytes(self, relative: str, data: bytes) -> None:
        """Write the small file ``relative`` whole: readers see the old content or the new one,
        never a part (locally: temporary file, fsync, rename; on object stores: one PUT).
        Parent directories are created."""

    @abc.abstractmethod
    def delete(self, relative: str) -> None:
        """Delete the file ``relative``; nothing happens when it does not exist."""

    @abc.abstractmethod
    def delete_prefix(self, relative: str = "") -> None:
        """Delete ``relative`` and everything below it (a file, or a whole directory or
        prefix); nothing happens when there is nothing."""

    @abc.abstractmethod
    def file_sizes(self) -> dict[str, int]:
        """``{relative path: size in bytes}`` of every file below this location (as
        :meth:`list_files`), from one listing where the medium has one."""

    def local_file(self, relative: str) -> str | None:
        """The local file system path of ``relative``, or None on a medium that has none."""
        return None

    # ------------------------------------------------------------------ checkpoints
    @abc.abstractmethod
    def check_writable(self) -> None:
        """Refuse (``CheckpointFormatError``) a save here that would delete what is not a
        checkpoint's; callers check before gathering any state."""

    @abc.abstractmethod
    def loose_files(self) -> contextlib.AbstractContextManager[Path]:
        """A local directory whose files become files at this location on normal exit: the
        location itself for a local directory, else a temporary directory uploaded under this
        prefix (files of the same names replaced, nothing else removed). For files that are no
        checkpoint, such as an exported model; no atomicity, no commit marker."""

    @abc.abstractmethod
    def writing(self) -> contextlib.AbstractContextManager[WriteTarget]:
        """A :class:`WriteTarget`; on normal exit the checkpoint written into it becomes this
        location. On an exception a checkpoint committed here is unchanged, or (on an object
        store, once the new one is whole beside it) replaced by the new one; a bucket's root,
        with nothing beside it, may be left uncommitted. The error says which."""

    @abc.abstractmethod
    def can_reuse_from(self, source: Storage) -> bool:
        """Whether files of the checkpoint ``source`` can be linked or copied server-side into
        a checkpoint written here."""

    @abc.abstractmethod
    def reuse_dirs_into(self, target: WriteTarget, source: Storage, dirs: Listed) -> list[NotTaken]:
        """Make the files of several directories of ``source`` files of ``target`` under the
        same names, without writing their bytes again (a hard link locally, a server-side copy
        on an object store; an incremental save takes a few files of each of hundreds of
        policies). ``dirs`` maps a directory (relative) to ``{file name: {"size", "hash"}}``,
        as its manifest lists them.

        A directory is taken only if each of its files, as taken, is a regular file of the
        listed size whose bytes hash to the listed hash (the manifests' hash): a file damaged
        or changed since its manifest was written is never carried into a new checkpoint.
        Return the directories not taken, each with its first file found wrong and why (none of
        its files is taken; every other directory was), in the order of ``dirs``.
        What "as taken" means on each medium, and what it guarantees: docs/storage.md."""

    @abc.abstractmethod
    def open_reader(self) -> ReadHandle:
        """Open the checkpoint here for reading (``CheckpointNotFoundError`` when none)."""

    # ------------------------------------------------------------------- manager roots
    def absolute(self) -> Storage:
        """This location, independent of the current directory."""
        return self

    @abc.abstractmethod
    def list_entries(self) -> list[str]:
        """The names directly under this location (none when it does not exist)."""

    @abc.abstractmethod
    def is_committed(self, relative: str = "") -> bool:
        """Whether ``relative`` is a committed checkpoint (its manifest is there)."""

    @abc.abstractmethod
    def write_record(self, relative: str, data: bytes) -> None:
        """Write a small record whole, as :meth:`write_bytes`, but without waiting for it to be
        durable where that costs (a manager's metric record; losing one loses a metric)."""

    @abc.abstractmethod
    def remove_checkpoint(self, relative: str) -> None:
        """Delete the checkpoint ``relative``; it stops being committed before any file goes."""

    @abc.abstractmethod
    def remove_leftovers(self, writer_gone: Callable[[str], bool]) -> None:
        """Remove what killed saves directly under this location left (temporaries of dead
        processes; an interrupted local replacement's old checkpoint is put back).
        ``writer_gone(name)`` tells whether no save of the checkpoint ``name`` can still be
        running (its manager record proves it), for leftovers whose names prove nothing: an
        object store's stage without a manifest is removed only then."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.url!r})"

    def __str__(self) -> str:
        return self.url


def relative_parts(relative: str) -> list[str]:
    """The components of a relative POSIX path; refuses ``..``, absolute paths and NUL."""
    if "\x00" in relative or relative.startswith("/") or "\\" in relative:
        raise UnsafeCheckpointError(f"{relative!r:.100} is not a relative POSIX path.")
    parts = [part for part in relative.split("/") if part]
    if any(part in (".", "..") for part in parts):
        raise UnsafeCheckpointError(f"{relative!r:.100} leaves its directory ('.' or '..').")
    return parts

