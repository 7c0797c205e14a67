"""Atomic directory replacement: a checkpoint path holds the old checkpoint or the new one.

A save may replace only a cairn checkpoint (a directory holding its manifest) or an empty
directory: any other directory is refused before anything is written, as it would be deleted.

A save writes into a temporary sibling ``.<name>.cairn-tmp-<pid>-<hex>``, fsyncs every file and
directory, then moves it into place:

* path absent: ``rename(tmp, path)``, atomic on POSIX;
* path present, Linux: ``renameat2(tmp, path, RENAME_EXCHANGE)`` swaps both atomically, and the
  old checkpoint (now at the temporary name) is deleted;
* path present, elsewhere: the old one is first renamed to ``.<name>.cairn-old-<pid>-<hex>``;
  a crash between the two renames leaves it there, and :func:`cleanup` puts it back.

Leftover temporary directories of dead processes are removed by the next save next to them, or
by :func:`cleanup`.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import errno
import itertools
import os
import secrets
import shutil
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from cairn.checkpoint.format import MANIFEST_FILE
from cairn.checkpoint.paths import save_target
from cairn.errors import CheckpointFormatError

__all__ = ["atomic_directory", "check_replaceable", "cleanup", "first_names", "fsync_dir", "owner_pid",
           "pid_alive", "TMP_MARKER", "OLD_MARKER"]

TMP_MARKER = ".cairn-tmp-"
OLD_MARKER = ".cairn-old-"
_RENAME_EXCHANGE = 2
_AT_FDCWD = -100


def _libc_renameat2() -> object | None:
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        fn = libc.renameat2
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    fn.restype = ctypes.c_int
    return fn


_RENAMEAT2 = _libc_renameat2()


def _libc_syncfs() -> Any:
    try:
        fn = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True).syncfs
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_int]
    fn.restype = ctypes.c_int
    return fn


_SYNCFS = _libc_syncfs()
#: From this many directories on, one syncfs(2) of the file system makes a checkpoint durable
#: instead of an fsync per directory and file: every fsync waits for a device flush (~0.1 ms
#: here, several ms on a busy disk), and an Algorithm checkpoint of N policies makes N
#: directories (of hard links, in an incremental save) and up to 3N files.
SYNCFS_FROM_DIRECTORIES = 8


def syncs_whole_file_system(directories: int) -> bool:
    """Whether :func:`atomic_directory` makes a tree of this many directories durable with one
    syncfs(2): its writer may then write files without fsyncing each
    (:func:`~cairn.checkpoint.writer_files.staging`). Should syncfs fail, every file and
    directory of the tree is fsynced instead, so the tree is durable either way."""
    return _SYNCFS is not None and directories >= SYNCFS_FROM_DIRECTORIES


def _exchange(a: Path, b: Path) -> bool:
    """Atomically swap two paths; False when the platform or file system cannot."""
    if _RENAMEAT2 is None:
        return False
    rc = _RENAMEAT2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE)  # type: ignore[operator]
    if rc == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.ENOSYS, errno.EINVAL, errno.ENOTSUP):
        return False
    raise OSError(err, os.strerror(err), str(b))


def fsync_dir(path: Path) -> None:
    """Make a directory's entries durable (no-op where directories cannot be opened)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def pid_alive(pid: int) -> bool:
    """Whether a process ``pid`` runs (one of another user counts as running)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def owner_pid(name: str, marker: str) -> int | None:
    """The process ID in a leftover's name ``.<name><marker><pid>-<hex>``; None if it has none."""
    try:
        return int(name.split(marker, 1)[1].split("-", 1)[0])
    except (IndexError, ValueError):
        return None


