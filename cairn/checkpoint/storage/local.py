"""A local directory as a :class:`~cairn.checkpoint.storage.base.Storage`.

A save writes into a temporary sibling, fsyncs it and renames it into place
(:func:`~cairn.checkpoint.atomic.atomic_directory`: renameat2's exchange where it exists);
reading goes through one directory descriptor with ``O_NOFOLLOW``
(:class:`~cairn.checkpoint.dirhandle.CheckpointDir`); a manager deletes a checkpoint by
renaming it to a temporary name first (one atomic step), which
:func:`~cairn.checkpoint.atomic.cleanup` removes if the process dies before the rest.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import shutil
import stat
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from cairn.checkpoint.atomic import (
    TMP_MARKER,
    atomic_directory,
    check_replaceable,
    cleanup,
    fsync_dir,
    owner_pid,
    pid_alive,
)
from cairn.checkpoint.dirhandle import O_CLOEXEC, O_DIRECTORY, O_NOFOLLOW, O_NONBLOCK, CheckpointDir
from cairn.checkpoint.format import MANIFEST_FILE
from cairn.checkpoint.storage.base import Listed, NotTaken, Storage, WriteTarget, relative_parts
from cairn.checkpoint.storage.reuse_check import file_problem
from cairn.errors import CheckpointCorruptedError, CheckpointNotFoundError, UnsafeCheckpointError

__all__ = ["LocalStorage", "link_or_copy"]

#: Whether files can be linked relative to directory descriptors (not on Windows).
_LINK_AT = all(f in os.supports_dir_fd for f in (os.link, os.mkdir, os.stat)) and hasattr(os, "O_DIRECTORY")
#: Why a hard link may be impossible where a copy is not (another device, no hard links here).
_NO_LINK = (errno.EXDEV, errno.EPERM, errno.EMLINK, errno.ENOTSUP, errno.EACCES)


class LocalStorage(Storage):
    """A local directory (which need not exist yet)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.url = str(self.path)

    def _at(self, relative: str) -> Path:
        return self.path.joinpath(*relative_parts(relative))

    def local_file(self, relative: str) -> str:
        """:meth:`_at` as a str, without pathlib (an incremental save looks up hundreds)."""
        return os.path.join(self.url, *relative_parts(relative))

    # ---------------------------------------------------------------------- small files
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

    def file_sizes(self) -> dict[str, int]:
        sizes = {}
        for name in self.list_files():
            with contextlib.suppress(FileNotFoundError):
                info = os.lstat(self._at(name))
                if stat.S_ISREG(info.st_mode):
                    sizes[name] = info.st_size
        return sizes

    def _name(self, path: Path) -> str:
        return path.relative_to(self.path).as_posix()

    def read_bytes(self, relative: str, *, limit: int) -> bytes:
        path = self._at(relative)
        try:
            fd = os.open(path, os.O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC)
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
        path = self._replace_file(relative, data, durable=True)
        fsync_dir(path.parent)

    def _replace_file(self, relative: str, data: bytes, *, durable: bool) -> Path:
        """Write ``relative`` through a temporary sibling and a rename."""
        path = self._at(relative)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}{TMP_MARKER}{os.getpid()}-{secrets.token_hex(4)}")
        try:
            with open(tmp, "wb") as f:
                f.write(data)
                if durable:
                    f.flush()
                    os.fsync(f.fileno())
            os.replace(tmp, path)
        finally:
            tmp.unlink(missing_ok=True)
        return path

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

    # ------------------------------------------------------------------ checkpoints
    def check_writable(self) -> None:
        check_replaceable(self.path)

    @contextlib.contextmanager
    def writing(self) -> Iterator[WriteTarget]:
        with atomic_directory(self.path) as tmp:
            yield WriteTarget(tmp, self)

    @contextlib.contextmanager
    def loose_files(self) -> Iterator[Path]:
        yield self.path  # written in place: the caller creates and cleans up what it needs

    def can_reuse_from(self, source: Storage) -> bool:
        return isinstance(source, LocalStorage)  # any local directory: a link, or a copy

    def reuse_dirs_into(self, target: WriteTarget, source: Storage, dirs: Listed) -> list[NotTaken]:
        # An incremental save links a few files of each of hundreds of policies: one descriptor
        # per parent directory on each side, then a mkdir and links relative to them (no path is
        # built or resolved from the root per file). Each file is checked once linked, through
        # the new directory: what is hashed is what the new checkpoint holds.
        assert isinstance(source, LocalStorage)
        if not _LINK_AT:
            return self._reuse_dirs_by_path(target, source, dirs)
        by_parent: dict[str, list[tuple[str, Mapping[str, Mapping[str, Any]]]]] = {}
        for directory, files in dirs.items():
            parent, _, name = "/".join(relative_parts(directory)).rpartition("/")
            by_parent.setdefault(parent, []).append((name, files))
        not_taken = []
        for parent, children in by_parent.items():
            made = os.path.join(target.directory, *relative_parts(parent))
            os.makedirs(made, exist_ok=True)
            not_taken += [NotTaken(f"{parent}/{failed.directory}".lstrip("/"), failed.file, failed.problem)
                          for failed in _link_children(source.local_file(parent), made, children)]
        return not_taken

    def _reuse_dirs_by_path(self, target: WriteTarget, source: LocalStorage, dirs: Listed) -> list[NotTaken]:
        """:meth:`reuse_dirs_into` where links cannot be made relative to directory descriptors."""
        not_taken = []
        for directory, files in dirs.items():
            made = os.path.join(target.directory, *relative_parts(directory))
            os.makedirs(made, exist_ok=True)
            for file, entry in files.items():
                destination = os.path.join(made, file)
                os.makedirs(os.path.dirname(destination), exist_ok=True)  # model/ of native files
                problem = _taken(link_or_copy, source.local_file(f"{directory}/{file}"), destination)
                problem = problem or file_problem(None, destination, entry)
                if problem is not None:
                    shutil.rmtree(made)
                    not_taken.append(NotTaken(directory, file, problem))
                    break
        return not_taken

    def open_reader(self) -> CheckpointDir:
        if not self.path.is_dir():
            raise CheckpointNotFoundError(
                f"Checkpoint {self.path} not found: {self.path} is not a directory.")
        return CheckpointDir.open(self.path)

    # ------------------------------------------------------------------- manager roots
    def absolute(self) -> LocalStorage:
        return LocalStorage(self.path.absolute())

    def list_entries(self) -> list[str]:
        try:
            return os.listdir(self.path)
        except (FileNotFoundError, NotADirectoryError):
            return []

    def is_committed(self, relative: str = "") -> bool:
        return (self._at(relative) / MANIFEST_FILE).is_file()

    def write_record(self, relative: str, data: bytes) -> None:
        # Atomic (rename), but not fsynced: a record is written just before a checkpoint whose
        # commit fsyncs this same directory, and a record lost to a power cut only loses a
        # metric (an unreadable record reads as none). It keeps save(blocking=False) cheap.
        self._replace_file(relative, data, durable=False)

    def remove_checkpoint(self, relative: str) -> None:
        # One rename makes it invisible; cleanup() removes the rest if we die during rmtree.
        path = self._at(relative)
        doomed = path.with_name(f".{path.name}{TMP_MARKER}{os.getpid()}-{secrets.token_hex(4)}")
        try:
            os.rename(path, doomed)
        except FileNotFoundError:
            return
        fsync_dir(path.parent)
        shutil.rmtree(doomed)

    def remove_leftovers(self, writer_gone: Callable[[str], bool]) -> None:
        # local temporaries name their process, which proves them abandoned once it is dead
        cleanup(self.path)  # temporary directories of dead processes
        for name in self.list_entries():
            path = self.path / name
            if name.startswith(".") and TMP_MARKER in name and path.is_file() and not _alive(name):
                path.unlink()  # a record's (or a deletion's) temporary file of a dead process


