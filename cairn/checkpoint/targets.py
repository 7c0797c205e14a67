"""Where a save writes: an atomic local directory, or an object-store prefix committed by its
manifest.

:func:`writing` yields a :class:`WriteTarget`: a local directory the writer fills (the files
of the checkpoint, as laid out in docs/checkpoint-format.md), plus :meth:`WriteTarget.reuse`,
which takes a file from an earlier checkpoint without writing it again (incremental saves).

* Local: the directory is the temporary sibling of :func:`~cairn.checkpoint.atomic.atomic_directory`,
  renamed into place at the end; ``reuse`` is a hard link (a copy across devices).
* Object store: the directory is a local staging area. At the end every file is uploaded under
  the final prefix in parallel (``reuse`` is a server-side copy), and the manifest **last**:
  it is the commit point. Replacing a committed checkpoint there uploads the new files to a
  temporary prefix beside it first, so that a failed or killed upload leaves the old
  checkpoint whole; then it deletes the old manifest (the prefix is uncommitted while its
  objects are replaced, so no reader ever sees a mix of two checkpoints), copies the new files
  over server-side, uploads the new manifest, and deletes the old checkpoint's other objects
  and the temporary prefix (:func:`_replace`, docs/storage.md).

A prefix holding objects that are not a cairn checkpoint's is never written into
(``CheckpointFormatError``), as locally.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import shutil
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, cast

from cairn.checkpoint.atomic import TMP_MARKER, atomic_directory, check_replaceable
from cairn.checkpoint.format import (
    ALGORITHM_ARRAYS_FILE,
    ALGORITHM_STATE_FILE,
    COMPONENTS_DIR,
    MANIFEST_FILE,
    POLICIES_DIR,
    POLICY_ARRAYS_FILE,
    POLICY_STATE_FILE,
)
from cairn.checkpoint.object_store import ObjectStorage
from cairn.checkpoint.storage import LocalStorage, Storage, resolve_storage
from cairn.checkpoint.writer_files import staging
from cairn.errors import (
    CheckpointError,
    CheckpointFormatError,
    CheckpointStorageError,
    StoragePermissionError,
)

__all__ = ["WriteTarget", "writing", "check_save_location", "CHECKPOINT_ENTRIES"]

#: The top-level names a cairn checkpoint may hold (files, and directories with a "/").
CHECKPOINT_ENTRIES = frozenset({
    MANIFEST_FILE, ALGORITHM_STATE_FILE, ALGORITHM_ARRAYS_FILE, POLICY_STATE_FILE,
    POLICY_ARRAYS_FILE, f"{POLICIES_DIR}/", f"{COMPONENTS_DIR}/", "model/",
})


def check_save_location(location: str | os.PathLike[str] | Storage, *,
                        storage_options: Mapping[str, Any] | None = None) -> Storage:
    """The :class:`Storage` a save to ``location`` writes, refused before any state is
    gathered when a save may not go there: a local directory that is neither empty nor a
    checkpoint, or an object-store prefix holding objects other than a checkpoint's."""
    storage = resolve_storage(location, storage_options=storage_options)
    if isinstance(storage, LocalStorage):
        check_replaceable(storage.path)
    else:
        _check_prefix(storage, storage.list_files())
    return storage


def _check_prefix(storage: Storage, names: list[str]) -> None:
    foreign = sorted({name.split("/", 1)[0] + ("/" if "/" in name else "") for name in names}
                     - CHECKPOINT_ENTRIES)
    if not foreign:
        return
    shown = ", ".join(repr(name) for name in foreign[:3]) + (", ..." if len(foreign) > 3 else "")
    raise CheckpointFormatError(
        f"Cannot save a checkpoint to {storage.url}: that prefix holds objects that are not a "
        f"cairn checkpoint's ({shown}), and saving would delete them. Save to a new prefix, or "
        "remove those objects first."
    )


class WriteTarget:
    """The directory a checkpoint is written into, and how earlier files are reused."""

    def __init__(self, directory: Path, storage: Storage) -> None:
        #: Write the checkpoint's new files here (a local directory in every case).
        self.directory = directory
        #: The final location.
        self.storage = storage
        self.copies: list[tuple[ObjectStorage, str, str]] = []

    def can_reuse(self, source: Storage) -> bool:
        """Whether files of ``source`` (an earlier checkpoint) can be linked or copied
        server-side into this one."""
        return self.storage.same_store(source)

    def reuse(self, source: Storage, name: str, relative: str) -> None:
        """Make ``relative`` of this checkpoint the file ``name`` of ``source`` (which
        :meth:`can_reuse`), without writing its bytes again."""
        if isinstance(source, LocalStorage):
            destination = self.directory / relative
            destination.parent.mkdir(parents=True, exist_ok=True)
            link_or_copy(source.path / name, destination)
        else:  # can_reuse: an object store, the target's
            self.copies.append((cast(ObjectStorage, source), name, relative))


def link_or_copy(source: Path, destination: Path) -> None:
    """Hard-link ``source`` as ``destination``; copy it (and fsync) where links cannot be
    made (another device, a file system without hard links)."""
    try:
        os.link(source, destination, follow_symlinks=False)
        return
    except OSError as exc:
        if exc.errno not in (errno.EXDEV, errno.EPERM, errno.EMLINK, errno.ENOTSUP, errno.EACCES):
            raise
    shutil.copyfile(source, destination, follow_symlinks=False)
    with open(destination, "rb+") as f:
        os.fsync(f.fileno())


