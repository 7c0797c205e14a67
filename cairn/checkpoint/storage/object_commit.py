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
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import NoReturn

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
from cairn.checkpoint.storage.object_cleanup import delete_stage, delete_stale, discard, has_manifest
from cairn.checkpoint.storage.object_prefix import ObjectPrefix
from cairn.checkpoint.storage.object_stage import (
    committed_stage,
    holds_manifest,
    manifest_at,
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

__all__ = ["CHECKPOINT_ENTRIES", "check_prefix", "object_writing"]

#: The top-level names a cairn checkpoint may hold (files, and directories with a "/").
CHECKPOINT_ENTRIES = frozenset({
    MANIFEST_FILE, ALGORITHM_STATE_FILE, ALGORITHM_ARRAYS_FILE, POLICY_STATE_FILE,
    POLICY_ARRAYS_FILE, f"{POLICIES_DIR}/", f"{COMPONENTS_DIR}/", "model/",
})


def check_prefix(storage: ObjectPrefix, names: list[str]) -> None:
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
def object_writing(storage: ObjectPrefix, target: Callable[[Path], WriteTarget]) -> Iterator[WriteTarget]:
    """The write target of a save to ``storage`` (``target(local directory)``, made by the
    storage, which knows itself as a Storage), committed on normal exit (module docstring)."""
    directory = Path(tempfile.mkdtemp(prefix="cairn-upload-"))
    try:
        writing = target(directory)
        with staging():  # staged files are uploaded at once: no fsync
            yield writing
        _commit(writing, storage)
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def _commit(target: WriteTarget, storage: ObjectPrefix) -> None:
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
        try:
            roll_forward(storage, pending)
        except CheckpointStorageError as exc:
            raise type(exc)(
                f"Cannot save the checkpoint to {storage.url}: completing an earlier save's "
                f"replacement of it first failed ({exc}). This save changed nothing: the "
                f"earlier save's checkpoint is whole at {pending.url}, and loads of {storage.url} "
                "read it from there. Fix the cause and save again."
            ) from None
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
    if MANIFEST_FILE in now and storage.has_parent:
        _replace(target, storage, written, copies)
    else:
        _write_in_place(target, storage, now, written, copies)
        delete_stale(storage, keep={*staged, *(relative for _, _, relative in copies)}, listed=now)
    for name in leftovers:
        delete_stage(storage, storage.sibling(name), rolled_forward=False)


def _write_in_place(target: WriteTarget, storage: ObjectPrefix, now: list[str], written: list[str],
                    copies: list[tuple[ObjectPrefix, str, str]]) -> None:
    """Write the staged checkpoint under ``storage``'s prefix itself, the manifest last: a
    prefix holding no committed checkpoint (``now`` lists its objects: none, or an interrupted
    save's), or a bucket's root, which has no prefix beside it to stage in, and whose old
    checkpoint is uncommitted first (:func:`_uncommit`).

    A failed request may have been executed with only its answer lost, so where a failure
    leaves the outcome open the store is read back: a manifest that got there is a committed
    save, and returns; otherwise the error says that nothing is committed and what is left.
    """
    replacing = MANIFEST_FILE in now
    if replacing:
        _uncommit(storage)
    manifest = (target.directory / MANIFEST_FILE).read_bytes()
    try:
        storage.put_files([(target.directory / name, name) for name in written])
        storage.copy_files(copies)
        storage.put_files([(target.directory / MANIFEST_FILE, MANIFEST_FILE)])  # the commit point
    except CheckpointStorageError as exc:
        try:
            found = manifest_at(storage)
        except CheckpointStorageError as unread:
            raise type(exc)(
                f"Cannot save the checkpoint to {storage.url}: uploading it failed ({exc}), and "
                f"reading back whether its manifest got there failed too ({unread}). "
                f"{storage.url} holds either the new checkpoint, committed, or no committed "
                f"checkpoint{_PREVIOUS_REMOVED if replacing else ''} (refused: "
                "UncommittedCheckpointError): cairn.get_checkpoint_info(url) tells which once the "
                "store answers. Save again to be sure."
            ) from None
        if found == manifest:
            return  # the manifest's PUT was executed, only its answer was lost: committed
        held = ("no manifest, so loads refuse it (UncommittedCheckpointError) until a save there "
                "succeeds" if found is None else
                "another save's manifest: another process saved there meanwhile (one writer per "
                "prefix, docs/storage.md), and its checkpoint may miss files this save replaced")
        raise type(exc)(
            f"Cannot save the checkpoint to {storage.url}: uploading it failed ({exc}). It is not "
            f"committed: {storage.url} holds the files uploaded before the failure and {held}."
            f"{_PREVIOUS_REMOVED if replacing else ''} Fix the cause and save again; the next save "
            "there deletes those files."
        ) from None


#: Said of a bucket's root whose checkpoint was uncommitted before a save over it failed.
_PREVIOUS_REMOVED = (
    " The previous checkpoint there was removed before the upload (a bucket's root has no prefix "
    "beside it to stage the new checkpoint in, and an object store has no rename, so the new "
    "files are written over the old ones under the same names)."
)


def _uncommit(storage: ObjectPrefix) -> None:
    """Delete the manifest of the checkpoint at a bucket's root, before any of its files is
    overwritten. A DELETE that fails is read back: if the manifest is still there nothing was
    changed, and the error says that the previous checkpoint is intact; if it is gone (the
    DELETE was executed, its answer lost), the save goes on."""
    try:
        storage.delete(MANIFEST_FILE)
    except CheckpointStorageError as exc:
        try:
            gone = not storage.exists(MANIFEST_FILE)
        except CheckpointStorageError as unread:
            raise type(exc)(
                f"Cannot save the checkpoint to {storage.url}: deleting the previous checkpoint's "
                f"manifest (the first step of a save over a checkpoint at a bucket's root) failed "
                f"({exc}), and looking it up failed too ({unread}). No other object was changed: "
                f"{storage.url} holds the previous checkpoint, whole, if its manifest is still "
                "there, else no committed checkpoint (refused: UncommittedCheckpointError); "
                "cairn.get_checkpoint_info(url) tells which once the store answers. Save again."
            ) from None
        if not gone:
            raise type(exc)(
                f"Cannot save the checkpoint to {storage.url}: deleting the previous checkpoint's "
                f"manifest (the first step of a save over a checkpoint at a bucket's root) failed "
                f"({exc}). Nothing was changed: the previous checkpoint at {storage.url} is intact "
                "and loads. Fix the cause and save again."
            ) from None


def _replace(target: WriteTarget, storage: ObjectPrefix, written: list[str],
             copies: list[tuple[ObjectPrefix, str, str]]) -> None:
    """Replace the committed checkpoint at ``storage`` with the staged one.

    1. The new checkpoint is written whole to a stage, ``.<name>.cairn-tmp-<pid>-<hex>/``
       beside the prefix, its manifest last: the long, failure-prone step touches nothing of
       the old checkpoint, which readers load meanwhile. A failure here deletes the stage
       (:func:`_abandon`): the old checkpoint is whole. (A failure of the manifest's PUT is
       read back: one executed with its answer lost committed the stage, which goes on.)
    2. From the stage's manifest on, loads read the stage: the new checkpoint, whole. It is
       rolled forward (:func:`~.object_stage.roll_forward`): copied over the old files
       server-side (no byte passes through this process), the prefix's manifest last, then the
       stage is deleted, its manifest first. A failure here leaves the stage committed, for
       the next save or manager start to complete.
    """
    stage = new_stage(storage)
    manifest = (target.directory / MANIFEST_FILE).read_bytes()
    try:
        stage.put_files([(target.directory / name, name) for name in written])
        stage.copy_files(copies)
        stage.put_files([(target.directory / MANIFEST_FILE, MANIFEST_FILE)])  # the stage is whole
    except CheckpointStorageError as exc:
        whole = False
        with contextlib.suppress(CheckpointStorageError):  # unread: as if not there (discarded)
            whole = holds_manifest(stage, manifest)  # the PUT was executed, its answer lost
        if not whole:
            _abandon(storage, stage, exc)
    try:
        roll_forward(storage, stage)
    except CheckpointStorageError as exc:
        raise type(exc)(
            f"Cannot save the checkpoint to {storage.url}: copying it over the previous one "
            f"failed ({exc}). Nothing is lost: the new checkpoint is whole at {stage.url}, and "
            f"loads of {storage.url} read it from there; the next save to {storage.url}, or a "
            "CheckpointManager started on its root, completes the replacement."
        ) from None


def _abandon(storage: ObjectPrefix, stage: ObjectPrefix, exc: CheckpointStorageError) -> NoReturn:
    """Delete ``stage``, whose upload failed with ``exc``, and raise saying what ``storage``
    holds: the previous checkpoint, intact; where the stage cannot be deleted, what it was
    read back to hold."""
    fix = (f" A save over a checkpoint needs write access beside it ({stage.url})."
           if isinstance(exc, StoragePermissionError) else "")
    try:
        discard(stage)
    except CheckpointError as cleanup:
        committed = has_manifest(stage)
        held = {
            True: (f"Its manifest got there, so the new checkpoint is whole at {stage.url}, and "
                   f"loads of {storage.url} read it from there; the next save to {storage.url}, "
                   "or a CheckpointManager started on its root, completes the replacement."),
            False: (f"It has no manifest: the previous checkpoint at {storage.url} is intact and "
                    f"loads, and the next save to {storage.url} deletes that upload."),
            None: (f"Looking it up failed too: if {stage.url}/{MANIFEST_FILE} exists, the new "
                   f"checkpoint is whole there and loads of {storage.url} read it; else the "
                   f"previous checkpoint is intact. The next save to {storage.url} completes or "
                   "deletes it."),
        }[committed]
        raise type(exc)(
            f"Cannot save the checkpoint to {storage.url}: uploading it beside the previous "
            f"one, to {stage.url}, failed ({exc}), and deleting that upload failed too "
            f"({cleanup}). {held}{fix}"
        ) from None
    raise type(exc)(
        f"Cannot save the checkpoint to {storage.url}: uploading its files failed "
        f"({exc}). The previous checkpoint at {storage.url} is intact: nothing there was "
        f"changed (the new files were being uploaded beside it, to {stage.url}).{fix} "
        "Fix the cause and save again."
    ) from None
