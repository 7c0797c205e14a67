"""What an incremental save takes from an earlier checkpoint is checked by content, as taken.

A file is taken (hard-linked, copied) from an earlier checkpoint only when the bytes taken hash
to what that checkpoint's manifest lists (:meth:`~cairn.checkpoint.storage.Storage.reuse_dirs_into`):
sizes alone let one flipped bit on disk ride into every later checkpoint (issue 37 item 4). The
checkpoint layer has proven that the live state serialises to those same listed bytes
(:mod:`cairn.checkpoint.incremental`); this module checks the other side, that the file taken
holds them. Locally the file hashed is the one linked, read through a descriptor opened in the
new checkpoint's own directory (:func:`file_problem`), so a file swapped in the earlier
checkpoint between a check and the link cannot slip through; on an object store the object is
read whole where a load reads it, before the server-side copy (docs/storage.md says what each
guarantees).
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from cairn.checkpoint.dirhandle import O_CLOEXEC, O_NOFOLLOW, O_NONBLOCK
from cairn.checkpoint.safetensors_io import file_entry
from cairn.checkpoint.storage.base import Listed, NotTaken
from cairn.checkpoint.storage.object_prefix import ObjectPrefix
from cairn.errors import CheckpointCorruptedError, CheckpointNotFoundError

__all__ = ["file_problem", "not_taken", "hash_problem", "object_problem"]

#: Read in pieces of this size: a large arrays file is hashed without holding it in memory.
_CHUNK = 1 << 20


def hash_problem(chunks: Iterable[Any], entry: Mapping[str, Any]) -> str | None:
    """Why the bytes in ``chunks`` are not the file ``entry`` (``{"size", "hash"}``) lists, as a
    phrase that follows the file's name, or None when they are."""
    found = file_entry(chunks)
    if found["size"] != entry["size"]:
        return f"has {found['size']} bytes where its manifest lists {entry['size']}"
    if found["hash"] != entry["hash"]:
        return (f"does not match its hash in the manifest (xxh3-128 {found['hash']}, "
                f"listed {entry['hash']})")
    return None


def file_problem(dir_fd: int | None, relative: str, entry: Mapping[str, Any]) -> str | None:
    """:func:`hash_problem` of the local file ``relative`` (of the directory ``dir_fd``, or of
    the working directory for None), read through one descriptor opened without following a
    symbolic link: what is hashed is the inode that name holds."""
    try:
        fd = os.open(relative, os.O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, dir_fd=dir_fd)
    except FileNotFoundError:
        return "is missing"
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.EMLINK):
            return "is a symbolic link"
        return f"cannot be opened ({exc.strerror})"
    with os.fdopen(fd, "rb", buffering=0) as f:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            return "is not a regular file"
        if info.st_size != entry["size"]:  # before reading: a huge file is not read
            return f"has {info.st_size} bytes where its manifest lists {entry['size']}"
        return hash_problem(_chunks(f, entry["size"]), entry)


def _chunks(f: Any, size: int) -> Iterable[memoryview]:
    """The bytes of the open file ``f``, in pieces, one past ``size`` at most (a file that grew
    meanwhile is seen)."""
    view = memoryview(bytearray(min(_CHUNK, size + 1)))
    left = size + 1
    while left > 0:
        n = f.readinto(view[:min(len(view), left)])
        if not n:
            return
        left -= n
        yield view[:n]


def object_problem(storage: ObjectPrefix, relative: str, entry: Mapping[str, Any]) -> str | None:
    """:func:`hash_problem` of the object ``relative`` of ``storage``, read whole (its size
    asked first where it is read in ranges). A failure of the store itself is raised."""
    try:
        data = storage.read_exact(relative, entry["size"], limit=entry["size"])
    except CheckpointNotFoundError:
        return "is missing"
    except CheckpointCorruptedError:
        return f"is not the {entry['size']} bytes its manifest lists"
    return hash_problem([data], entry)


def not_taken(dirs: Listed, problems: Mapping[str, str | None],
              take: Callable[[str], None]) -> list[NotTaken]:
    """``take(relative name)`` each file of each directory of ``dirs`` none of whose files has a
    ``problems`` entry other than None; return the others, each with its first such file."""
    found = []
    for directory, files in dirs.items():
        wrong = [file for file in files if problems[f"{directory}/{file}"] is not None]
        if wrong:
            found.append(NotTaken(directory, wrong[0], str(problems[f"{directory}/{wrong[0]}"])))
            continue
        for file in files:
            take(f"{directory}/{file}")
    return found
