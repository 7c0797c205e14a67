"""An open checkpoint directory: every file is reached from it without following links.

The reader opens a checkpoint's directory once and reaches every file through that descriptor
(``openat`` with ``O_NOFOLLOW`` on every path component). So:

* a symbolic link anywhere inside the checkpoint is refused (``UnsafeCheckpointError``), with
  no window between checking a path and opening it;
* FIFOs, sockets and devices are refused before they are read (opening never blocks);
* when a writer atomically replaces the checkpoint while it is being read, every file still
  comes from the one directory that was opened first. If the writer deletes that (old)
  directory's files before they are read, reading fails with a ``CheckpointError`` and
  :meth:`CheckpointDir.replaced` tells the caller to retry on the new checkpoint.

Where the platform lacks ``dir_fd`` support (Windows), paths are checked with ``lstat``
component by component instead (same refusals, without the race-freedom).
"""

from __future__ import annotations

import errno
import mmap
import os
import stat
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from cairn.alignment import empty_aligned
from cairn.errors import (
    CheckpointCorruptedError,
    CheckpointNotFoundError,
    UnsafeCheckpointError,
)

__all__ = ["CheckpointDir", "O_CLOEXEC", "O_DIRECTORY", "O_NOFOLLOW", "O_NONBLOCK"]

_DIR_FD = (
    os.open in os.supports_dir_fd
    and os.stat in os.supports_dir_fd
    and hasattr(os, "O_NOFOLLOW")
    and hasattr(os, "O_DIRECTORY")
)
#: ``os.open`` flags where this platform has them, else 0 (the checkpoint layer's one copy).
O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
O_NONBLOCK = getattr(os, "O_NONBLOCK", 0)
O_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
O_DIRECTORY = getattr(os, "O_DIRECTORY", 0)


#: Files at least this large are memory-mapped (copy-on-write) rather than read.
MMAP_MIN_BYTES = 16 << 20


