"""Writing Algorithm and Policy checkpoints (format: docs/checkpoint-format.md).

The writer takes state trees, not objects: the layers above hand it ``Policy.get_state()`` or
``Algorithm.get_state()`` output, plus callbacks that write opaque native model files.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Collection, Mapping
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
    link_policies,
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


def _link_given(target: WriteTarget, previous: PreviousCheckpoint | None,
                given: Mapping[str, LinkedPolicy | LinkedArrays], native: Mapping[str, NativeFiles]) -> None:
    """Take from ``previous`` the files of the policies whose states are given as
    :class:`LinkedPolicy` (all of them) or :class:`LinkedArrays` (the arrays file), in one call:
    an incremental save takes a few files of each of hundreds of policies."""
    sizes: dict[str, dict[str, int]] = {}
    for pid, state in given.items():
        if previous is None or pid in native:
            why = "which cannot be read here" if previous is None else "but native model files are wanted"
            raise CheckpointError(f"Cannot save policy {pid!r}: its state was to be taken from the "
                                  f"previous checkpoint, {why}.")
        previous.check_entry(pid, state.entry)
        if isinstance(state, LinkedPolicy):
            sizes[pid] = {**{name: entry["size"] for name, entry in state.files.items()},
                          MANIFEST_FILE: state.entry["size"]}
        else:
            sizes[pid] = {POLICY_ARRAYS_FILE: state.arrays["size"]}
    if sizes:
        assert previous is not None
        link_policies(target, previous, sizes)


def _given_policy(target: WriteTarget, pid: str,
                  given: LinkedPolicy | LinkedArrays) -> tuple[dict[str, Any], Files]:
    """The manifest's entry and files of policy ``pid`` whose files :func:`_link_given` took
    (for :class:`LinkedArrays`, its JSON state file and manifest are written here)."""
    if isinstance(given, LinkedPolicy):
        return dict(given.entry), {name: dict(entry) for name, entry in given.files.items()}
    root = target.directory / POLICIES_DIR / pid
    files: Files = {POLICY_ARRAYS_FILE: dict(given.arrays)}
    write_json_file(root, POLICY_STATE_FILE, given.tree, files, compact=True)
    return _write_policy_manifest(root, given.tree, None, files), files


def _write_policy(target: WriteTarget, previous: PreviousCheckpoint | None, pid: str, state: Any,
                  native_files: NativeFiles | None) -> tuple[dict[str, Any], Files]:
    """Write (or take from ``previous``, when its files there hash the same) policy ``pid`` of an
    Algorithm checkpoint; return its manifest's entry (which the root manifest lists) and the
    files its manifest lists."""
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
    changed: Collection[str] = (),
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
        changed: Policies known to differ from ``previous`` (their change markers said so):
            written without hashing them to compare.
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
        given = {pid: s for pid, s in policy_states.items() if isinstance(s, (LinkedPolicy, LinkedArrays))}
        hashed = [pid for pid in policy_states if pid not in given and pid not in changed]
        earlier = PreviousCheckpoint.open(previous, target.storage, storage_options=storage_options,
                                          read=hashed)
        _link_given(target, earlier, given, native)
        tmp = target.directory
        files: Files = {}
        policies: dict[str, Any] = {}
        for pid, policy_state in policy_states.items():
            # The root manifest vouches for each policy's manifest, hashed as it is written.
            entry, policy_files = (_given_policy(target, pid, given[pid]) if pid in given else
                                   _write_policy(target, earlier, pid, policy_state, native.get(pid)))
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
