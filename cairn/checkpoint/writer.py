"""Writing Algorithm and Policy checkpoints (format: docs/checkpoint-format.md).

The writer takes state trees, not objects: the layers above hand it ``Policy.get_state()`` or
``Algorithm.get_state()`` output, plus callbacks that write opaque native model files.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Union

from cairn.checkpoint.atomic import check_replaceable, syncs_whole_file_system
from cairn.checkpoint.format import (
    ALGORITHM_ARRAYS_FILE,
    ALGORITHM_STATE_FILE,
    COMPONENT_ARRAYS_FILE,
    COMPONENT_STATE_FILE,
    COMPONENTS_DIR,
    MANIFEST_FILE,
    POLICIES_DIR,
    POLICY_ARRAYS_FILE,
    POLICY_STATE_FILE,
)
from cairn.checkpoint.incremental import (
    LinkedArrays,
    LinkedPolicy,
    PreviousCheckpoint,
    link_files,
    reuse_policy,
)
from cairn.checkpoint.manifest import build_manifest, check_metadata
from cairn.checkpoint.paths import save_target
from cairn.checkpoint.storage import Storage, WriteTarget, writing
from cairn.checkpoint.writer_files import Files, staging, write_json_file, write_state_files
from cairn.errors import CheckpointError
from cairn.policy_ids import check_policy_ids

__all__ = [
    "NativeFiles",
    "save_location",
    "write_policy_checkpoint",
    "write_algorithm_checkpoint",
    "write_json_file",
    "write_state_files",
]

#: ``native_files(directory, files) -> native_model record | None``: writes opaque native model
#: files into a Policy checkpoint's ``directory``, records each in ``files`` (path relative to
#: ``directory`` -> ``{"size", "hash"}``), and returns the manifest's ``native_model`` entry.
NativeFiles = Callable[[Path, Files], "dict[str, Any] | None"]
#: Where a checkpoint is written or read: a path, a URL, or a Storage.
Location = Union[str, "os.PathLike[str]", Storage]


def _write_policy_dir(root: Path, policy_state: Mapping[str, Any],
                      native_files: NativeFiles | None) -> tuple[dict[str, Any], Files]:
    """Write one Policy checkpoint into ``root``; return its manifest's size and hash, and the
    files the manifest lists."""
    files: Files = {}
    write_state_files(root, POLICY_STATE_FILE, POLICY_ARRAYS_FILE, policy_state, files)
    return _write_policy_manifest(root, policy_state, native_files, files), files


def _write_policy_manifest(root: Path, policy_state: Mapping[str, Any], native_files: NativeFiles | None,
                           files: Files) -> dict[str, Any]:
    """Write the manifest of the Policy checkpoint in ``root`` (its state files listed in
    ``files``, native model files added); return the manifest's size and hash."""
    extra: dict[str, Any] = {}
    if native_files is not None:
        record = native_files(root, files)
        if record is not None:
            extra["native_model"] = record
    manifest = build_manifest(
        checkpoint_type="Policy", class_reference=_policy_class(policy_state),
        state_file=POLICY_STATE_FILE, files=files, policy_ids=None, extra=extra,
    )
    written: Files = {}
    write_json_file(root, MANIFEST_FILE, manifest, written)
    return written[MANIFEST_FILE]


def _policy_class(policy_state: Mapping[str, Any]) -> str:
    spec = policy_state.get("spec")
    reference = spec.get("policy_class") if isinstance(spec, Mapping) else None
    if not isinstance(reference, str):
        raise CheckpointError(
            f"Cannot save this policy state: its 'spec' should hold a str 'policy_class', got "
            f"{type(reference).__name__}. Pass the output of Policy.get_state()."
        )
    return reference


def save_location(path: str | os.PathLike[str]) -> Path:
    """The local directory a save to ``path`` writes, refused before any state is gathered if a
    save may not go there.

    ``path`` is a local path (``~`` expanded) or a ``file://`` URL (:func:`save_target`); an
    existing directory there may be replaced only if it is a cairn checkpoint or empty
    (:func:`check_replaceable`). Callers check this, then gather the state, then write it.
    For any location, object-store URLs included, use
    :func:`~cairn.checkpoint.storage.check_save_location`.
    """
    target = save_target(path)
    check_replaceable(target)
    return target


