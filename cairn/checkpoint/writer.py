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
from cairn.checkpoint.incremental import PreviousCheckpoint, Reuse, link_policies, plan_reuse
from cairn.checkpoint.manifest import build_manifest, check_metadata
from cairn.checkpoint.paths import save_target
from cairn.checkpoint.storage import Storage, WriteTarget, writing
from cairn.checkpoint.writer_files import Files, split_state, staging, write_json_file, write_state_files
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
#: A writer whose files depend on more than the policy's state (a Keras policy's ``model.onnx``
#: only with ``export_native_model_files``) also has ``reuses(record) -> bool``: whether an
#: earlier checkpoint whose manifest's ``native_model`` is ``record`` holds the files it would
#: write. An incremental save takes a policy's files whole only then (:func:`plan_reuse`).
NativeFiles = Callable[[Path, Files], "dict[str, Any] | None"]
#: Where a checkpoint is written or read: a path, a URL, or a Storage.
Location = Union[str, "os.PathLike[str]", Storage]


def _write_policy_dir(root: Path, policy_state: Mapping[str, Any],
                      native_files: NativeFiles | None) -> dict[str, Any]:
    """Write one Policy checkpoint into ``root``; return its manifest's size and hash."""
    files: Files = {}
    write_state_files(root, POLICY_STATE_FILE, POLICY_ARRAYS_FILE, policy_state, files)
    return _write_policy_manifest(root, policy_state, native_files, files)


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


def _reused_policy(target: WriteTarget, pid: str, state: Any, reuse: Reuse) -> dict[str, Any]:
    """The manifest's entry of policy ``pid`` whose files (all, or its arrays file)
    :func:`~cairn.checkpoint.incremental.link_policies` took; the JSON state file and the
    manifest are written here when only the arrays file was taken."""
    if reuse.whole:
        return dict(reuse.previous.entry)
    root = target.directory / POLICIES_DIR / pid
    written: Files = {POLICY_ARRAYS_FILE: dict(reuse.previous.manifest["files"][POLICY_ARRAYS_FILE])}
    write_json_file(root, POLICY_STATE_FILE, split_state(state)[0], written, compact=True)
    return _write_policy_manifest(root, state, None, written)


def write_algorithm_checkpoint(
    path: Location, state: Mapping[str, Any], *,
    policy_native_files: Mapping[str, NativeFiles] | None = None,
    storage_options: Mapping[str, Any] | None = None,
    previous: Location | None = None,
    metadata: Mapping[str, Any] | None = None,
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
            policy's file that would be the same bytes as there (its size and hash, computed
            from ``state``, equal those the earlier policy manifest lists) is not written again
            but hard-linked (locally) or copied server-side (object stores); see
            :mod:`cairn.checkpoint.incremental`. The new checkpoint stands alone; deleting
            ``previous`` never breaks it. Ignored when it lies elsewhere.
        metadata: JSON data stored as the manifest's ``metadata``
            (:func:`~cairn.checkpoint.manifest.check_metadata`); None stores none.
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
        earlier = PreviousCheckpoint.open(previous, target.storage, storage_options=storage_options,
                                          read=policy_states)
        reuse: dict[str, Reuse] = {}
        if earlier is not None:
            for pid, policy_state in policy_states.items():
                plan = plan_reuse(policy_state, earlier.policies.get(pid), native=pid in native,
                                  reuses=getattr(native.get(pid), "reuses", None))
                if plan is not None:
                    reuse[pid] = plan
            for pid in link_policies(target, earlier, reuse):
                del reuse[pid]  # changed on disk since its manifest was written: written anew
        tmp = target.directory
        files: Files = {}
        for pid, policy_state in policy_states.items():
            # The root manifest vouches for each policy's manifest, hashed as it is written.
            files[f"{POLICIES_DIR}/{pid}/{MANIFEST_FILE}"] = (
                _reused_policy(target, pid, policy_state, reuse[pid]) if pid in reuse else
                _write_policy_dir(tmp / POLICIES_DIR / pid, policy_state, native.get(pid)))
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
        if reuse:
            assert earlier is not None
            earlier.confirm()  # the files taken are those its manifest listed (not a replacement's)
        write_json_file(tmp, MANIFEST_FILE, manifest, {})
    return target.storage.url