def cleanup(root: str | os.PathLike[str], *, name: str | None = None) -> list[str]:
    """Remove leftovers of interrupted saves under ``root`` (only of dead processes).

    Temporary directories are deleted; an old checkpoint left by an interrupted two-step
    replacement is moved back to its path if that path is empty. Returns what was removed or
    restored. ``name`` limits the cleanup to leftovers of that checkpoint name.
    """
    root_path = Path(root).expanduser()
    done: list[str] = []
    if not root_path.is_dir():
        return done
    for entry in root_path.iterdir():
        base = entry.name
        for marker in (TMP_MARKER, OLD_MARKER):
            if not base.startswith(".") or marker not in base:
                continue
            target_name = base[1:].split(marker, 1)[0]
            if name is not None and target_name != name:
                continue
            pid = owner_pid(base, marker)
            if pid is None or (pid != os.getpid() and pid_alive(pid)) or str(entry) in _IN_PROGRESS:
                continue
            target = root_path / target_name
            if marker == OLD_MARKER and not target.exists():
                os.replace(entry, target)
            else:
                shutil.rmtree(entry, ignore_errors=True)
            done.append(str(entry))
    return done


#: Temporary directories this process is writing right now: never cleaned up from under a save
#: running in another thread.
_IN_PROGRESS: set[str] = set()


