"""Saving to an object store: stage locally, upload, and commit with the manifest, written last.

Object stores have no rename. :func:`object_writing` yields a
:class:`~cairn.checkpoint.storage.base.WriteTarget` whose directory is a local staging area
(written without fsync: it is uploaded at once). At the end every file is uploaded under the
final prefix in parallel (a reused file is a server-side copy), and the manifest **last**: it is
the commit point. Replacing a committed checkpoint uploads the new files to a temporary prefix
beside it first, so that a failed or killed upload leaves the old checkpoint whole; then it
deletes the old manifest (the prefix is uncommitted while its objects are replaced, so no
reader ever sees a mix of two checkpoints), copies the new files over server-side, uploads the
new manifest, and deletes the old checkpoint's other objects and the temporary prefix
(:func:`_replace`, docs/storage.md).

A prefix holding objects that are not a cairn checkpoint's is never written into
(``CheckpointFormatError``, :func:`check_prefix`), as locally.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from cairn.checkpoint.atomic import TMP_MARKER, first_names
from cairn.checkpoint.format import (
    ALGORITHM_ARRAYS_FILE,
    ALGORITHM_STATE_FILE,
    COMPONENTS_DIR,
    MANIFEST_FILE,
    POLICIES_DIR,
    POLICY_ARRAYS_FILE,
    POLICY_STATE_FILE,
)
from cairn.checkpoint.storage.base import WriteTarget
from cairn.checkpoint.writer_files import staging
from cairn.errors import (
    CheckpointError,
    CheckpointFormatError,
    CheckpointStorageError,
    StoragePermissionError,
)

if TYPE_CHECKING:
    from cairn.checkpoint.storage.objects import ObjectStorage

__all__ = ["CHECKPOINT_ENTRIES", "check_prefix", "object_writing", "staging_start"]

#: The top-level names a cairn checkpoint may hold (files, and directories with a "/").
CHECKPOINT_ENTRIES = frozenset({
    MANIFEST_FILE, ALGORITHM_STATE_FILE, ALGORITHM_ARRAYS_FILE, POLICY_STATE_FILE,
    POLICY_ARRAYS_FILE, f"{POLICIES_DIR}/", f"{COMPONENTS_DIR}/", "model/",
})


def check_prefix(storage: ObjectStorage, names: list[str]) -> None:
    """Refuse a save to ``storage`` whose prefix holds ``names`` that no checkpoint has."""
    foreign = sorted({name.split("/", 1)[0] + ("/" if "/" in name else "") for name in names}
                     - CHECKPOINT_ENTRIES)
    if not foreign:
        return
    raise CheckpointFormatError(
        f"Cannot save a checkpoint to {storage.url}: that prefix holds objects that are not a "
        f"cairn checkpoint's ({first_names(foreign)}), and saving would delete them. Save to a "
        "new prefix, or remove those objects first."
    )


@contextlib.contextmanager
def object_writing(storage: ObjectStorage) -> Iterator[WriteTarget]:
    """The write target of a save to ``storage``, committed on normal exit (module docstring)."""
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
    is checked here, listed once; ``check_writable`` checks it before the state is gathered
    too.)

    Over a committed checkpoint the new files go to a temporary prefix beside it first
    (:func:`_replace`), so that the old checkpoint stays whole until every byte of the new one
    is in the store."""
    staged = sorted(path.relative_to(target.directory).as_posix()
                    for path in target.directory.rglob("*") if path.is_file())
    if MANIFEST_FILE not in staged:
        raise CheckpointFormatError(f"Internal error: the checkpoint for {storage.url} has no manifest.")
    now = storage.list_files()
    check_prefix(storage, now)
    # Temporary prefixes of earlier saves here that were killed (one writer per prefix, so
    # none is in progress); removed once this save is committed. Only a cleanup: a bucket
    # policy that lets this save write but not list beside the prefix does not stop it.
    leftovers: list[str] = []
    if now:
        with contextlib.suppress(StoragePermissionError):
            leftovers = storage.list_siblings(staging_start(storage))
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


def staging_start(storage: ObjectStorage) -> str:
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
    stage = storage.sibling(f"{staging_start(storage)}{os.getpid()}-{secrets.token_hex(4)}")
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