def write_policy_checkpoint(path: Location, state: Mapping[str, Any], *,
                            native_files: NativeFiles | None = None,
                            storage_options: Mapping[str, Any] | None = None) -> str:
    """Write a policy state tree as a standalone Policy checkpoint at ``path`` (atomically
    locally; committed by its manifest, written last, on an object store); return the location
    written (a local path, or the URL).

    Args:
        path: A local path, a ``file://`` URL, an object-store URL (``s3://``, ``gs://``,
            ``memory://``), or a :class:`~cairn.checkpoint.storage.Storage`.
        state: The policy's state tree (``Policy.get_state(copy=False)`` is enough: it is
            written before this returns). Its ``spec.policy_class`` is the manifest's class.
        native_files: ``native_files(directory, files)`` writes opaque native model files
            into ``directory`` (recording each in ``files``) and returns the manifest's
            ``native_model`` entry, or None for none.
        storage_options: Options of the URL's fsspec file system (docs/storage.md).
    """
    with writing(path, storage_options=storage_options) as target:  # refuses what it may not replace
        _write_policy_dir(target.directory, state, native_files)
    return target.storage.url


def _linked_arrays(target: WriteTarget, previous: PreviousCheckpoint, pid: str,
                   linked: LinkedArrays) -> tuple[dict[str, Any], Files]:
    """Write policy ``pid``'s JSON state file and manifest, taking its arrays file from
    ``previous``; return the manifest's entry and its files."""
    previous.check_entry(pid, linked.entry)
    link_files(target, previous, pid, [POLICY_ARRAYS_FILE], {POLICY_ARRAYS_FILE: linked.arrays["size"]})
    root = target.directory / POLICIES_DIR / pid
    files: Files = {POLICY_ARRAYS_FILE: dict(linked.arrays)}
    write_json_file(root, POLICY_STATE_FILE, linked.tree, files, compact=True)
    return _write_policy_manifest(root, linked.tree, None, files), files


def _linked_policy(target: WriteTarget, previous: PreviousCheckpoint, pid: str,
                   linked: LinkedPolicy) -> tuple[dict[str, Any], Files]:
    """Take every file of policy ``pid`` from ``previous``; return its manifest's entry and files."""
    previous.check_entry(pid, linked.entry)
    sizes = {name: entry["size"] for name, entry in linked.files.items()}
    sizes[MANIFEST_FILE] = linked.entry["size"]
    link_files(target, previous, pid, sizes, sizes)
    return dict(linked.entry), {name: dict(entry) for name, entry in linked.files.items()}


def _write_policy(target: WriteTarget, previous: PreviousCheckpoint | None, pid: str, state: Any,
                  native_files: NativeFiles | None) -> tuple[dict[str, Any], Files]:
    """Write (or take from ``previous``) policy ``pid`` of an Algorithm checkpoint; return its
    manifest's entry (which the root manifest lists) and the files its manifest lists."""
    if isinstance(state, (LinkedPolicy, LinkedArrays)):
        if previous is None or native_files is not None:
            why = "which cannot be read here" if previous is None else "but native model files are wanted"
            raise CheckpointError(f"Cannot save policy {pid!r}: its state was to be taken from the "
                                  f"previous checkpoint, {why}.")
        if isinstance(state, LinkedPolicy):
            return _linked_policy(target, previous, pid, state)
        return _linked_arrays(target, previous, pid, state)
    earlier = None if previous is None else previous.policies.get(pid)
    reused = reuse_policy(target, pid, state, earlier, native=native_files is not None)
    return reused or _write_policy_dir(target.directory / POLICIES_DIR / pid, state, native_files)


