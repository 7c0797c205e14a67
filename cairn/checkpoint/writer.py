"""Writing Algorithm and Policy checkpoints (format: docs/checkpoint-format.md).

The writer takes state trees, not objects: the layers above hand it ``Policy.get_state()`` or
``Algorithm.get_state()`` output, plus callbacks that write opaque native model files.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from cairn.checkpoint.atomic import atomic_directory, check_replaceable
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
from cairn.checkpoint.manifest import build_manifest
from cairn.checkpoint.paths import save_target
from cairn.checkpoint.safetensors_io import new_hasher, write_safetensors
from cairn.checkpoint.tree import TreeError, split_arrays
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

Files = dict[str, dict[str, Any]]
#: ``native_files(directory, files) -> native_model record | None``: writes opaque native model
#: files into a Policy checkpoint's ``directory``, records each in ``files`` (path relative to
#: ``directory`` -> ``{"size", "hash"}``), and returns the manifest's ``native_model`` entry.
NativeFiles = Callable[[Path, Files], "dict[str, Any] | None"]


class _HashingFile:
    """Writes a file, fsyncs it, and records its size and hash in ``files``."""

    def __init__(self, root: Path, name: str, files: Files) -> None:
        self.path, self.name, self.files = root / name, name, files
        self.hasher = new_hasher()

    def __enter__(self) -> _HashingFile:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.f = open(self.path, "wb")
        return self

    def write(self, data: bytes) -> None:
        self.f.write(data)
        self.hasher.update(data)

    def __exit__(self, *exc: Any) -> None:
        try:
            if exc[0] is None:
                self.f.flush()
                os.fsync(self.f.fileno())
                self.files[self.name] = {"size": self.f.tell(), "hash": self.hasher.hexdigest()}
        finally:
            self.f.close()


def write_json_file(root: Path, name: str, data: Any, files: Files) -> None:
    """Write ``data`` as the JSON file ``root/name``, recording its size and hash in ``files``."""
    text = json.dumps(data, indent=1, allow_nan=False).encode()
    with _HashingFile(root, name, files) as out:
        out.write(text)


def write_state_files(root: Path, json_name: str, arrays_name: str, state: Any, files: Files) -> None:
    """Write a state tree as ``json_name`` (its JSON values) and ``arrays_name`` (its arrays,
    safetensors), recording both in ``files``."""
    try:
        tree, arrays = split_arrays(state)
    except TreeError as exc:
        raise CheckpointError(f"Cannot save this state: {exc}.") from exc
    with _HashingFile(root, arrays_name, files) as out:
        write_safetensors(out.f, arrays, out.hasher)
    write_json_file(root, json_name, tree, files)


def _write_policy_dir(root: Path, policy_state: Mapping[str, Any],
                      native_files: NativeFiles | None) -> dict[str, Any]:
    """Write one Policy checkpoint into ``root``; return its manifest's size and hash."""
    files: Files = {}
    write_state_files(root, POLICY_STATE_FILE, POLICY_ARRAYS_FILE, policy_state, files)
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
    """
    target = save_target(path)
    check_replaceable(target)
    return target


def write_policy_checkpoint(path: str | os.PathLike[str], state: Mapping[str, Any], *,
                            native_files: NativeFiles | None = None) -> str:
    """Write a policy state tree as a standalone Policy checkpoint at ``path`` (atomically);
    return the local path written.

    Args:
        path: As in :func:`save_location`.
        state: The policy's state tree (``Policy.get_state(copy=False)`` is enough: it is
            written before this returns). Its ``spec.policy_class`` is the manifest's class.
        native_files: ``native_files(directory, files)`` writes opaque native model files
            into ``directory`` (recording each in ``files``) and returns the manifest's
            ``native_model`` entry, or None for none.
    """
    target = save_target(path)  # atomic_directory refuses a target it may not replace
    with atomic_directory(target) as tmp:
        _write_policy_dir(tmp, state, native_files)
    return str(target)


def write_algorithm_checkpoint(
    path: str | os.PathLike[str], state: Mapping[str, Any], *,
    policy_native_files: Mapping[str, NativeFiles] | None = None,
) -> str:
    """Write an algorithm state tree as an Algorithm checkpoint at ``path`` (atomically); return
    the local path written.

    Args:
        path: As in :func:`save_location`.
        state: The algorithm's state tree: ``algorithm_class`` (the manifest's class),
            ``policies`` (``{policy_id: policy state}``, each written as a Policy checkpoint
            under ``policies/``), optional ``components`` (``{name: tree}``, each its own
            component) and the rest, written as the algorithm state.
        policy_native_files: ``{policy_id: native_files}``, as in
            :func:`write_policy_checkpoint`, for the policies that get native model files.
    """
    target = save_target(path)  # atomic_directory refuses a target it may not replace
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
    with atomic_directory(target) as tmp:
        files: Files = {}
        for pid, policy_state in policy_states.items():
            # The root manifest vouches for each policy's manifest, hashed as it is written.
            files[f"{POLICIES_DIR}/{pid}/{MANIFEST_FILE}"] = _write_policy_dir(
                tmp / POLICIES_DIR / pid, policy_state, native.get(pid))
        for name, component in components.items():
            write_state_files(tmp, f"{COMPONENTS_DIR}/{name}/{COMPONENT_STATE_FILE}",
                              f"{COMPONENTS_DIR}/{name}/{COMPONENT_ARRAYS_FILE}", component, files)
        write_state_files(tmp, ALGORITHM_STATE_FILE, ALGORITHM_ARRAYS_FILE, rest, files)
        manifest = build_manifest(
            checkpoint_type="Algorithm", class_reference=class_reference,
            state_file=ALGORITHM_STATE_FILE, files=files, policy_ids=list(policy_states),
            extra={"components": sorted(components)},
        )
        write_json_file(tmp, MANIFEST_FILE, manifest, {})
    return str(target)
