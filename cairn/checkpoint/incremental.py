"""Incremental saves: a policy whose files would hash the same as in an earlier checkpoint is
not written again, but taken from there (a hard link locally, a server-side copy on an object
store).

The proof is the manifests' hashes: the new state's ``policy_state.json`` and
``policy_state.safetensors`` are hashed as the writer would write them (without writing) and
compared with the earlier policy manifest's entries, which were verified against that
checkpoint's root manifest. Only then are the policy's files, its manifest included, reused
unchanged, so the new root manifest vouches for the same bytes.

Each checkpoint still stands alone: a hard link is a second name of the file (deleting the
earlier checkpoint leaves it), and a server-side copy is a new object.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from cairn.checkpoint.format import MANIFEST_FILE, POLICIES_DIR, POLICY_ARRAYS_FILE, POLICY_STATE_FILE
from cairn.checkpoint.manifest import parse_manifest, read_manifest, read_verified
from cairn.checkpoint.storage import Storage, WriteTarget, located, resolve_storage
from cairn.checkpoint.writer_files import state_file_entries
from cairn.errors import CheckpointError

__all__ = ["PreviousPolicy", "previous_policies", "reuse_policy"]


@dataclass
class PreviousPolicy:
    """One policy of an earlier Algorithm checkpoint, its manifest verified."""

    storage: Storage  #: the earlier checkpoint (its root)
    entry: dict[str, Any]  #: the root manifest's entry for the policy's manifest
    manifest: dict[str, Any]  #: the policy's manifest


def previous_policies(previous: str | os.PathLike[str] | Storage | None, target: WriteTarget, *,
                      storage_options: Mapping[str, Any] | None) -> dict[str, PreviousPolicy]:
    """The policies of the Algorithm checkpoint ``previous`` whose files ``target`` can reuse:
    none when there is no ``previous``, when it lies on another store than ``target``, or when
    it is ``target`` itself on an object store (a prefix is uncommitted while it is rewritten).
    An earlier checkpoint that cannot be read is warned about and ignored: the save writes
    every file."""
    if previous is None:
        return {}
    source = resolve_storage(previous, storage_options=storage_options)
    if not target.can_reuse(source):
        return {}
    try:
        with located(source) as where, where.open_reader() as root:
            manifest = read_manifest(root, expected_type="Algorithm")
            names = [f"{POLICIES_DIR}/{pid}/{MANIFEST_FILE}" for pid in manifest["policy_ids"]]
            root.prefetch([(name, manifest["files"][name]["size"]) for name in names], limit=1 << 24)
            found = {}
            for pid, name in zip(manifest["policy_ids"], names):
                data = read_verified(root, name, manifest)
                found[pid] = PreviousPolicy(source, dict(manifest["files"][name]), parse_manifest(
                    data, root.path / f"{POLICIES_DIR}/{pid}", expected_type="Policy"))
            return found
    except CheckpointError as exc:
        warnings.warn(f"Incremental save: the previous checkpoint {source.url} cannot be read, so "
                      f"every file is written anew ({exc}).", stacklevel=3)
        return {}


def reuse_policy(target: WriteTarget, pid: str, state: Any, previous: PreviousPolicy | None, *,
                 native: bool) -> dict[str, Any] | None:
    """Take policy ``pid``'s files from ``previous`` when ``state`` would be written as the
    same bytes (and native model files are wanted there exactly when they were stored);
    return the root manifest's entry for its manifest, or None when it must be written."""
    if previous is None or native != (previous.manifest.get("native_model") is not None):
        return None
    files = previous.manifest["files"]
    if state_file_entries(state, POLICY_STATE_FILE, POLICY_ARRAYS_FILE, known=files) is None:
        return None
    prefix = f"{POLICIES_DIR}/{pid}/"
    names = [*files, MANIFEST_FILE]
    sizes = {**{name: entry["size"] for name, entry in files.items()}, MANIFEST_FILE: previous.entry["size"]}
    if not all(previous.storage.unchanged(prefix + name, sizes[name]) for name in names):
        return None  # changed on disk since it was written: write it anew
    for name in names:
        target.reuse(previous.storage, prefix + name, prefix + name)
    return dict(previous.entry)

