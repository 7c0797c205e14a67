"""Reading Algorithm and Policy checkpoints: verified, partial, and free of code execution.

The reader returns state trees and knows no class above the checkpoint layer: the policy and
algorithm layers check that a tree describes their objects and build them
(``Policy.from_checkpoint``, ``Algorithm.from_checkpoint``), inside :func:`restoring`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, TypeVar

from cairn.checkpoint.format import (
    ALGORITHM_ARRAYS_FILE,
    COMPONENT_ARRAYS_FILE,
    COMPONENT_STATE_FILE,
    COMPONENTS_DIR,
    MANIFEST_FILE,
    POLICIES_DIR,
    POLICY_ARRAYS_FILE,
)
from cairn.checkpoint.manifest import load_json_file, parse_manifest, read_manifest, read_verified
from cairn.checkpoint.migrations import migrate
from cairn.checkpoint.paths import CheckpointLike
from cairn.checkpoint.safetensors_io import SafetensorsError, parse_safetensors
from cairn.checkpoint.storage import ReadHandle, Storage, StorageOptions, located
from cairn.checkpoint.tree import TreeError, join_arrays
from cairn.checkpoint.validate import check_class_agrees, check_policy_ids_agree
from cairn.errors import (
    CairnError,
    CheckpointClassMismatchError,
    CheckpointConfigError,
    CheckpointCorruptedError,
    CheckpointEnvError,
    CheckpointError,
    CheckpointFormatError,
    CheckpointNotFoundError,
    ConfigError,
    EnvError,
    RestoredSettingError,
    UnknownPolicyIdError,
)
from cairn.policy_ids import normalize_policy_ids

__all__ = [
    "CheckpointClassMismatchError",
    "get_checkpoint_info",
    "load_algorithm_state",
    "load_policy_state",
    "load_policy_states",
    "located",
    "read_state_files",
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
Handle = ReadHandle


def _consistent(root: Storage, read: Callable[[Handle], T]) -> T:
    """Run ``read`` on the directory opened once; retry when a writer replaced it meanwhile.

    Every file comes from the directory opened first, so a read sees one checkpoint whole. A
    writer that swaps in a new checkpoint deletes the old one; a read that loses files that
    way fails, and is retried on the new checkpoint (up to ``_READ_ATTEMPTS`` times).
    """
    for attempt in range(1, _READ_ATTEMPTS + 1):
        with root.open_reader() as handle:
            try:
                return read(handle)
            except (CheckpointNotFoundError, CheckpointCorruptedError):
                if attempt == _READ_ATTEMPTS or not handle.replaced():
                    raise
    raise AssertionError("unreachable")


def read_state_files(directory: Handle, manifest: Mapping[str, Any], arrays_name: str,
                     state_name: str | None = None, *, kind: str | None = None) -> Any:
    """One state tree of a checkpoint: ``state_name`` (JSON; default the manifest's state
    file) joined with the arrays of ``arrays_name`` (safetensors), both verified against
    ``manifest``, then migrated to the current format as ``kind`` (default the manifest's
    type)."""
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
    state = migrate(kind or manifest["type"], state, manifest["format_version"])
    if kind is None:
        check_class_agrees(state, manifest, directory.path)
    return state


def load_policy_state(checkpoint: CheckpointLike | Handle, *,
                      storage_options: StorageOptions = None) -> dict[str, Any]:
    """The verified, migrated state tree of the Policy checkpoint ``checkpoint`` (a path, a
    URL with ``storage_options`` for its file system, or an opened handle).

    The tree is checked as a file format, not as a policy: the policy layer checks that it
    describes a policy (:func:`cairn.policy.state_check.check_policy_state`) before building one.
    """
    if isinstance(checkpoint, ReadHandle):
        manifest = read_manifest(checkpoint, expected_type="Policy")
        _prefetch_states(checkpoint, manifest)
        return read_state_files(checkpoint, manifest, POLICY_ARRAYS_FILE)  # type: ignore[no-any-return]
    with located(checkpoint, storage_options) as root:
        return _consistent(root, load_policy_state)


def _prefetch_states(root: Handle, manifest: Mapping[str, Any], prefix: str = "") -> None:
    """Let an object store download a policy's state files in parallel (no-op locally)."""
    names = [manifest["state_file"], POLICY_ARRAYS_FILE]
    root.prefetch([(prefix + name, manifest["files"][name]["size"]) for name in names
                   if name in manifest["files"]], limit=_MAX_ARRAY_BYTES)


def _policy_manifests(root: Handle, manifest: Mapping[str, Any],
                      selected: Sequence[str]) -> dict[str, dict[str, Any]]:
    """The selected policies' manifests, each verified against the root manifest before it is
    trusted, then their state files downloaded together (object stores)."""
    names = [f"{POLICIES_DIR}/{pid}/{MANIFEST_FILE}" for pid in selected]
    root.prefetch([(name, manifest["files"][name]["size"]) for name in names], limit=_MAX_ARRAY_BYTES)
    manifests = {}
    for pid, name in zip(selected, names):
        try:
            data = read_verified(root, name, manifest)
            manifests[pid] = parse_manifest(data, root.path / f"{POLICIES_DIR}/{pid}", expected_type="Policy")
        except CheckpointError as exc:
            raise type(exc)(f"Policy {pid!r}: {exc}") from exc
    for pid, policy_manifest in manifests.items():
        _prefetch_states(root, policy_manifest, f"{POLICIES_DIR}/{pid}/")
    return manifests