def write_algorithm_checkpoint(
    path: Location, state: Mapping[str, Any], *,
    policy_native_files: Mapping[str, NativeFiles] | None = None,
    storage_options: Mapping[str, Any] | None = None,
    previous: Location | None = None,
    metadata: Mapping[str, Any] | None = None,
    written: dict[str, Any] | None = None,
) -> str:
    """Write an algorithm state tree as an Algorithm checkpoint at ``path`` (atomically
    locally; committed by its manifest, written last, on an object store); return the location
    written (a local path, or the URL).

    Args:
        path: As in :func:`write_policy_checkpoint`.
        state: The algorithm's state tree: ``algorithm_class`` (the manifest's class),
            ``policies`` (``{policy_id: policy state}``, each written as a Policy checkpoint
            under ``policies/``), optional ``components`` (``{name: tree}``, each its own
            component) and the rest, written as the algorithm state.
        policy_native_files: ``{policy_id: native_files}``, as in
            :func:`write_policy_checkpoint`, for the policies that get native model files.
        storage_options: Options of the URL's fsspec file system (docs/storage.md), for
            ``path`` and ``previous``.
        previous: An earlier Algorithm checkpoint on the same store (incremental save): a
            policy whose files would hash the same as there is not written again but hard-linked
            (locally) or copied server-side (object stores). The new checkpoint stands alone;
            deleting ``previous`` never breaks it. Ignored when it lies elsewhere. A policy
            state in ``state`` may also be a :class:`~cairn.checkpoint.incremental.LinkedPolicy`
            or :class:`~cairn.checkpoint.incremental.LinkedArrays`: files taken from ``previous``
            without comparing hashes (the caller vouches for them).
        metadata: JSON data stored as the manifest's ``metadata``
            (:func:`~cairn.checkpoint.manifest.check_metadata`); None stores none.
        written: A dict to fill, once the checkpoint is committed, with
            ``{policy_id: {"entry": ..., "files": ...}}``: the root manifest's entry for each
            policy's manifest and the files that manifest lists (what the caller hands back in
            a ``LinkedPolicy`` or ``LinkedArrays`` of a later save).
    """
    metadata = check_metadata(metadata)
    rest = dict(state)
    policy_states: Mapping[str, Any] = rest.pop("policies")
    components: Mapping[str, Any] = rest.pop("components", None) or {}
    check_policy_ids(policy_states)
    check_policy_ids(components)  # component names follow the same directory-name rules
    class_reference = rest.get("algorithm_class")
    if not isinstance(class_reference, str):
        raise CheckpointError(
            f"Cannot save this algorithm state: its 'algorithm_class' should be a str, got "
            f"{type(class_reference).__name__}. Pass the output of Algorithm.get_state()."
        )
    native = policy_native_files or {}
    # With a directory per policy, one syncfs at the end makes the whole tree durable
    # (cairn.checkpoint.atomic): the files need no fsync each.
    durable = contextlib.nullcontext() if not syncs_whole_file_system(len(policy_states) + 2) else staging()
    with writing(path, storage_options=storage_options) as target, durable:  # refuses what it may not replace
        hashed = [pid for pid, s in policy_states.items() if not isinstance(s, (LinkedPolicy, LinkedArrays))]
        earlier = PreviousCheckpoint.open(previous, target.storage, storage_options=storage_options,
                                          read=hashed)
        tmp = target.directory
        files: Files = {}
        policies: dict[str, Any] = {}
        for pid, policy_state in policy_states.items():
            # The root manifest vouches for each policy's manifest, hashed as it is written.
            entry, policy_files = _write_policy(target, earlier, pid, policy_state, native.get(pid))
            files[f"{POLICIES_DIR}/{pid}/{MANIFEST_FILE}"] = entry
            policies[pid] = {"entry": entry, "files": policy_files}
        for name, component in components.items():
            write_state_files(tmp, f"{COMPONENTS_DIR}/{name}/{COMPONENT_STATE_FILE}",
                              f"{COMPONENTS_DIR}/{name}/{COMPONENT_ARRAYS_FILE}", component, files)
        write_state_files(tmp, ALGORITHM_STATE_FILE, ALGORITHM_ARRAYS_FILE, rest, files)
        manifest = build_manifest(
            checkpoint_type="Algorithm", class_reference=class_reference,
            state_file=ALGORITHM_STATE_FILE, files=files, policy_ids=list(policy_states),
            extra={"components": sorted(components),
                   **({} if metadata is None else {"metadata": metadata})},
        )
        write_json_file(tmp, MANIFEST_FILE, manifest, {})
    if written is not None:
        written.update(policies)
    return target.storage.url
