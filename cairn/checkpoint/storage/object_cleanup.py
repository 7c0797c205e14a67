"""The clean-up after a save to an object store committed: a failure there is a warning.

Once a checkpoint's manifest is committed (:mod:`~cairn.checkpoint.storage.object_commit`), the
save has succeeded: what is left is deleting what the new checkpoint does not use (objects of
the old checkpoint or of an interrupted save under the prefix, the stage of a replacement, the
upload of an earlier save killed beside it). None of it is read by a load (no manifest lists
it, or a stage still committed holds the same checkpoint as its prefix), and the next save to
the prefix, or the next :class:`~cairn.CheckpointManager` started on its root, deletes it. So a
failure here never reports the committed save as failed: it is a
:class:`~cairn.errors.StorageCleanupWarning` naming what was left, read back from the store
where it can be (docs/storage.md, "Replacing a checkpoint").
"""

from __future__ import annotations

import contextlib
import warnings

from cairn.checkpoint.atomic import first_names
from cairn.checkpoint.format import MANIFEST_FILE
from cairn.checkpoint.storage.object_prefix import ObjectPrefix
from cairn.errors import CheckpointError, StorageCleanupWarning

__all__ = ["delete_stale", "delete_stage", "discard", "has_manifest"]


def _warn(storage: ObjectPrefix, what: str, error: CheckpointError, why: str, *, stage: bool) -> None:
    who = (f"The next save to {storage.url}, or a CheckpointManager started on its root, deletes it."
           if stage else f"The next save to {storage.url} (or deleting that checkpoint) deletes them.")
    warnings.warn(StorageCleanupWarning(
        f"The checkpoint at {storage.url} is saved and loads, but deleting {what} failed "
        f"({error}). {why} {who}"
    ), stacklevel=3)


def delete_stale(storage: ObjectPrefix, *, keep: set[str], listed: list[str] | None = None) -> None:
    """Delete the objects under the committed checkpoint at ``storage`` that are not in
    ``keep`` (its files): of ``listed`` (names relative to it), or of a listing made now. A
    failure is a warning naming those still there."""
    try:
        names = storage.list_files() if listed is None else listed
    except CheckpointError as exc:  # nothing was deleted
        _warn(storage, "the objects there that it no longer uses (if any)", exc,
              "They are harmless: the checkpoint's manifest lists none of them, so its loads "
              "never read them.", stage=False)
        return
    stale = sorted(set(names) - keep)
    try:
        storage.delete_files(stale)
    except CheckpointError as exc:
        left, unsure = stale, " (some may be gone: listing the prefix failed too)"
        with contextlib.suppress(CheckpointError):
            left, unsure = sorted(set(storage.list_files()) & set(stale)), ""
        if not left:
            return
        # a policy's manifest left (of a policy the new checkpoint lacks) still loads on its own
        alone = sorted(name.rsplit("/", 1)[0] for name in left if name.endswith(f"/{MANIFEST_FILE}"))
        why = ("They are harmless: the checkpoint's manifest lists none of them, so its loads "
               "never read them." + (
                   f" Until they are deleted, {first_names(alone)} under {storage.url} still load "
                   "on their own (their manifests are among them), as what they were before "
                   "this save, though the checkpoint does not include them." if alone else ""))
        _warn(storage, f"{len(left)} object(s) there that it no longer uses{unsure}, "
              f"{first_names(left)},", exc, why, stage=False)


def has_manifest(stage: ObjectPrefix) -> bool | None:
    """Whether ``stage`` holds a manifest, read back after a failure left it open; None when
    looking it up fails too (the message must then cover both answers)."""
    with contextlib.suppress(CheckpointError):
        return stage.exists(MANIFEST_FILE)
    return None


def delete_stage(storage: ObjectPrefix, stage: ObjectPrefix, *, rolled_forward: bool) -> None:
    """Delete ``stage``, beside the committed checkpoint at ``storage``: its manifest first when
    ``rolled_forward`` (the stage of this checkpoint's replacement, whose content is committed at
    ``storage``), else a stage without a manifest (an earlier save's, killed before it committed),
    which is never deleted once it has one. A failure is a warning saying what is left."""
    try:
        if not rolled_forward and stage.exists(MANIFEST_FILE):
            return  # a committed stage is never deleted unseen (object_stage)
        discard(stage)
    except CheckpointError as exc:
        committed = has_manifest(stage)
        state = {
            True: ("It is harmless: it is still committed and holds the same checkpoint as "
                   f"{storage.url}, which loads read from it until it is deleted."),
            False: "It is harmless: it has no manifest, so loads never read it.",
            None: ("It is harmless: it holds the same checkpoint as the prefix, or no manifest "
                   "(looking it up failed too), so loads read the same checkpoint either way."
                   if rolled_forward else "It is harmless: it had no manifest, so loads never read it."),
        }[committed]
        what = ("the stage it was copied from" if rolled_forward
                else "the upload of an earlier, interrupted save beside it")
        _warn(storage, f"{what}, {stage.url},", exc, state, stage=True)


def discard(stage: ObjectPrefix) -> None:
    """Delete ``stage``: its manifest first, so that it is whole or uncommitted at every instant."""
    stage.delete(MANIFEST_FILE)
    stage.delete_prefix()