def _load_policies(root: Handle, manifest: Mapping[str, Any], selected: Sequence[str]) -> dict[str, Any]:
    states = {}
    for pid, policy_manifest in _policy_manifests(root, manifest, selected).items():
        try:
            with root.subdir(f"{POLICIES_DIR}/{pid}") as sub:
                states[pid] = read_state_files(sub, policy_manifest, POLICY_ARRAYS_FILE)
        except CheckpointError as exc:
            raise type(exc)(f"Policy {pid!r}: {exc}") from exc
    return states


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


def load_policy_states(
    checkpoint: CheckpointLike, *, policy_ids: str | Sequence[str] | None = None,
    storage_options: StorageOptions = None,
) -> dict[str, dict[str, Any]]:
    """``{policy_id: state tree}`` of an Algorithm checkpoint's policies, reading only the files
    of ``policy_ids`` (all when None; a str is one policy ID).

    Raises :class:`~cairn.errors.UnknownPolicyIdError` for an ID the checkpoint lacks, and
    :class:`~cairn.errors.CheckpointFormatError` for a Policy checkpoint (read it with
    :func:`load_policy_state`).
    """

    def read(root: Handle) -> dict[str, dict[str, Any]]:
        manifest = read_manifest(root)
        if manifest["type"] != "Algorithm":
            raise CheckpointFormatError(
                f"{root.path} is a {manifest['type']} checkpoint, not an Algorithm checkpoint; "
                "policy_ids applies to Algorithm checkpoints. Load it without policy_ids."
            )
        return _load_policies(root, manifest, _select(manifest, policy_ids))

    with located(checkpoint, storage_options) as root:
        return _consistent(root, read)


def load_algorithm_state(
    checkpoint: CheckpointLike, *, policy_ids: str | Sequence[str] | None = None,
    storage_options: StorageOptions = None,
) -> dict[str, Any]:
    """The verified, migrated state tree of an Algorithm checkpoint, reading only the files of
    ``policy_ids`` (all when None; a str is one policy ID).

    The tree is the algorithm state plus ``components`` (``{name: tree}``) and ``policies``
    (``{policy_id: policy state tree}``, the selected ones). It is checked as a file format
    (its ``policy_ids`` are its manifest's); the algorithms layer checks that it describes an
    algorithm before building one.
    """

    def read(root: Handle) -> dict[str, Any]:
        manifest = read_manifest(root, expected_type="Algorithm")
        selected = _select(manifest, policy_ids)
        own = [manifest["state_file"], ALGORITHM_ARRAYS_FILE] + [
            f"{COMPONENTS_DIR}/{name}/{file}" for name in manifest.get("components") or []
            for file in (COMPONENT_STATE_FILE, COMPONENT_ARRAYS_FILE)]
        root.prefetch([(name, manifest["files"][name]["size"]) for name in own
                       if name in manifest["files"]], limit=_MAX_ARRAY_BYTES)
        state = read_state_files(root, manifest, ALGORITHM_ARRAYS_FILE)
        check_policy_ids_agree(state, manifest, root.path)
        state["components"] = {
            name: read_state_files(root, manifest, f"{COMPONENTS_DIR}/{name}/{COMPONENT_ARRAYS_FILE}",
                                   f"{COMPONENTS_DIR}/{name}/{COMPONENT_STATE_FILE}",
                                   kind=f"component:{name}")
            for name in manifest.get("components") or []
        }
        state["policies"] = _load_policies(root, manifest, selected)
        return state

    with located(checkpoint, storage_options) as root:
        return _consistent(root, read)


@contextlib.contextmanager
def restoring(where: Any) -> Iterator[None]:
    """Turn what building objects from a verified checkpoint state raises into
    ``CheckpointError`` subclasses naming ``where`` (the loader boundary). A
    ``CheckpointError`` raised by an object checking its own state (which knows no file) is
    given ``where`` in front of its message."""
    try:
        yield
    except CheckpointError as exc:
        if str(where) in str(exc):
            raise
        raise type(exc)(f"{where}: {exc}") from exc
    except CairnError as exc:
        if isinstance(exc.__cause__, CheckpointError):  # e.g. ConfigError from a refused reference
            raise type(exc.__cause__)(f"{where}: {exc}") from exc
        if isinstance(exc, RestoredSettingError):  # the restore's config, not the checkpoint's
            raise CheckpointConfigError(f"{where}: {exc}") from exc
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


def get_checkpoint_info(checkpoint: CheckpointLike, *,
                        storage_options: StorageOptions = None) -> dict[str, Any]:
    """What a checkpoint is, read from its manifest alone (no state is loaded): a path, or a
    URL (``s3://``, ``memory://``, ...; ``storage_options`` for its file system).

    Keys: ``type`` ("Algorithm" or "Policy"), ``checkpoint_version`` (str), ``format``,
    ``checkpoint_dir``, ``state_file``, ``policy_ids`` (None for a Policy checkpoint),
    ``cairn_version``, ``class``, ``created_at``, ``versions``, ``files``, ``native_model``,
    ``metadata`` (what ``save(..., metadata=...)`` stored; None when nothing was).
    """
    with located(checkpoint, storage_options) as root:
        manifest = _consistent(root, read_manifest)
        return {
            "type": manifest["type"],
            "checkpoint_version": manifest["format_version"],
            "format": manifest["format"],
            "checkpoint_dir": str(root),
            "state_file": f"{root}/{manifest['state_file']}",
            "policy_ids": manifest.get("policy_ids"),
            "cairn_version": manifest["versions"].get("cairn"),
            "class": manifest["class"],
            "created_at": manifest.get("created_at"),
            "versions": dict(manifest["versions"]),
            "files": dict(manifest["files"]),
            "native_model": manifest.get("native_model"),
            "metadata": manifest.get("metadata"),
        }
