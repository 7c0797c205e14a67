"""The stage of a replacement on an object store: the new checkpoint, whole, beside the old one.

Object stores have no rename. Replacing the checkpoint at ``s3://b/runs/ckpt`` first writes the
new checkpoint whole, its manifest last, to a *stage* beside it,
``s3://b/runs/.ckpt.cairn-tmp-<pid>-<hex>/`` (:mod:`cairn.checkpoint.storage.object_commit`),
then copies it over the old one server-side (:func:`roll_forward`). A stage holding its manifest
is *committed*: it is the checkpoint its prefix is becoming. From the moment it is committed
until the prefix holds the same manifest, the prefix's own objects may be a mix of the old
checkpoint and the new one, so (DESIGN.md principle 12, "never neither"; docs/storage.md):

* a load reads a committed stage in place of its prefix (:func:`reading_location`), and writes
  nothing: a reader that copied would race the writer, and may hold read-only credentials;
* a committed stage is deleted only once its content is committed at the prefix, manifest
  first (:func:`~.object_cleanup.discard`): before that it is rolled forward, by the save that
  wrote it, else by the next save to the prefix or the next :class:`~cairn.CheckpointManager`
  started on its root;
* a stage without a manifest is an upload that was killed or failed: the prefix still holds the
  old checkpoint whole, and the stage is deleted.

One writer per prefix (docs/storage.md): two processes replacing one checkpoint at once can
leave two committed stages, which no load guesses between (a ``CheckpointStorageError``).
"""

from __future__ import annotations

import os
import secrets

from cairn.checkpoint.atomic import TMP_MARKER
from cairn.checkpoint.format import MANIFEST_FILE, MAX_MANIFEST_BYTES, POLICIES_DIR
from cairn.checkpoint.storage.object_cleanup import delete_stage, delete_stale
from cairn.checkpoint.storage.object_prefix import ObjectPrefix
from cairn.errors import (
    CheckpointNotFoundError,
    CheckpointStorageError,
    StoragePermissionError,
)

__all__ = ["committed_stage", "holds_manifest", "manifest_at", "new_stage",
           "reading_location", "roll_forward", "stage_start", "staged_name"]


def stage_start(storage: ObjectPrefix) -> str:
    """How the stages of ``storage`` begin: ``.<name>.cairn-tmp-``, as a local save's temporary
    directory (docs/checkpoint-format.md, section 12)."""
    return f".{storage.name}{TMP_MARKER}"


def staged_name(entry: str) -> str | None:
    """The checkpoint name whose stage ``entry`` is (``ckpt`` of ``.ckpt.cairn-tmp-1-ab``), or
    None when ``entry`` is no stage's name."""
    if not entry.startswith(".") or TMP_MARKER not in entry:
        return None
    return entry[1:entry.index(TMP_MARKER)] or None


def new_stage(storage: ObjectPrefix) -> ObjectPrefix:
    """A fresh stage beside ``storage`` (which :attr:`~ObjectStorage.has_parent`)."""
    return storage.sibling(f"{stage_start(storage)}{os.getpid()}-{secrets.token_hex(4)}")


def committed_stage(storage: ObjectPrefix) -> ObjectPrefix | None:
    """The committed stage of ``storage``, or None (also for a prefix with nothing beside it).

    Raises:
        CheckpointStorageError: more than one is committed (two writers replaced the
            checkpoint at once); which one is newer cannot be told, so none is guessed.
    """
    if not storage.has_parent:
        return None
    stages = [storage.sibling(name) for name in storage.list_siblings(stage_start(storage))]
    committed = [stage for stage in stages if stage.exists(MANIFEST_FILE)]
    if len(committed) > 1:
        raise CheckpointStorageError(
            f"{storage.url} is being replaced by {len(committed)} complete checkpoints at once "
            f"({', '.join(stage.url for stage in committed)}): two processes saved there "
            "concurrently, and which one is newer cannot be told. Load one of them by its URL, "
            f"delete the other, and save to {storage.url} from one process at a time."
        )
    return committed[0] if committed else None


def reading_location(storage: ObjectPrefix) -> ObjectPrefix:
    """Where a load of ``storage`` reads: the committed stage of ``storage``, or of the
    checkpoint ``storage`` is a policy of (``<ckpt>/policies/<id>``), else ``storage`` itself.

    Without permission to list beside the prefix no stage can be seen, by anyone with those
    credentials: the prefix is read.
    """
    try:
        stage = committed_stage(storage)
        if stage is not None:
            return stage
        parent = storage.parent()
        if parent is not None and parent.name == POLICIES_DIR:
            owner = parent.parent()
            stage = committed_stage(owner) if owner is not None else None
            if stage is not None:
                return stage.child(f"{POLICIES_DIR}/{storage.name}")
    except StoragePermissionError:
        pass
    return storage


def roll_forward(storage: ObjectPrefix, stage: ObjectPrefix) -> None:
    """Make the checkpoint at ``storage`` the one committed at ``stage``, then delete ``stage``.

    Every file of the stage is copied over the prefix server-side, then its manifest: the
    commit point (a prefix whose manifest already equals the stage's got every file before it,
    so only the clean-up is left). The prefix's objects that the new checkpoint lacks go next,
    the stage last. Every step may be repeated: a roll forward that fails or is killed is
    completed by the next one, and the stage stays committed until the prefix is; two at once
    (a writer's, and a manager's starting on the root) both end with the prefix committed. Once the
    prefix is committed, a failure of the clean-up is a
    :class:`~cairn.errors.StorageCleanupWarning`, not an error (:mod:`~.object_cleanup`).
    """
    files = stage.list_files()
    if MANIFEST_FILE not in files:
        return  # uncommitted meanwhile: its content is committed at the prefix already
    try:
        manifest = stage.read_bytes(MANIFEST_FILE, limit=MAX_MANIFEST_BYTES)
    except CheckpointNotFoundError:
        return  # another roll forward deleted the stage, which it does once the prefix is committed
    if not holds_manifest(storage, manifest):
        try:
            storage.copy_files([(stage, name, name) for name in files if name != MANIFEST_FILE])
            storage.write_bytes(MANIFEST_FILE, manifest)  # the commit point
        except (CheckpointStorageError, CheckpointNotFoundError):
            # a PUT whose answer was lost may have been executed, or another roll forward of
            # the stage (a CheckpointManager starting on the root) got there first and deleted
            # the stage's files under this one's copies: read back what the prefix holds
            if not holds_manifest(storage, manifest):
                raise
    # Committed: what is left is a clean-up, which the next roll forward repeats if it fails
    # (a stage still committed holds what the prefix holds; a stale object is in no manifest):
    # a failure is a warning (object_cleanup).
    delete_stale(storage, keep=set(files))
    delete_stage(storage, stage, rolled_forward=True)


def manifest_at(storage: ObjectPrefix) -> bytes | None:
    """The manifest committed at ``storage`` (None: none), read from the store, not a cache."""
    try:
        return storage.read_bytes(MANIFEST_FILE, limit=MAX_MANIFEST_BYTES)
    except CheckpointNotFoundError:
        return None


def holds_manifest(storage: ObjectPrefix, manifest: bytes) -> bool:
    """Whether the manifest committed at ``storage`` is ``manifest`` (byte for byte: a manifest
    names its creation time, so it is one save's)."""
    return manifest_at(storage) == manifest
