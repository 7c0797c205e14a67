"""Saving to an object store: stage locally, upload, and commit with the manifest, written last.

Object stores have no rename. :func:`object_writing` yields a
:class:`~cairn.checkpoint.storage.base.WriteTarget` whose directory is a local staging area
(written without fsync: it is uploaded at once). At the end every file is uploaded under the
final prefix in parallel (a reused file is a server-side copy), and the manifest **last**: it is
the commit point. Replacing a committed checkpoint writes the new one whole, manifest last, to
a stage beside it first, so that a failed or killed upload leaves the old checkpoint whole;
from the stage's manifest on, loads read the stage, and the stage is rolled forward: copied
over the old files server-side, the prefix's manifest last, then deleted
(:func:`_replace`, :mod:`~cairn.checkpoint.storage.object_stage`, docs/storage.md). The old
checkpoint or the new one is whole at every instant.

A prefix holding objects that are not a cairn checkpoint's is never written into
(``CheckpointFormatError``, :func:`check_prefix`), as locally.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from cairn.checkpoint.atomic import first_names
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
from cairn.checkpoint.storage.object_stage import (
    committed_stage,
    discard,
    new_stage,
    reading_location,
    roll_forward,
    stage_start,
)
from cairn.checkpoint.writer_files import staging
from cairn.errors import (
    CheckpointError,
    CheckpointFormatError,
    CheckpointStorageError,
    StoragePermissionError,
)

if TYPE_CHECKING:
    from cairn.checkpoint.storage.objects import ObjectStorage

__all__ = ["CHECKPOINT_ENTRIES", "check_prefix", "object_writing"]

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

    A committed stage of an earlier replacement here (:mod:`~.object_stage`) is rolled forward
    first: it holds the newest checkpoint. Over a committed checkpoint the new one is written
    whole to a stage beside it (:func:`_replace`), so that the old checkpoint or the new one is
    whole at every instant."""
    staged = sorted(path.relative_to(target.directory).as_posix()
                    for path in target.directory.rglob("*") if path.is_file())
    if MANIFEST_FILE not in staged:
        raise CheckpointFormatError(f"Internal error: the checkpoint for {storage.url} has no manifest.")
    now = storage.list_files()
    check_prefix(storage, now)
    try:
        pending = committed_stage(storage)
    except StoragePermissionError:
        if MANIFEST_FILE in now:  # a replacement stages beside the prefix: it must see there
            raise
        pending = None  # a first save: where nothing can be listed, no stage can be seen
    if pending is not None:
        roll_forward(storage, pending)
        now = storage.list_files()
    # Stages of earlier saves here that were killed before they were committed (one writer per
    # prefix, so none is in progress); removed once this save is committed. Only a cleanup: a
    # bucket policy that lets this save write but not list beside the prefix does not stop it.
    leftovers: list[str] = []
    if now:
        with contextlib.suppress(StoragePermissionError):
            leftovers = storage.list_siblings(stage_start(storage))
    written = [name for name in staged if name != MANIFEST_FILE]
    # A reused file is copied from where a load of its checkpoint reads (that checkpoint's
    # committed stage, if it has one): where the incremental save verified it.
    sources = {id(source): reading_location(source) for source, _, _ in target.copies}
    copies = [(sources[id(source)], name, relative) for source, name, relative in target.copies]
    manifest = [(target.directory / MANIFEST_FILE, MANIFEST_FILE)]
    if MANIFEST_FILE in now and storage.has_parent:
        _replace(target, storage, written, copies)
    else:
        with _committing(storage, replacing=MANIFEST_FILE in now):
            if MANIFEST_FILE in now:  # a bucket's root: nowhere beside it to upload to
                storage.delete(MANIFEST_FILE)  # uncommit the old checkpoint before any file changes
            storage.put_files([(target.directory / name, name) for name in written])
            storage.copy_files(copies)
            storage.put_files(manifest)  # the commit point
        keep = {*staged, *(relative for _, _, relative in copies)}
        storage.delete_files(sorted(set(now) - keep))
    for name in leftovers:
        leftover = storage.sibling(name)
        if not leftover.exists(MANIFEST_FILE):  # a committed stage is never deleted unseen
            leftover.delete_prefix()


def _replace(target: WriteTarget, storage: ObjectStorage, written: list[str],
             copies: list[tuple[ObjectStorage, str, str]]) -> None:
    """Replace the committed checkpoint at ``storage`` with the staged one.

    1. The new checkpoint is written whole to a stage, ``.<name>.cairn-tmp-<pid>-<hex>/``
       beside the prefix, its manifest last: the long, failure-prone step touches nothing of
       the old checkpoint, which readers load meanwhile. A failure here deletes the stage
       (uncommitted, or committed but never to be rolled forward): the old checkpoint is whole.
    2. From the stage's manifest on, loads read the stage: the new checkpoint, whole. It is
       rolled forward (:func:`~.object_stage.roll_forward`): copied over the old files
       server-side (no byte passes through this process), the prefix's manifest last, then the
       stage is deleted, its manifest first. A failure here leaves the stage committed, for
       the next save or manager start to complete.
    """
    stage = new_stage(storage)
    try:
        stage.put_files([(target.directory / name, name) for name in written])
        stage.copy_files(copies)
        stage.put_files([(target.directory / MANIFEST_FILE, MANIFEST_FILE)])  # the stage is whole
    except CheckpointStorageError as exc:
        fix = (f" A save over a checkpoint needs write access beside it ({stage.url})."
               if isinstance(exc, StoragePermissionError) else "")
        try:
            discard(stage)
        except CheckpointError as cleanup:
            raise type(exc)(
                f"Cannot save the checkpoint to {storage.url}: uploading it beside the previous "
                f"one, to {stage.url}, failed ({exc}), and deleting that upload failed too "
                f"({cleanup}). If {stage.url}/{MANIFEST_FILE} exists, the new checkpoint is whole "
                f"there and loads of {storage.url} read it; else the previous checkpoint is. The "
                f"next save to {storage.url} completes or removes it.{fix}"
            ) from None
        raise type(exc)(
            f"Cannot save the checkpoint to {storage.url}: uploading its files failed "
            f"({exc}). The previous checkpoint at {storage.url} is intact: nothing there was "
            f"changed (the new files were being uploaded beside it, to {stage.url}).{fix} "
            "Fix the cause and save again."
        ) from None
    try:
        roll_forward(storage, stage)
    except CheckpointStorageError as exc:
        raise type(exc)(
            f"Cannot save the checkpoint to {storage.url}: copying it over the previous one "
            f"failed ({exc}). Nothing is lost: the new checkpoint is whole at {stage.url}, and "
            f"loads of {storage.url} read it from there; the next save to {storage.url}, or a "
            "CheckpointManager started on its root, completes the replacement."
        ) from None


@contextlib.contextmanager
def _committing(storage: ObjectStorage, *, replacing: bool) -> Iterator[None]:
    """Say in a failure of the step that uncommits an old checkpoint at a bucket's root that it
    is gone."""
    try:
        yield
    except CheckpointStorageError as exc:
        if not replacing:
            raise
        raise type(exc)(
            f"Cannot save the checkpoint to {storage.url}: committing it failed ({exc}). The "
            f"previous checkpoint at {storage.url} was removed before the failure (a bucket's "
            "root has no prefix beside it to stage the new checkpoint in, and an object store "
            "has no rename, so the new files are written over the old ones under the same "
            "names), and the new one is not committed: the location is refused "
            "(UncommittedCheckpointError) until a save there succeeds. Save again."
        ) from None
