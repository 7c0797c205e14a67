"""Reading Algorithm and Policy checkpoints: verified, partial, and free of code execution."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cairn.checkpoint.format import (
    ALGORITHM_ARRAYS_FILE,
    COMPONENT_ARRAYS_FILE,
    COMPONENT_STATE_FILE,
    COMPONENTS_DIR,
    MANIFEST_FILE,
    POLICIES_DIR,
    POLICY_ARRAYS_FILE,
)
from cairn.checkpoint.manifest import load_json_file, read_manifest, read_verified
from cairn.checkpoint.migrations import migrate
from cairn.checkpoint.paths import CheckpointLike, checkpoint_directory
from cairn.checkpoint.safetensors_io import SafetensorsError, parse_safetensors
from cairn.checkpoint.tree import TreeError, join_arrays
from cairn.errors import (
    CairnError,
    CheckpointCorruptedError,
    CheckpointError,
    CheckpointFormatError,
    UnknownPolicyIdError,
)

if TYPE_CHECKING:
    from cairn.policy.policy import Policy

__all__ = [
    "get_checkpoint_info",
    "load_algorithm_state",
    "load_policy_state",
    "load_policies_from_checkpoint",
]

_MAX_ARRAY_BYTES = 1 << 40


def _read_state(directory: Path, manifest: Mapping[str, Any], arrays_name: str,
                state_name: str | None = None, *, kind: str | None = None) -> Any:
    state_name = state_name or manifest["state_file"]
    tree = load_json_file(directory, state_name, manifest)
    arrays: dict[str, Any] = {}
    if arrays_name in manifest["files"]:
        buffer = read_verified(directory, arrays_name, manifest, limit=_MAX_ARRAY_BYTES)
        try:
            arrays = parse_safetensors(buffer)
        except SafetensorsError as exc:
            raise CheckpointCorruptedError(f"{directory / arrays_name}: {exc}.") from None
    try:
        state = join_arrays(tree, arrays)
    except TreeError as exc:
        raise CheckpointFormatError(f"{directory / state_name}: {exc}.") from None
    if not isinstance(state, dict):
        raise CheckpointFormatError(f"{directory / state_name} does not hold a state object.")
    return migrate(kind or manifest["type"], state, manifest["format_version"])


def load_policy_state(directory: Path) -> dict[str, Any]:
    """The verified, migrated state of the Policy checkpoint in ``directory``."""
    manifest = read_manifest(directory, expected_type="Policy")
    return _read_state(directory, manifest, POLICY_ARRAYS_FILE)  # type: ignore[no-any-return]


def _policy_dir(root: Path, manifest: Mapping[str, Any], pid: str) -> Path:
    """Verify a policy's manifest against the root manifest before it is trusted."""
    name = f"{POLICIES_DIR}/{pid}/{MANIFEST_FILE}"
    read_verified(root, name, manifest)
    return root / POLICIES_DIR / pid


def _select(manifest: Mapping[str, Any], policy_ids: Sequence[str] | None) -> list[str]:
    available = list(manifest["policy_ids"])
    if policy_ids is None:
        return available
    if isinstance(policy_ids, str):
        policy_ids = [policy_ids]
    unknown = [pid for pid in policy_ids if pid not in available]
    if unknown:
        raise UnknownPolicyIdError(
            f"Policy IDs {unknown} are not in this checkpoint; it has {available}. Pass some of "
            "those to policy_ids=[...]."
        )
    return list(policy_ids)


def load_algorithm_state(
    checkpoint: CheckpointLike, *, policy_ids: Sequence[str] | None = None
) -> dict[str, Any]:
    """The verified state of an Algorithm checkpoint, reading only ``policy_ids``' files."""
    with checkpoint_directory(checkpoint) as root:
        manifest = read_manifest(root, expected_type="Algorithm")
        selected = _select(manifest, policy_ids)
        state = _read_state(root, manifest, ALGORITHM_ARRAYS_FILE)
        components = manifest.get("components") or []
        if not isinstance(components, list) or not all(isinstance(c, str) for c in components):
            raise CheckpointFormatError(f"{root}: 'components' must be a list of names.")
        state["components"] = {
            name: _read_state(root, manifest, f"{COMPONENTS_DIR}/{name}/{COMPONENT_ARRAYS_FILE}",
                              f"{COMPONENTS_DIR}/{name}/{COMPONENT_STATE_FILE}",
                              kind=f"component:{name}")
            for name in components
        }
        state["policies"] = {
            pid: _guard(lambda pid=pid: load_policy_state(_policy_dir(root, manifest, pid)), pid)
            for pid in selected
        }
        return state  # type: ignore[no-any-return]


def _guard(load: Any, pid: str) -> Any:
    try:
        return load()
    except CheckpointError as exc:
        raise type(exc)(f"Policy {pid!r}: {exc}") from exc


def _policy_from_state(state: Mapping[str, Any], where: Any) -> Policy:
    from cairn.policy.policy import Policy

    try:
        return Policy.from_state(state)
    except CairnError:
        raise
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise CheckpointFormatError(
            f"{where}: the policy state does not fit its spec ({type(exc).__name__}: {exc})."
        ) from exc


def load_policies_from_checkpoint(
    checkpoint: CheckpointLike, *, policy_ids: Sequence[str] | None = None
) -> Policy | dict[str, Policy]:
    """A Policy for a Policy checkpoint; ``{policy_id: Policy}`` for an Algorithm checkpoint."""
    with checkpoint_directory(checkpoint) as root:
        manifest = read_manifest(root)
        if manifest["type"] == "Policy":
            if policy_ids is not None:
                raise CheckpointFormatError(
                    f"{root} is a Policy checkpoint; policy_ids applies to Algorithm checkpoints."
                )
            return _policy_from_state(load_policy_state(root), root)
        return {
            pid: _policy_from_state(
                _guard(lambda pid=pid: load_policy_state(_policy_dir(root, manifest, pid)), pid),
                root / POLICIES_DIR / pid,
            )
            for pid in _select(manifest, policy_ids)
        }


def get_checkpoint_info(checkpoint: CheckpointLike) -> dict[str, Any]:
    """What a checkpoint is, read from its manifest alone (no state is loaded).

    Keys: ``type`` ("Algorithm" or "Policy"), ``checkpoint_version`` (str), ``format``,
    ``checkpoint_dir``, ``state_file``, ``policy_ids`` (None for a Policy checkpoint),
    ``cairn_version``, ``class``, ``created_at``, ``versions``, ``files``.
    """
    with checkpoint_directory(checkpoint) as root:
        manifest = read_manifest(root)
        return {
            "type": manifest["type"],
            "checkpoint_version": manifest["format_version"],
            "format": manifest["format"],
            "checkpoint_dir": str(root),
            "state_file": str(root / manifest["state_file"]),
            "policy_ids": manifest["policy_ids"],
            "cairn_version": manifest["versions"].get("cairn"),
            "class": manifest["class"],
            "created_at": manifest.get("created_at"),
            "versions": dict(manifest["versions"]),
            "files": dict(manifest["files"]),
            "native_model": manifest.get("native_model"),
        }
