"""Incremental saves: a policy's files that would be the same bytes as in an earlier checkpoint
are not written again, but taken from there (a hard link locally, a server-side copy on an
object store), file by file.

Two proofs that a file is the same:

* **The manifests' hashes.** A policy given as a state tree is hashed as the writer would write
  it (without writing) and compared with the earlier policy manifest's entries, which were
  verified against that checkpoint's root manifest. When both state files match, all of the
  policy's files, its manifest included, are reused (:func:`reuse_policy`).
* **The caller's word, checked against the root manifest.** The layer above keeps a change
  marker per policy (:mod:`cairn.policy.change_marker`) and knows which checkpoint it wrote each
  policy's files into. For a policy that did not change since it hands the writer a
  :class:`LinkedPolicy` (every file taken as it is) instead of a state; for one whose arrays did
  not change, a :class:`LinkedArrays` (the state, whose JSON file and manifest are written while
  ``policy_state.safetensors`` is taken). Either carries the earlier root manifest's entry for
  the policy's manifest: the earlier checkpoint must still list exactly that file (the same
  size and hash: the same bytes, hence the same listed files), else the save fails.

Each checkpoint still stands alone: a hard link is a second name of the file (deleting the
earlier checkpoint leaves it), and a server-side copy is a new object.
"""

from __future__ import annotations

import os
import threading
import warnings
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from cairn.checkpoint.format import MANIFEST_FILE, POLICIES_DIR, POLICY_ARRAYS_FILE, POLICY_STATE_FILE
from cairn.checkpoint.manifest import parse_manifest, read_manifest_bytes, read_verified
from cairn.checkpoint.storage import Storage, WriteTarget, located, resolve_storage
from cairn.checkpoint.writer_files import Files, state_file_entries
from cairn.errors import CheckpointError

__all__ = ["LinkedArrays", "LinkedPolicy", "PreviousCheckpoint", "PreviousPolicy", "checkpoint_key",
           "link_policies", "policy_manifest_entries", "reuse_policy"]


@dataclass(frozen=True)
class LinkedPolicy:
    """Stands for a policy's state in :func:`~cairn.checkpoint.writer.write_algorithm_checkpoint`:
    take every file of the policy from ``previous`` as it is."""

    entry: Mapping[str, Any]  #: the earlier root manifest's entry for the policy's manifest
    files: Mapping[str, Mapping[str, Any]]  #: the policy manifest's ``files``


@dataclass(frozen=True)
class LinkedArrays:
    """Stands for a policy's state whose arrays file is the one in ``previous``: write ``tree``
    (the state's JSON tree, its arrays already replaced by references:
    :func:`~cairn.checkpoint.writer_files.split_state`) as the JSON file, and the manifest; take
    ``policy_state.safetensors`` (whose entry in the earlier policy manifest is ``arrays``)."""

    tree: Mapping[str, Any]
    entry: Mapping[str, Any]  #: the earlier root manifest's entry for the policy's manifest
    arrays: Mapping[str, Any]  #: ``{"size", "hash"}`` of the earlier ``policy_state.safetensors``


@dataclass
class PreviousPolicy:
    """One policy of an earlier Algorithm checkpoint, its manifest verified."""

    storage: Storage  #: the earlier checkpoint (its root)
    entry: dict[str, Any]  #: the root manifest's entry for the policy's manifest
    manifest: dict[str, Any]  #: the policy's manifest


@dataclass
class PreviousCheckpoint:
    """An earlier Algorithm checkpoint a save may take files from: its root manifest, and the
    verified manifests of the policies whose states must be hashed to be compared."""

    storage: Storage
    entries: dict[str, dict[str, Any]]  #: policy ID -> the root manifest's entry for its manifest
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
                manifest = _parsed_root_manifest(bytes(read_manifest_bytes(root)), root.path)
                entries = {pid: dict(manifest["files"][_manifest_name(pid)])
                           for pid in manifest["policy_ids"]}
                wanted = [pid for pid in read if pid in entries]
                root.prefetch([(_manifest_name(pid), entries[pid]["size"]) for pid in wanted], limit=1 << 24)
                policies = {}
                for pid in wanted:
                    data = read_verified(root, _manifest_name(pid), manifest)
                    policies[pid] = PreviousPolicy(source, entries[pid], parse_manifest(
                        data, root.path / f"{POLICIES_DIR}/{pid}", expected_type="Policy"))
                return cls(source, entries, policies)
        except CheckpointError as exc:
            warnings.warn(f"Incremental save: the previous checkpoint {source.url} cannot be read, so "
                          f"every file is written anew ({exc}).", stacklevel=4)
            return None

    def check_entry(self, pid: str, entry: Mapping[str, Any]) -> None:
        """Refuse (``CheckpointError``) to take policy ``pid``'s files unless this checkpoint
        still lists its manifest as ``entry``."""
        if self.entries.get(pid) != dict(entry):
            raise CheckpointError(
                f"Incremental save: the previous checkpoint {self.storage.url} no longer holds the "
                f"files of policy {pid!r} this save was to take from it (it was replaced or changed "
                "since). Nothing was saved; save again, or without previous=...")


