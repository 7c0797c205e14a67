"""Reading Algorithm and Policy checkpoints: verified, partial, and free of code execution."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from cairn.checkpoint.dirhandle import CheckpointDir
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
from cairn.checkpoint.validate import check_algorithm_state, check_env_reference, check_policy_state
from cairn.errors import (
    CairnError,
    CheckpointConfigError,
    CheckpointCorruptedError,
    CheckpointEnvError,
    CheckpointError,
    CheckpointFormatError,
    CheckpointNotFoundError,
    ConfigError,
    EnvError,
    UnknownPolicyIdError,
)
from cairn.policy_ids import normalize_policy_ids

if TYPE_CHECKING:
    from cairn.algorithms.algorithm import Algorithm
    from cairn.policy.policy import Policy

__all__ = [
    "get_checkpoint_info",
    "load_algorithm_state",
    "load_policy_state",
    "load_policies_from_checkpoint",
    "restore_algorithm",
    "restoring",
]

_MAX_ARRAY_BYTES = 1 << 40
#: Attempts to read a checkpoint that a writer atomically replaces while it is being read.
_READ_ATTEMPTS = 3
#: Exceptions that a state of the wrong structure raises deep inside ``set_state``; at the
#: loader boundary they become ``CheckpointFormatError``. MemoryError is deliberately absent:
#: the checks below bound memory, so running out of it is a bug to see, not to relabel.
_STATE_ERRORS = (LookupError, TypeError, ValueError, AttributeError, ArithmeticError, RuntimeError)

T = TypeVar("T")


def _consistent(root: Path, read: Callable[[CheckpointDir], T]) -> T:
    """Run ``read`` on the directory opened once; retry when a writer replaced it meanwhile.

    Every file comes from the directory opened first, so a read sees one checkpoint whole. A
    writer that swaps in a new checkpoint deletes the old one; a read that loses files that
    way fails, and is retried on the new checkpoint (up to ``_READ_ATTEMPTS`` times).
    """
    for attempt in range(1, _READ_ATTEMPTS + 1):
        with CheckpointDir.open(root) as handle:
            try:
                return read(handle)
            except (CheckpointNotFoundError, CheckpointCorruptedError):
                if attempt == _READ_ATTEMPTS or not handle.replaced():
                    raise
    raise AssertionError("unreachable")


def _read_state(directory: CheckpointDir, manifest: Mapping[str, Any], arrays_name: str,
                state_name: str | None = None, *, kind: str | None = None) -> Any:
    state_name = state_name or manifest["state_file"]
    tree = load_json_file(directory, state_name, manifest)
    arrays: dict[str, Any] = {}
    if arrays_name in manifest["files"]:
        buffer = read_verified(directory, arrays_name, manifest, limit=_MAX_ARRAY_BYTES)
        try:
            arrays = parse_safetensors(buffer)
        except SafetensorsError as exc:
            raise CheckpointCorruptedError(f"{directory.path / arrays_name}: {exc}.") from None
    try:
        state = join_arrays(tree, arrays)
    except TreeError as exc:
        raise CheckpointFormatError(f"{directory.path / state_name}: {exc}.") from None
    if not isinstance(state, dict):
        raise CheckpointFormatError(f"{directory.path / state_name} does not hold a state object.")
    return migrate(kind or manifest["type"], state, manifest["format_version"])


def load_policy_state(directory: Path | CheckpointDir) -> dict[str, Any]:
    """The verified, migrated state of the Policy checkpoint in ``directory``."""
    if not isinstance(directory, CheckpointDir):
        return _consistent(directory, load_policy_state)
    manifest = read_manifest(directory, expected_type="Policy")
    state = _read_state(directory, manifest, POLICY_ARRAYS_FILE)
    check_policy_state(state, directory.path)
    return state  # type: ignore[no-any-return]


def _policy_dir(root: CheckpointDir, manifest: Mapping[str, Any], pid: str) -> CheckpointDir:
    """Verify a policy's manifest against the root manifest before it is trusted."""
    read_verified(root, f"{POLICIES_DIR}/{pid}/{MANIFEST_FILE}", manifest)
    return root.subdir(f"{POLICIES_DIR}/{pid}")


def _load_policy(root: CheckpointDir, manifest: Mapping[str, Any], pid: str) -> dict[str, Any]:
    try:
        with _policy_dir(root, manifest, pid) as sub:
            return load_policy_state(sub)
    except CheckpointError as exc:
        raise type(exc)(f"Policy {pid!r}: {exc}") from exc