@contextlib.contextmanager
def writing(location: str | os.PathLike[str] | Storage, *,
            storage_options: Mapping[str, Any] | None = None) -> Iterator[WriteTarget]:
    """Yield the :class:`WriteTarget` of a save to ``location``; on normal exit the checkpoint
    written into it becomes ``location`` (module docstring). On an exception a checkpoint
    committed at ``location`` is unchanged, locally at every step and on an object store
    unless the failure came in the commit step of its replacement (the server-side copies over
    it), which the error then says. A prefix left uncommitted (objects of a failed save, no
    manifest) is refused by readers and replaced by the next save there."""
    storage = resolve_storage(location, storage_options=storage_options)
    if isinstance(storage, LocalStorage):
        with atomic_directory(storage.path) as tmp:
            yield WriteTarget(tmp, storage)
        return
    storage = cast(ObjectStorage, storage)  # resolve_storage: local, or an object store
    directory = Path(tempfile.mkdtemp(prefix="cairn-upload-"))
    try:
        target = WriteTarget(directory, storage)
        with staging():  # staged files are uploaded at once: no fsync
            yield target
        _commit(target, storage)
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def _commit(target: WriteTarget, storage: ObjectStorage) -> None:
    """Upload the staged checkpoint under ``storage``'s prefix, the manifest last. (The prefix
    is checked here, listed once; :func:`check_save_location` checks it before the state is
    gathered too.)

    Over a committed checkpoint the new files go to a temporary prefix beside it first
    (:func:`_replace`), so that the old checkpoint stays whole until every byte of the new one
    is in the store."""
    staged = sorted(path.relative_to(target.directory).as_posix()
                    for path in target.directory.rglob("*") if path.is_file())
    if MANIFEST_FILE not in staged:
        raise CheckpointFormatError(f"Internal error: the checkpoint for {storage.url} has no manifest.")
    now = storage.list_files()
    _check_prefix(storage, now)
    # Temporary prefixes of earlier saves here that were killed (one writer per prefix, so
    # none is in progress); removed once this save is committed. Only a cleanup: a bucket
    # policy that lets this save write but not list beside the prefix does not stop it.
    leftovers: list[str] = []
    if now:
        with contextlib.suppress(StoragePermissionError):
            leftovers = storage.list_siblings(_staging_start(storage))
    written = [name for name in staged if name != MANIFEST_FILE]
    manifest = [(target.directory / MANIFEST_FILE, MANIFEST_FILE)]
    if MANIFEST_FILE in now and storage.has_parent:
        _replace(target, storage, written)
    else:
        with _committing(storage, replacing=MANIFEST_FILE in now):
            if MANIFEST_FILE in now:  # a bucket's root: nowhere beside it to upload to
                storage.delete(MANIFEST_FILE)  # uncommit the old checkpoint before any file changes
            storage.put_files([(target.directory / name, name) for name in written])
            storage.copy_files(target.copies)
            storage.put_files(manifest)  # the commit point
    keep = {*staged, *(relative for _, _, relative in target.copies)}
    storage.delete_files(sorted(set(now) - keep))
    for name in leftovers:
        storage.sibling(name).delete_prefix()


def _staging_start(storage: ObjectStorage) -> str:
    """How the temporary prefixes of saves to ``storage`` begin: ``.<name>.cairn-tmp-``, as a
    local save's temporary directory (docs/checkpoint-format.md, section 12)."""
    return f".{storage.name}{TMP_MARKER}"


def _replace(target: WriteTarget, storage: ObjectStorage, written: list[str]) -> None:
    """Replace the committed checkpoint at ``storage`` with the staged one.

    1. Every new file is uploaded to ``.<name>.cairn-tmp-<pid>-<hex>/`` beside the prefix: the
       long, failure-prone step touches nothing of the old checkpoint, which readers load
       meanwhile and which is intact if the upload fails.
    2. The commit: the old manifest is deleted (the prefix is uncommitted from here), the
       uploaded files are copied over the old ones server-side (no byte passes through this
       process), then the new manifest is uploaded.
    3. The temporary prefix is deleted (also after a failure; if that fails too, the next save
       here removes it).
    """
    stage = storage.sibling(f"{_staging_start(storage)}{os.getpid()}-{secrets.token_hex(4)}")
    try:
        try:
            stage.put_files([(target.directory / name, name) for name in written])
        except CheckpointStorageError as exc:
            fix = (f" A save over a checkpoint needs write access beside it ({stage.url})."
                   if isinstance(exc, StoragePermissionError) else "")
            raise type(exc)(
                f"Cannot save the checkpoint to {storage.url}: uploading its files failed "
                f"({exc}). The previous checkpoint at {storage.url} is intact: nothing there was "
                f"changed (the new files were being uploaded beside it, to {stage.url}).{fix} "
                "Fix the cause and save again."
            ) from None
        with _committing(storage, replacing=True):
            storage.delete(MANIFEST_FILE)  # uncommit the old checkpoint before any file changes
            storage.copy_files([(stage, name, name) for name in written] + target.copies)
            storage.put_files([(target.directory / MANIFEST_FILE, MANIFEST_FILE)])  # the commit point
    finally:
        with contextlib.suppress(CheckpointError):
            stage.delete_prefix()


@contextlib.contextmanager
def _committing(storage: ObjectStorage, *, replacing: bool) -> Iterator[None]:
    """Say in a failure of the step that uncommits an old checkpoint that it is gone."""
    try:
        yield
    except CheckpointStorageError as exc:
        if not replacing:
            raise
        raise type(exc)(
            f"Cannot save the checkpoint to {storage.url}: committing it failed ({exc}). The "
            f"previous checkpoint at {storage.url} was removed before the failure (an object "
            "store has no rename, so the new files are written over the old ones under the same "
            "names), and the new one is not committed: the location is refused "
            "(UncommittedCheckpointError) until a save there succeeds. Save again."
        ) from None
