"""Writing Algorithm and Policy checkpoints (format: docs/checkpoint-format.md)."""

from __future__ import annotations

import json
import os
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

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
from cairn.config.algorithm_config import CALLABLE_KEY
from cairn.errors import CheckpointError
from cairn.policy_ids import check_policy_ids

if TYPE_CHECKING:
    from cairn.algorithms.algorithm import Algorithm
    from cairn.policy.policy import Policy

__all__ = ["save_algorithm", "save_policy"]

Files = dict[str, dict[str, Any]]


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


def _write_json(root: Path, name: str, data: Any, files: Files) -> None:
    text = json.dumps(data, indent=1, allow_nan=False).encode()
    with _HashingFile(root, name, files) as out:
        out.write(text)


def _write_state(root: Path, json_name: str, arrays_name: str, state: Any, files: Files) -> None:
    try:
        tree, arrays = split_arrays(state)
    except TreeError as exc:
        raise CheckpointError(f"Cannot save this state: {exc}.") from exc
    with _HashingFile(root, arrays_name, files) as out:
        write_safetensors(out.f, arrays, out.hasher)
    _write_json(root, json_name, tree, files)


def _write_policy_dir(root: Path, policy_state: Mapping[str, Any], policy: Policy | None,
                      *, export_native: bool) -> dict[str, Any]:
    """Write one Policy checkpoint into ``root``; return its manifest's size and hash."""
    files: Files = {}
    _write_state(root, POLICY_STATE_FILE, POLICY_ARRAYS_FILE, policy_state, files)
    extra: dict[str, Any] = {}
    if export_native and policy is not None:
        from cairn.export import write_native_model_files

        extra["native_model"] = write_native_model_files(policy, root, files)
    manifest = build_manifest(
        checkpoint_type="Policy", class_reference=policy_state["spec"]["policy_class"],
        state_file=POLICY_STATE_FILE, files=files, policy_ids=None, extra=extra,
    )
    written: Files = {}
    _write_json(root, MANIFEST_FILE, manifest, written)
    return written[MANIFEST_FILE]


def _local_target(path: str | os.PathLike[str]) -> Path:
    """``path`` as a local path, refused before any state is gathered if a save may not go there."""
    target = save_target(path)
    check_replaceable(target)
    return target


def save_policy(policy: Policy, path: str | os.PathLike[str], *, export_native: bool = False) -> str:
    """Write ``policy`` as a standalone Policy checkpoint at ``path`` (atomically); return the
    local path written.

    ``path`` is a local path (``~`` expanded) or a ``file://`` URL; an existing directory there
    is replaced only if it is a cairn checkpoint or empty (:func:`atomic_directory`).
    """
    target = _local_target(path)
    state = policy._get_state(copy=False)
    with atomic_directory(target) as tmp:
        _write_policy_dir(tmp, state, policy, export_native=export_native)
    return str(target)


def _warn_unstorable(config: Mapping[str, Any]) -> None:
    for key, value in config.items():
        if isinstance(value, Mapping) and CALLABLE_KEY in value and value[CALLABLE_KEY] is None:
            arg = "policy_mapping_fn=..." if key == "policy_mapping_fn" else f"config_overrides={{{key!r}: ...}}"
            warnings.warn(
                f"Config {key!r} is {value.get('name')!r}, which has no import path (lambda, "
                f"closure or __main__ function) and is not stored in the checkpoint; restoring it "
                f"will require {arg}. Define it at module level to store it.",
                stacklevel=3,
            )


def save_algorithm(algo: Algorithm, path: str | os.PathLike[str]) -> str:
    """Write ``algo`` as an Algorithm checkpoint at ``path`` (atomically); return the local path
    written. ``path`` is as in :func:`save_policy`."""
    target = _local_target(path)
    check_policy_ids(algo.policies)
    state = algo._get_state(copy=False)
    policy_states = state.pop("policies")
    components = state.pop("components", {}) or {}
    check_policy_ids(components)  # component names follow the same directory-name rules
    _warn_unstorable(state["config"])
    export_native = bool(algo.config.export_native_model_files)
    with atomic_directory(target) as tmp:
        files: Files = {}
        for pid, policy_state in policy_states.items():
            # The root manifest vouches for each policy's manifest, hashed as it is written.
            files[f"{POLICIES_DIR}/{pid}/{MANIFEST_FILE}"] = _write_policy_dir(
                tmp / POLICIES_DIR / pid, policy_state, algo.policies[pid], export_native=export_native)
        for name, component in components.items():
            _write_state(tmp, f"{COMPONENTS_DIR}/{name}/{COMPONENT_STATE_FILE}",
                         f"{COMPONENTS_DIR}/{name}/{COMPONENT_ARRAYS_FILE}", component, files)
        _write_state(tmp, ALGORITHM_STATE_FILE, ALGORITHM_ARRAYS_FILE, state, files)
        manifest = build_manifest(
            checkpoint_type="Algorithm", class_reference=state["algorithm_class"],
            state_file=ALGORITHM_STATE_FILE, files=files, policy_ids=list(policy_states),
            extra={"components": sorted(components)},
        )
        _write_json(tmp, MANIFEST_FILE, manifest, {})
    return str(target)