def policy_manifest_entries(previous: str | os.PathLike[str] | Storage, target: Storage, *,
                            storage_options: Mapping[str, Any] | None) -> dict[str, dict[str, Any]]:
    """``{policy ID: the root manifest's entry for its manifest}`` of the Algorithm checkpoint
    ``previous`` (its root manifest alone is read), or ``{}`` when a save to ``target`` cannot
    take files from it (:meth:`PreviousCheckpoint.open`)."""
    found = PreviousCheckpoint.open(previous, target, storage_options=storage_options)
    return {} if found is None else found.entries


def checkpoint_key(location: str | os.PathLike[str] | Storage, *,
                   storage_options: Mapping[str, Any] | None = None) -> str:
    """One name per checkpoint location (a local path made absolute, or the URL), under which a
    caller may remember what it wrote there."""
    return resolve_storage(location, storage_options=storage_options).absolute().url


def link_policies(target: WriteTarget, previous: PreviousCheckpoint,
                  files: Mapping[str, Mapping[str, int]]) -> None:
    """Take files of several policies from ``previous``: ``files`` maps a policy ID to
    ``{file name: size}`` (``CheckpointError`` when one of them is no longer there with its size)."""
    failed = target.reuse_dirs(previous.storage, {f"{POLICIES_DIR}/{pid}": sizes
                                                  for pid, sizes in files.items()})
    if failed is not None:
        pid = failed.rpartition("/")[2]
        raise CheckpointError(
            f"Incremental save: a file of policy {pid!r} in the previous checkpoint "
            f"{previous.storage.url} changed or vanished during this save. Nothing was saved; "
            "save again, or without previous=...")


def reuse_policy(target: WriteTarget, pid: str, state: Any, previous: PreviousPolicy | None, *,
                 native: bool) -> tuple[dict[str, Any], Files] | None:
    """Take policy ``pid``'s files from ``previous`` when ``state`` would be written as the
    same bytes (and native model files are wanted there exactly when they were stored);
    return the root manifest's entry for its manifest and the policy manifest's files, or None
    when it must be written."""
    if previous is None or native != (previous.manifest.get("native_model") is not None):
        return None
    files = previous.manifest["files"]
    if state_file_entries(state, POLICY_STATE_FILE, POLICY_ARRAYS_FILE, known=files) is None:
        return None
    sizes = {**{name: entry["size"] for name, entry in files.items()}, MANIFEST_FILE: previous.entry["size"]}
    if target.reuse_dirs(previous.storage, {f"{POLICIES_DIR}/{pid}": sizes}) is not None:
        return None  # changed on disk since it was written: write it anew
    return dict(previous.entry), dict(files)


#: The last few root manifests read, by their bytes: a save reads its previous checkpoint's
#: root manifest twice (to plan, then to write), and a manager's saves all read their latest.
_PARSED: dict[bytes, dict[str, Any]] = {}
_PARSED_MAX_BYTES = 1 << 20  # a manifest of ~4000 policies; larger ones are parsed each time
_PARSED_LOCK = threading.Lock()


def _parsed_root_manifest(data: bytes, directory: Any) -> dict[str, Any]:
    """The Algorithm manifest held in ``data``, checked (:func:`parse_manifest`); callers do not
    change it (it may be shared with other saves)."""
    with _PARSED_LOCK:
        manifest = _PARSED.get(data)
    if manifest is None:
        manifest = parse_manifest(data, directory, expected_type="Algorithm")
        if len(data) > _PARSED_MAX_BYTES:
            return manifest
        with _PARSED_LOCK:
            _PARSED[data] = manifest
            while len(_PARSED) > 4:
                del _PARSED[next(iter(_PARSED))]
    return manifest


def _manifest_name(pid: str) -> str:
    return f"{POLICIES_DIR}/{pid}/{MANIFEST_FILE}"