class CheckpointDir:
    """A checkpoint directory opened for reading (use as a context manager, or ``close()``)."""

    def __init__(self, path: Path, fd: int | None) -> None:
        self.path = path
        self.fd = fd

    @classmethod
    def open(cls, path: str | os.PathLike[str]) -> CheckpointDir:
        """Open ``path`` (which itself may be a link, e.g. ``latest -> checkpoint_000010``)."""
        path = Path(path)
        if not _DIR_FD:
            if not path.is_dir():
                raise CheckpointNotFoundError(f"Checkpoint {path} not found: not a directory.")
            return cls(path, None)
        try:
            fd = os.open(path, os.O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        except OSError as exc:
            raise CheckpointNotFoundError(
                f"Checkpoint {path} cannot be opened as a directory: {exc.strerror}."
            ) from None
        return cls(path, fd)

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

    def __enter__(self) -> CheckpointDir:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def prefetch(self, names: Sequence[tuple[str, int]], *, limit: int) -> None:
        """Nothing to do on a local disk: files are read when asked for. (On an object store,
        :meth:`ObjectStoreDir.prefetch <cairn.checkpoint.storage.object_dir.ObjectStoreDir.prefetch>`
        downloads them in parallel.)"""

    def replaced(self) -> bool:
        """True when ``path`` no longer names the directory that was opened (a writer swapped
        in a new checkpoint, or removed it, since :meth:`open`)."""
        if self.fd is None:
            return False
        try:
            now, opened = os.stat(self.path), os.fstat(self.fd)
        except OSError:
            return True
        return (now.st_dev, now.st_ino) != (opened.st_dev, opened.st_ino)

    # ----------------------------------------------------------------------------- walking
    def _open_component(self, parent_fd: int, name: str, shown: Path, *, directory: bool) -> int:
        """Open one path component below ``parent_fd`` without following a link."""
        try:
            info = os.stat(name, dir_fd=parent_fd, follow_symlinks=False)
        except FileNotFoundError:
            raise CheckpointNotFoundError(f"{shown} does not exist.") from None
        except OSError as exc:
            raise CheckpointNotFoundError(f"{shown} cannot be read: {exc.strerror}.") from None
        _check_kind(info, shown, directory=directory)
        flags = os.O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC | (O_DIRECTORY if directory else 0)
        try:
            fd = os.open(name, flags, dir_fd=parent_fd)
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.EMLINK):  # replaced by a link since the stat
                raise UnsafeCheckpointError(
                    f"{shown} is a symbolic link; checkpoints must contain regular files and "
                    "directories only."
                ) from None
            if exc.errno == errno.ENOENT:
                raise CheckpointNotFoundError(f"{shown} does not exist.") from None
            raise CheckpointCorruptedError(f"{shown} cannot be opened: {exc.strerror}.") from None
        try:
            _check_kind(os.fstat(fd), shown, directory=directory)
        except BaseException:
            os.close(fd)
            raise
        return fd

    def subdir(self, relative: str) -> CheckpointDir:
        """Open the subdirectory ``relative`` (a safe relative POSIX path)."""
        parts = relative.split("/")
        if self.fd is None:
            shown = self.path
            for part in parts:
                shown = shown / part
                _check_kind(_lstat(shown), shown, directory=True)
            return CheckpointDir(shown, None)
        fd, shown = self.fd, self.path
        try:
            for part in parts:
                shown = shown / part
                child = self._open_component(fd, part, shown, directory=True)
                if fd != self.fd:
                    os.close(fd)
                fd = child
        except BaseException:
            if fd != self.fd:
                os.close(fd)
            raise
        return CheckpointDir(shown, fd)

    def read_file(self, relative: str, what: str, *, expected_size: int | None, limit: int) -> memoryview:
        """Read the regular file ``relative`` whole, checking its size against
        ``expected_size`` (when given) and ``limit`` before reading any byte.

        Small files land in an uninitialised numpy buffer (a bytearray would zero-fill it
        first, which made reads 2.5x slower); files of ``MMAP_MIN_BYTES`` or more are mapped
        copy-on-write. Either way the memoryview is private to the caller, so arrays parsed
        from it may be used in place (writes never reach the file).
        """
        *dirs, name = relative.split("/")
        parent = self.subdir("/".join(dirs)) if dirs else self
        shown = parent.path / name
        try:
            if parent.fd is None:
                info = _lstat(shown)
                _check_kind(info, shown, directory=False, what=what)
                fd = os.open(shown, os.O_RDONLY | O_NONBLOCK | O_CLOEXEC)
            else:
                fd = parent._open_component(parent.fd, name, shown, directory=False)
        finally:
            if parent is not self:
                parent.close()
        with os.fdopen(fd, "rb", buffering=0) as f:
            size = os.fstat(f.fileno()).st_size
            if expected_size is not None and size != expected_size:
                raise CheckpointCorruptedError(
                    f"{shown} has {size} bytes, but the manifest says {expected_size}; the "
                    "checkpoint is truncated or was modified. Restore it from a good copy."
                )
            if size > limit:
                raise CheckpointCorruptedError(
                    f"{shown} has {size} bytes, more than {what} may have ({limit})."
                )
            if size >= MMAP_MIN_BYTES:
                # Large array files are mapped copy-on-write instead of read: pages come
                # straight from the page cache (no zero-filled allocation, no copy), and a
                # page is copied only when training first writes to it. Hashing right after
                # still reads every byte, so verification is unchanged.
                return memoryview(mmap.mmap(f.fileno(), size, access=mmap.ACCESS_COPY))
            view, done = empty_aligned(size).data, 0
            while done < size:
                n = f.readinto(view[done:])
                if not n:
                    break
                done += n
        if done != size:
            raise CheckpointCorruptedError(f"{shown}: read {done} bytes, expected {size}.")
        return view


def _lstat(path: Path) -> os.stat_result:
    try:
        return os.lstat(path)
    except FileNotFoundError:
        raise CheckpointNotFoundError(f"{path} does not exist.") from None
    except OSError as exc:
        raise CheckpointNotFoundError(f"{path} cannot be read: {exc.strerror}.") from None


def _check_kind(info: os.stat_result, shown: Path, *, directory: bool, what: str | None = None) -> None:
    label = what or str(shown)
    if stat.S_ISLNK(info.st_mode):
        raise UnsafeCheckpointError(
            f"{label} ({shown}) is a symbolic link; checkpoints must contain regular files and "
            "directories only, and are never followed out of their directory."
        )
    if directory and not stat.S_ISDIR(info.st_mode):
        raise CheckpointCorruptedError(f"{shown} should be a directory, but is not.")
    if not directory and not stat.S_ISREG(info.st_mode):
        raise CheckpointCorruptedError(
            f"{label} ({shown}) is not a regular file (a directory, FIFO, socket or device)."
        )
