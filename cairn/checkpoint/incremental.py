"""Incremental saves: a policy's file that a save would write as the same bytes as a file of an
earlier checkpoint is not written again but taken from there (a hard link locally, a server-side
copy on an object store).

The proof is by content and only by content. Each policy's state is serialised as a full save
writes it (without writing: :func:`~cairn.checkpoint.writer_files.state_file_entries`), hashed
with the manifests' hash (xxh3-128 of the file's bytes), and compared with the size and hash the
earlier checkpoint's policy manifest lists for that file, a manifest itself verified against
the earlier root manifest. Nothing else decides that a file is reused: no version counter,
object id or storage address, and no memory of what this process wrote. So a change torch does
not see (``param.data.copy_(...)``, a write through a numpy view) is seen, and a resumed run in
a new process links what the run that wrote the earlier checkpoint would have.

For each policy (:func:`plan_reuse`):

* both state files hash as in the earlier checkpoint (a frozen opponent no agent played) and
  its native model files are the ones this save would write: every file of the policy, its
  manifest included, is taken;
* only ``policy_state.safetensors`` does (a frozen opponent that acted: its generator and
  timestep moved, its weights, optimizer and filter did not): that file is taken, the JSON file
  and the manifest are written;
* otherwise the policy is written.

That proves the live state would be written as the bytes the earlier manifest lists; the file
taken must hold them too. So a file is taken only when the bytes taken (the linked inode
locally, the object read where a load reads it on an object store) hash to the listed hash
(:meth:`~cairn.checkpoint.storage.WriteTarget.reuse_dirs`,
:mod:`cairn.checkpoint.storage.reuse_check`): a file damaged on disk (one flipped bit, a
truncation, other bytes of the same size) is never carried forward. Its policy is written anew
from the live state, so the save is whole, and a warning names the file and the fix
(:func:`link_policies`). After taking the files the earlier root manifest must still be the
bytes read at the start (:meth:`PreviousCheckpoint.confirm`): a checkpoint replaced meanwhile
fails the save with nothing saved. Each checkpoint still stands alone: a hard link is a second name of the
file (deleting the earlier checkpoint leaves it), and a server-side copy is a new object.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from cairn.checkpoint.format import (
    FORMAT_VERSION,
    MANIFEST_FILE,
    POLICIES_DIR,
    POLICY_ARRAYS_FILE,
    POLICY_STATE_FILE,
)
from cairn.checkpoint.manifest import parse_manifest, read_manifest_bytes, read_verified
from cairn.checkpoint.storage import Storage, WriteTarget, located, resolve_storage
from cairn.checkpoint.writer_files import state_file_entries
from cairn.errors import CheckpointError

__all__ = ["PreviousCheckpoint", "PreviousPolicy", "Reuse", "link_policies", "plan_reuse"]


@dataclass
class PreviousPolicy:
    """One policy of an earlier Algorithm checkpoint, its manifest verified."""

    entry: dict[str, Any]  #: the root manifest's entry for the policy's manifest
    manifest: dict[str, Any]  #: the policy's manifest


@dataclass
class PreviousCheckpoint:
    """An earlier Algorithm checkpoint a save may take files from: its root manifest's bytes
    and the verified manifests of its policies."""

    storage: Storage
    manifest_bytes: bytes  #: the root manifest as read when the save began
    policies: dict[str, PreviousPolicy] = field(default_factory=dict)

    @classmethod
    def open(cls, previous: str | os.PathLike[str] | Storage | None, target: Storage, *,
             storage_options: Mapping[str, Any] | None,
             read: Iterable[str] = ()) -> PreviousCheckpoint | None:
        """``previous`` with the manifests of the policies in ``read``, or None when there is no
        ``previous``, when it lies on another store than ``target``, or when it is ``target``
        itself on an object store (a prefix is uncommitted while it is rewritten). An earlier
        checkpoint that cannot be read is warned about and ignored: the save writes every file."""
        if previous is None:
            return None
        source = resolve_storage(previous, storage_options=storage_options)
        if not target.can_reuse_from(source):
            return None
        try:
            with located(source) as where, where.open_reader() as root:
                data = bytes(read_manifest_bytes(root))
                manifest = parse_manifest(data, root.path, expected_type="Algorithm")
                entries = {pid: dict(manifest["files"][_manifest_name(pid)])
                           for pid in manifest["policy_ids"]}
                wanted = [pid for pid in read if pid in entries]
                root.prefetch([(_manifest_name(pid), entries[pid]["size"]) for pid in wanted], limit=1 << 24)
                policies = {}
                for pid in wanted:
                    policy_manifest = read_verified(root, _manifest_name(pid), manifest)
                    policies[pid] = PreviousPolicy(entries[pid], parse_manifest(
                        policy_manifest, root.path / f"{POLICIES_DIR}/{pid}", expected_type="Policy"))
                return cls(source, data, policies)
        except CheckpointError as exc:
            warnings.warn(f"Incremental save: the previous checkpoint {source.url} cannot be read, so "
                          f"every file is written anew ({exc}).", stacklevel=4)
            return None

    def confirm(self) -> None:
        """Refuse (``CheckpointError``) when the earlier checkpoint's root manifest is no longer
        the one read when the save began: it was replaced while its files were being taken,
        so a file taken may belong to the replacement."""
        try:
            with located(self.storage) as where, where.open_reader() as root:
                same = bytes(read_manifest_bytes(root)) == self.manifest_bytes
        except CheckpointError:
            same = False
        if not same:
            raise CheckpointError(
                f"Incremental save: the previous checkpoint {self.storage.url} was replaced or "
                "removed during this save, so the files taken from it are not proven to be the ones "
                "its manifest listed. Nothing was saved; save again, or without previous=...")


@dataclass(frozen=True)
class Reuse:
    """What a save takes from the earlier checkpoint for one policy, proven equal by content."""

    previous: PreviousPolicy
    whole: bool  #: every file (the manifest included), else ``policy_state.safetensors`` alone

    @property
    def files(self) -> dict[str, dict[str, Any]]:
        """``{file name: {"size", "hash"}}`` of the files taken, as the earlier manifests list
        them (the policy's manifest as the root manifest does)."""
        files: dict[str, dict[str, Any]] = self.previous.manifest["files"]
        if not self.whole:
            return {POLICY_ARRAYS_FILE: files[POLICY_ARRAYS_FILE]}
        return {**files, MANIFEST_FILE: self.previous.entry}


def plan_reuse(state: Any, previous: PreviousPolicy | None, *, native: bool,
               reuses: Callable[[Mapping[str, Any]], bool] | None = None) -> Reuse | None:
    """What of ``previous`` (the same policy in the earlier checkpoint) a save of ``state`` may
    take: None when its arrays file would be other bytes. The whole policy only when its JSON
    file would be the same bytes too, native model files are wanted exactly when they were
    stored (they are made from that state), they are the ones this save would write
    (``reuses(record)`` of the earlier ``native_model`` record, where the native files' writer
    has one: a Keras policy's ``model.keras`` alone is not its full files), and its manifest is
    of this format version (a taken manifest must describe the files as this version writes
    them). With native model files wanted and not all taken, nothing is: they are written with
    the state."""
    if previous is None:
        return None
    files = previous.manifest["files"]
    entries = state_file_entries(state, POLICY_STATE_FILE, POLICY_ARRAYS_FILE)
    if files.get(POLICY_ARRAYS_FILE) != entries[POLICY_ARRAYS_FILE]:
        return None
    whole = (files.get(POLICY_STATE_FILE) == entries[POLICY_STATE_FILE]
             and _same_native(native, reuses, previous.manifest.get("native_model"))
             and previous.manifest.get("format_version") == FORMAT_VERSION)
    if native and not whole:
        return None
    return Reuse(previous, whole)


def _same_native(native: bool, reuses: Callable[[Mapping[str, Any]], bool] | None,
                 record: Any) -> bool:
    """Whether the earlier native model files (described by ``record``, None for none) are what
    this save would write: none for none, and ``reuses(record)`` where the writer says."""
    if not native or record is None:
        return not native and record is None
    return reuses is None or reuses(record)


def link_policies(target: WriteTarget, previous: PreviousCheckpoint,
                  reuse: Mapping[str, Reuse]) -> set[str]:
    """Take the files :func:`plan_reuse` allowed of several policies from ``previous`` in one
    pass (an incremental save takes a few files of each of hundreds of policies), each only if
    the bytes taken hash as listed; return the policies whose files were not taken: they must
    be written. A file found wrong is warned about (the earlier checkpoint is damaged, or was
    replaced: then this raises, as :meth:`PreviousCheckpoint.confirm`). Call
    :meth:`PreviousCheckpoint.confirm` before committing."""
    not_taken = target.reuse_dirs(previous.storage, {f"{POLICIES_DIR}/{pid}": plan.files
                                                     for pid, plan in reuse.items()})
    if not_taken:
        previous.confirm()  # a replacement's files are no damage: the save fails, and says why
    url = previous.storage.url.rstrip("/")
    for wrong in not_taken:
        warnings.warn(
            f"Incremental save: {url}/{wrong.directory}/{wrong.file} {wrong.problem}, so the previous "
            f"checkpoint {url} is damaged. Nothing of it was reused for policy "
            f"{wrong.directory.rpartition('/')[2]!r}: the policy was written anew from its live state, "
            f"and this checkpoint is whole. Run `cairn checkpoint verify {url}` to see what else is "
            "damaged there, and restore it from a good copy or delete it.", stacklevel=4)
    return {wrong.directory.rpartition("/")[2] for wrong in not_taken}


def _manifest_name(pid: str) -> str:
    return f"{POLICIES_DIR}/{pid}/{MANIFEST_FILE}"