@contextlib.contextmanager
def atomic_directory(target: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a fresh temporary directory; on normal exit it atomically becomes ``target``.

    ``target`` is a path or a ``file://`` URL (see :func:`~cairn.checkpoint.paths.save_target`).
    An existing directory there is replaced only if it is a cairn checkpoint or empty; any other
    raises :class:`~cairn.errors.CheckpointFormatError` before anything is written (and again,
    with the new checkpoint discarded, if such a directory appeared there during the save).

    On an exception the temporary directory is removed and ``target`` is untouched. An
    ``OSError`` (e.g. ``ENOSPC``, disk full) is raised again as an ``OSError`` of the same
    ``errno`` whose message names ``target`` and says that the previous checkpoint is intact.
    """
    target = save_target(target).absolute()
    parent = target.parent
    try:
        check_replaceable(target)
        parent.mkdir(parents=True, exist_ok=True)
        if target.exists() and not target.is_dir():
            raise FileExistsError(errno.EEXIST, f"{target} exists and is not a directory", str(target))
        cleanup(parent, name=target.name)
        tmp = parent / f".{target.name}{TMP_MARKER}{os.getpid()}-{secrets.token_hex(4)}"
        tmp.mkdir()
    except OSError as exc:
        raise _save_error(exc, target) from exc
    _IN_PROGRESS.add(str(tmp))
    try:
        yield tmp
        _fsync_tree(tmp)
        _move_into_place(tmp, target)
        fsync_dir(parent)
    except OSError as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        raise _save_error(exc, target) from exc
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    finally:
        _IN_PROGRESS.discard(str(tmp))


def _save_error(exc: OSError, target: Path) -> OSError:
    """The same kind of OSError, saying which checkpoint failed and that the old one is intact."""
    if exc.errno is None:
        return exc
    cause = exc.strerror or str(exc)
    where = f" ({exc.filename})" if exc.filename else ""
    return OSError(
        exc.errno,
        f"Could not save the checkpoint {target}: {cause}{where}. The previous checkpoint at "
        "that path, if any, is unchanged, and the partial write was removed.",
        str(target),
    )


def first_names(names: list[str]) -> str:
    """The first three of ``names``, quoted, for a message (``'a', 'b', 'c', ...``)."""
    return ", ".join(repr(name) for name in names[:3]) + (", ..." if len(names) > 3 else "")


def check_replaceable(target: Path) -> None:
    """Raise :class:`~cairn.errors.CheckpointFormatError` if a save to the local path ``target``
    would delete something other than a checkpoint: a non-empty directory without a manifest.

    Replacing a directory deletes what it holds: fine for an older checkpoint or nothing, data
    loss for anything else (e.g. a results folder passed by mistake). :func:`atomic_directory`
    calls it; callers may call it earlier, to refuse before doing any work.
    """
    if not target.is_dir() or (target / MANIFEST_FILE).is_file():
        return
    try:
        entries = sorted(entry.name for entry in target.iterdir())
    except FileNotFoundError:  # replaced or removed meanwhile by another writer: nothing to keep
        return
    if not entries:
        return
    raise CheckpointFormatError(
        f"Cannot save a checkpoint to {target}: that directory is not a cairn checkpoint (it has "
        f"no {MANIFEST_FILE}) and is not empty ({len(entries)} entries: {first_names(entries)}), "
        f"and saving would delete what it holds. Expected a new or empty directory, or an existing "
        f"checkpoint to replace. Save to a new or empty directory, or remove {target} first."
    )


def _move_into_place(tmp: Path, target: Path) -> None:
    """Atomically make ``tmp`` the directory at ``target``, replacing any checkpoint there.

    Concurrent writers of the same target are fine: each one's rename or exchange is atomic, so
    the target always holds one complete checkpoint (the last one moved in).
    """
    for _ in range(100):  # another writer may create or replace the target between our steps
        check_replaceable(target)  # again: something may have been put there during the save
        if not os.path.lexists(target):
            try:
                os.rename(tmp, target)
                return
            except OSError as exc:
                if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST):
                    raise
                continue  # another writer got there first: exchange with its checkpoint
        try:
            exchanged = _exchange(tmp, target)
        except FileNotFoundError:
            continue  # the target vanished meanwhile (another writer's two-step replace)
        if exchanged:
            shutil.rmtree(tmp, ignore_errors=True)  # tmp now holds the old checkpoint
            return
        old = target.parent / f".{target.name}{OLD_MARKER}{os.getpid()}-{secrets.token_hex(4)}"
        try:
            os.rename(target, old)
        except FileNotFoundError:
            continue
        try:
            os.rename(tmp, target)
        except OSError:
            if not os.path.lexists(target):
                os.rename(old, target)  # put the old checkpoint back before failing
            raise
        shutil.rmtree(old, ignore_errors=True)
        return
    raise OSError(errno.EBUSY, f"{target} kept changing while this checkpoint was moved there")


def _fsync_tree(root: Path) -> None:
    # Files are fsynced as they are written (writer_files.py); directories here. They are
    # fsynced concurrently: each fsync of a directory waits for a journal commit, and commits
    # that are waited for at once are shared (an Algorithm checkpoint has a directory per
    # policy: 64 one after the other took ~250 ms on a busy disk). All finish before the rename.
    # The threads are kept between saves: starting 16 threads cost more than the fsyncs.
    walking = os.walk(root)
    walked = list(itertools.islice(walking, SYNCFS_FROM_DIRECTORIES))  # enough to decide
    if syncs_whole_file_system(len(walked)):
        if _syncfs(root):
            return
        # Its writer may have skipped the files' fsyncs (syncs_whole_file_system): do them.
        walked += walking
        files = [Path(d) / name for d, _, names in walked for name in names]
        list(_fsync_pool().map(_fsync_file, files))
    walked += walking
    dirs = [Path(d) for d, _, _ in walked]
    if len(dirs) < 4:
        for d in reversed(dirs):
            fsync_dir(d)
        return
    list(_fsync_pool().map(fsync_dir, reversed(dirs)))


def _fsync_file(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _syncfs(root: Path) -> bool:
    """Write back every pending change of the file system holding ``root`` (Linux's syncfs(2),
    which reports write-back errors since Linux 5.8); False where it cannot."""
    if _SYNCFS is None:
        return False
    fd = os.open(root, os.O_RDONLY)
    try:
        if _SYNCFS(fd) == 0:
            return True
        err = ctypes.get_errno()
        if err in (errno.ENOSYS, errno.EINVAL, errno.ENOTSUP, errno.EBADF):
            return False
        raise OSError(err, os.strerror(err), str(root))
    finally:
        os.close(fd)


_FSYNC_POOL: list[ThreadPoolExecutor] = []  # at most one, made on first use
_FSYNC_POOL_LOCK = threading.Lock()


def _fsync_pool() -> ThreadPoolExecutor:
    with _FSYNC_POOL_LOCK:
        if not _FSYNC_POOL:
            _FSYNC_POOL.append(ThreadPoolExecutor(16, thread_name_prefix="cairn-fsync"))
        return _FSYNC_POOL[0]


# A forked child has none of the parent's threads: it makes its own pool.
os.register_at_fork(after_in_child=_FSYNC_POOL.clear)
