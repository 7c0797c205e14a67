"""The :class:`Storage` interface and its local backend, :class:`LocalStorage`.

:mod:`cairn.checkpoint.storage` resolves locations into storages; the object-store backend is
:mod:`cairn.checkpoint.object_store`.
"""


from __future__ import annotations

import abc
import errno
import os
import secrets
import shutil
import stat
from pathlib import Path

from cairn.checkpoint.atomic import fsync_dir
from cairn.errors import CheckpointCorruptedError, CheckpointNotFoundError, UnsafeCheckpointError

__all__ = ["Storage", "LocalStorage", "relative_parts"]

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_NONBLOCK = getattr(os, "O_NONBLOCK", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)


class Storage(abc.ABC):
    """A directory of files, local or on an object store, addressed by relative POSIX paths.

    The operations a checkpoint writer, reader or manager needs, no more: list, test, read and
    write small files, delete. Large checkpoint files go through the writer and reader, which
    use the backends' fast paths (atomic rename and ``O_NOFOLLOW`` reads locally, parallel
    transfers and server-side copies on object stores).
    """

    #: The location as the user would write it (a local path, or a URL), for messages and
    #: return values.
    url: str

    @property
    def is_local(self) -> bool:
        """True for a local directory (atomic rename exists), False for an object store."""
        return False

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

    def same_store(self, other: Storage) -> bool:
        """Whether ``other`` lives on the same file system or bucket connection, so that files
        can be linked or copied server-side between the two."""
        return False

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


class LocalStorage(Storage):
    """A local directory (which need not exist yet)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.url = str(self.path)

    @property
    def is_local(self) -> bool:
        return True

    def _at(self, relative: str) -> Path:
        return self.path.joinpath(*relative_parts(relative))

    def child(self, relative: str) -> LocalStorage:
        return LocalStorage(self._at(relative))

    def exists(self, relative: str = "") -> bool:
        return os.path.lexists(self._at(relative))

    def list_files(self, relative: str = "") -> list[str]:
        start = self._at(relative)
        if not start.is_dir() or start.is_symlink():
            return [self._name(start)] if start.is_file() and not start.is_symlink() else []
        found = []
        for directory, _, names in os.walk(start):  # os.walk does not follow links to dirs
            for name in names:
                path = Path(directory) / name
                if not path.is_symlink():
                    found.append(self._name(path))
        return sorted(found)

    def _name(self, path: Path) -> str:
        return path.relative_to(self.path).as_posix()

    def read_bytes(self, relative: str, *, limit: int) -> bytes:
        path = self._at(relative)
        try:
            fd = os.open(path, os.O_RDONLY | _NOFOLLOW | _NONBLOCK | _CLOEXEC)
        except FileNotFoundError:
            raise CheckpointNotFoundError(f"{path} does not exist.") from None
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.EMLINK):
                raise UnsafeCheckpointError(f"{path} is a symbolic link; it is not followed.") from None
            raise CheckpointNotFoundError(f"{path} cannot be read: {exc.strerror}.") from None
        with os.fdopen(fd, "rb") as f:
            info = os.fstat(f.fileno())
            if not stat.S_ISREG(info.st_mode):
                raise CheckpointCorruptedError(f"{path} is not a regular file.")
            if info.st_size > limit:
                raise CheckpointCorruptedError(f"{path} has {info.st_size} bytes, more than {limit}.")
            return f.read(limit + 1)[: limit + 1]

    def write_bytes(self, relative: str, data: bytes) -> None:
        path = self._at(relative)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.cairn-tmp-{os.getpid()}-{secrets.token_hex(4)}")
        try:
            with open(tmp, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        fsync_dir(path.parent)

    def delete(self, relative: str) -> None:
        path = self._at(relative)
        if path.is_dir() and not path.is_symlink():
            raise IsADirectoryError(errno.EISDIR, f"{path} is a directory; use delete_prefix", str(path))
        path.unlink(missing_ok=True)

    def delete_prefix(self, relative: str = "") -> None:
        path = self._at(relative)
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)

    def same_store(self, other: Storage) -> bool:
        return isinstance(other, LocalStorage)