def _select(manifest: Mapping[str, Any], policy_ids: str | Sequence[str] | None) -> list[str]:
    available = list(manifest["policy_ids"])
    policy_ids = normalize_policy_ids(policy_ids)
    if policy_ids is None:
        return available
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

    def read(root: CheckpointDir) -> dict[str, Any]:
        manifest = read_manifest(root, expected_type="Algorithm")
        selected = _select(manifest, policy_ids)
        state = _read_state(root, manifest, ALGORITHM_ARRAYS_FILE)
        check_algorithm_state(state, manifest, root.path)
        state["components"] = {
            name: _read_state(root, manifest, f"{COMPONENTS_DIR}/{name}/{COMPONENT_ARRAYS_FILE}",
                              f"{COMPONENTS_DIR}/{name}/{COMPONENT_STATE_FILE}",
                              kind=f"component:{name}")
            for name in manifest.get("components") or []
        }
        state["policies"] = {pid: _load_policy(root, manifest, pid) for pid in selected}
        return state

    with checkpoint_directory(checkpoint) as root:
        return _consistent(root, read)


@contextlib.contextmanager
def restoring(where: Any) -> Iterator[None]:
    """Turn what building objects from a verified checkpoint state raises into
    ``CheckpointError`` subclasses naming ``where`` (the loader boundary)."""
    try:
        yield
    except CheckpointError:
        raise
    except CairnError as exc:
        if isinstance(exc.__cause__, CheckpointError):  # e.g. ConfigError from a refused reference
            raise type(exc.__cause__)(f"{where}: {exc}") from exc
        if isinstance(exc, ConfigError):
            raise CheckpointConfigError(
                f"{where}: the checkpoint's config cannot be used: {exc} Fix it with "
                "config_overrides={...} if it comes from a newer or modified cairn."
            ) from exc
        if isinstance(exc, EnvError):
            raise CheckpointEnvError(
                f"{where}: {exc} Register the checkpoint's environment in this process "
                "(cairn.register_env) or pass config_overrides={'env': ...}."
            ) from exc
        raise
    except _STATE_ERRORS as exc:
        raise CheckpointFormatError(
            f"{where}: the stored state does not fit the objects it describes "
            f"({type(exc).__name__}: {exc})."
        ) from exc


def _policy_from_state(state: Mapping[str, Any], where: Any) -> Policy:
    from cairn.policy.policy import Policy

    with restoring(where):
        # The arrays were read into buffers nobody else holds: adopt them, don't copy.
        return Policy.from_state(state, copy=False)
    raise AssertionError("unreachable")  # mypy: restoring() never swallows


def load_policies_from_checkpoint(
    checkpoint: CheckpointLike, *, policy_ids: Sequence[str] | None = None
) -> Policy | dict[str, Policy]:
    """A Policy for a Policy checkpoint; ``{policy_id: Policy}`` for an Algorithm checkpoint."""

    def read(root: CheckpointDir) -> dict[str, Any] | None:
        manifest = read_manifest(root)
        if manifest["type"] == "Policy":
            if policy_ids is not None:
                raise CheckpointFormatError(
                    f"{root.path} is a Policy checkpoint; policy_ids applies to Algorithm "
                    "checkpoints."
                )
            return None
        return {pid: _load_policy(root, manifest, pid) for pid in _select(manifest, policy_ids)}

    with checkpoint_directory(checkpoint) as root:
        states = _consistent(root, read)
        if states is None:
            return _policy_from_state(load_policy_state(root), root)
        return {pid: _policy_from_state(state, root / POLICIES_DIR / pid)
                for pid, state in states.items()}


def restore_algorithm(
    algo_cls: type[Algorithm], checkpoint: CheckpointLike, *,
    policy_ids: Sequence[str] | None = None, **from_state_kwargs: Any,
) -> Algorithm:
    """``algo_cls.from_state`` on a verified checkpoint: the body of
    ``Algorithm.from_checkpoint``, raising only ``CheckpointError`` for a bad checkpoint."""
    state = load_algorithm_state(checkpoint, policy_ids=policy_ids)
    overrides = from_state_kwargs.get("config_overrides") or {}
    if "env" not in overrides:
        check_env_reference(state["config"], checkpoint)
    with restoring(checkpoint):
        return algo_cls.from_state(state, policy_ids=policy_ids, copy=False, **from_state_kwargs)
    raise AssertionError("unreachable")


def get_checkpoint_info(checkpoint: CheckpointLike) -> dict[str, Any]:
    """What a checkpoint is, read from its manifest alone (no state is loaded).

    Keys: ``type`` ("Algorithm" or "Policy"), ``checkpoint_version`` (str), ``format``,
    ``checkpoint_dir``, ``state_file``, ``policy_ids`` (None for a Policy checkpoint),
    ``cairn_version``, ``class``, ``created_at``, ``versions``, ``files``.
    """
    with checkpoint_directory(checkpoint) as root:
        manifest = _consistent(root, read_manifest)
        return {
            "type": manifest["type"],
            "checkpoint_version": manifest["format_version"],
            "format": manifest["format"],
            "checkpoint_dir": str(root),
            "state_file": str(root / manifest["state_file"]),
            "policy_ids": manifest.get("policy_ids"),
            "cairn_version": manifest["versions"].get("cairn"),
            "class": manifest["class"],
            "created_at": manifest.get("created_at"),
            "versions": dict(manifest["versions"]),
            "files": dict(manifest["files"]),
            "native_model": manifest.get("native_model"),
        }