def _alive(temporary_name: str) -> bool:
    """Whether the process that made the temporary ``.<name>.cairn-tmp-<pid>-<hex>`` runs."""
    pid = owner_pid(temporary_name, TMP_MARKER)
    return pid is not None and pid != os.getpid() and pid_alive(pid)


def _link_children(src_root: str, dst_root: str,
                   children: list[tuple[str, Mapping[str, Mapping[str, Any]]]]) -> list[NotTaken]:
    """Make each directory ``name`` of ``children`` in ``dst_root`` and link its ``files`` there
    from ``src_root/name``, each kept only if the file linked is what its entry lists
    (:func:`~cairn.checkpoint.storage.reuse_check.file_problem`); else remove that directory.
    Return those removed, with why (relative to ``src_root``)."""
    try:
        src = os.open(src_root, os.O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
    except FileNotFoundError:
        return [NotTaken(name, next(iter(files)), "is missing (its directory is gone)")
                for name, files in children]
    not_taken = []
    try:
        dst = os.open(dst_root, os.O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        try:
            for name, files in children:
                with contextlib.suppress(FileExistsError):
                    os.mkdir(name, dir_fd=dst)
                for file, entry in files.items():
                    relative = f"{name}/{file}"
                    if "/" in file:  # a file of a subdirectory (native model files: model/...)
                        os.makedirs(os.path.join(dst_root, os.path.dirname(relative)), exist_ok=True)
                    problem = _taken(_link_at, src, dst, relative, src_root, dst_root)
                    problem = problem or file_problem(dst, relative, entry)
                    if problem is not None:
                        shutil.rmtree(os.path.join(dst_root, name))  # this save's own directory
                        not_taken.append(NotTaken(name, file, problem))
                        break
        finally:
            os.close(dst)
    finally:
        os.close(src)
    return not_taken


def _taken(link: Callable[..., None], *args: Any) -> str | None:
    """Run ``link(*args)``; None when it linked or copied a file, else why not (a phrase that follows
    the source file's name; a source that is missing is said when the link is checked)."""
    try:
        link(*args)
    except FileNotFoundError:
        return None
    except OSError as exc:  # a directory, a FIFO, a file that cannot be read or copied
        return f"cannot be linked or copied ({exc.strerror or exc})"
    return None


def _link_at(src: int, dst: int, relative: str, src_root: str, dst_root: str) -> None:
    """Hard-link ``relative`` of directory ``src`` as ``relative`` of ``dst`` (descriptors of
    ``src_root`` and ``dst_root``); copy it where links cannot be made (:func:`link_or_copy`)."""
    try:
        os.link(relative, relative, src_dir_fd=src, dst_dir_fd=dst, follow_symlinks=False)
    except OSError as exc:
        if exc.errno not in _NO_LINK:
            raise
        _copy(os.path.join(src_root, relative), os.path.join(dst_root, relative))


def link_or_copy(source: str | os.PathLike[str], destination: str | os.PathLike[str]) -> None:
    """Hard-link ``source`` as ``destination``; copy it (and fsync) where links cannot be
    made (another device, a file system without hard links)."""
    try:
        os.link(source, destination, follow_symlinks=False)
        return
    except OSError as exc:
        if exc.errno not in _NO_LINK:
            raise
    _copy(source, destination)


def _copy(source: str | os.PathLike[str], destination: str | os.PathLike[str]) -> None:
    shutil.copyfile(source, destination, follow_symlinks=False)
    with open(destination, "rb+") as f:
        os.fsync(f.fileno())
