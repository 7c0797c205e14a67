"""The manifest: what a checkpoint is, which versions wrote it, and every file's size and hash."""

from __future__ import annotations

import contextlib
import datetime
import json
import math
import os
import platform
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Union

from cairn.checkpoint.dirhandle import CheckpointDir
from cairn.checkpoint.format import (
    COMPONENTS_DIR,
    FORMAT_NAME,
    FORMAT_VERSION,
    HASH_ALGORITHM,
    MANIFEST_FILE,
    MAX_JSON_BYTES,
    MAX_MANIFEST_BYTES,
    POLICIES_DIR,
)
from cairn.checkpoint.migrations import parse_version
from cairn.checkpoint.safetensors_io import file_entry
from cairn.checkpoint.storage.base import ReadHandle
from cairn.errors import (
    CheckpointCorruptedError,
    CheckpointError,
    CheckpointFormatError,
    CheckpointNotFoundError,
    CheckpointStorageError,
    UncommittedCheckpointError,
    UnsafeCheckpointError,
    UnsupportedCheckpointVersionError,
)
from cairn.policy_ids import validate_policy_id
from cairn.registry import check_class_reference_form

__all__ = ["build_manifest", "check_metadata", "parse_manifest", "read_manifest", "read_verified",
           "check_relative_name", "library_versions"]

CHECKPOINT_TYPES = ("Algorithm", "Policy")
#: The largest ``metadata`` a manifest takes, as JSON.
MAX_METADATA_BYTES = 1 << 20
_MAX_METADATA_DEPTH = 32


def library_versions() -> dict[str, str]:
    """Versions of cairn and the libraries whose behaviour a checkpoint depends on."""
    import gymnasium
    import numpy
    import torch

    from cairn._version import __version__

    return {
        "cairn": __version__,
        "python": platform.python_version(),
        "torch": torch.__version__,
        "gymnasium": gymnasium.__version__,
        "numpy": numpy.__version__,
    }


def build_manifest(
    *, checkpoint_type: str, class_reference: str, state_file: str,
    files: Mapping[str, Mapping[str, Any]], policy_ids: list[str] | None,
    extra: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The manifest document of a checkpoint being written."""
    return {
        "format": FORMAT_NAME,
        "format_version": FORMAT_VERSION,
        "type": checkpoint_type,
        "class": class_reference,
        "policy_ids": policy_ids,
        "state_file": state_file,
        "created_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "versions": library_versions(),
        "hash_algorithm": HASH_ALGORITHM,
        "files": {name: dict(entry) for name, entry in sorted(files.items())},
        **(extra or {}),
    }


def check_metadata(metadata: Any) -> dict[str, Any] | None:
    """``metadata`` as a manifest stores it (format version 2: ``save(..., metadata=...)``):
    None, or a copy of a dict of JSON data (str keys; str, int, finite float, bool, None, lists
    and dicts as values), at most 1 MiB as JSON. Anything else is refused with a
    ``CheckpointError`` naming the offending value, before anything is written.

    >>> check_metadata({"note": "after the lr drop", "eval": [1.5, 2]})
    {'note': 'after the lr drop', 'eval': [1.5, 2]}
    """
    if metadata is None:
        return None

    def check(value: Any, where: str, depth: int) -> None:
        if depth > _MAX_METADATA_DEPTH:
            raise CheckpointError(f"Checkpoint metadata is nested more than {_MAX_METADATA_DEPTH} "
                                  f"levels deep at {where}; flatten it.")
        if isinstance(value, dict):
            for key, item in value.items():
                if not isinstance(key, str):
                    raise CheckpointError(
                        f"Checkpoint metadata key {key!r:.60} at {where} is a {type(key).__name__}; "
                        f"JSON object keys are str: use str({key!r:.40}).")
                check(item, f"{where}[{key!r:.40}]", depth + 1)
        elif isinstance(value, list):
            for index, item in enumerate(value):
                check(item, f"{where}[{index}]", depth + 1)
        elif isinstance(value, float):
            if not math.isfinite(value):
                raise CheckpointError(f"Checkpoint metadata {where} is {value}; JSON has no NaN or "
                                      "infinity. Store None or a string instead.")
        elif not (value is None or isinstance(value, (str, bool, int))):
            raise CheckpointError(
                f"Checkpoint metadata {where} is a {type(value).__name__} ({value!r:.60}); metadata "
                "must be JSON data: dicts with str keys, lists, str, int, float, bool, None. "
                "Convert it (float(x), x.tolist(), list(t), str(path)).")

    if not isinstance(metadata, dict):
        raise CheckpointError(f"Checkpoint metadata must be a dict of JSON data, got "
                              f"{type(metadata).__name__} ({metadata!r:.60}).")
    check(metadata, "metadata", 0)
    text = json.dumps(metadata, allow_nan=False)
    if len(text.encode()) > MAX_METADATA_BYTES:
        raise CheckpointError(f"Checkpoint metadata is {len(text.encode())} bytes as JSON, more than "
                              f"{MAX_METADATA_BYTES}; store large data as files of your own.")
    return json.loads(text)  # type: ignore[no-any-return]


def check_relative_name(name: Any) -> None:
    """Refuse (``UnsafeCheckpointError``) a manifest file name that leaves the checkpoint
    directory (manifests list every file, so this runs once per file on every read)."""
    if not isinstance(name, str) or not name or len(name) > 1024:
        raise UnsafeCheckpointError(f"Manifest lists an invalid file name {name!r:.100}.")
    bad = ("\x00" in name or "\\" in name or name.startswith("/") or ":" in name)
    if bad or any(part in ("", ".", "..") for part in name.split("/")):
        raise UnsafeCheckpointError(
            f"Manifest lists file {name!r:.100}, which escapes the checkpoint directory; "
            "file names must be relative paths without '..', drive letters or NUL bytes."
        )


def _load_json(data: bytes | bytearray | memoryview, what: str) -> Any:
    def reject_constant(value: str) -> None:
        raise ValueError(f"non-standard JSON constant {value}")

    def finite_float(text: str) -> float:
        # 1e999 parses to inf: a way around the ban on non-standard constants.
        value = float(text)
        if not math.isfinite(value):
            raise ValueError(f"number {text:.40} does not fit a float")
        return value

    try:
        text = data.tobytes() if isinstance(data, memoryview) else data
        return json.loads(text, parse_constant=reject_constant, parse_float=finite_float)
    except RecursionError:
        raise CheckpointCorruptedError(f"{what} is nested too deeply to be a cairn file.") from None
    except (ValueError, UnicodeDecodeError) as exc:  # incl. ints over sys.get_int_max_str_digits()
        raise CheckpointCorruptedError(f"{what} is not valid JSON: {exc}.") from None


Directory = Union[Path, ReadHandle]


@contextlib.contextmanager
def _opened(directory: Directory) -> Iterator[ReadHandle]:
    if not isinstance(directory, Path):
        yield directory
        return
    with CheckpointDir.open(directory) as handle:
        yield handle


def read_manifest(directory: Directory, *, expected_type: str | None = None) -> dict[str, Any]:
    """Read and check the manifest of the checkpoint in ``directory`` (no other file is read)."""
    with _opened(directory) as handle:
        return parse_manifest(read_manifest_bytes(handle), handle.path, expected_type=expected_type)


def read_manifest_bytes(directory: Directory) -> bytes | memoryview:
    """The bytes of the manifest of the checkpoint in ``directory``, unchecked
    (:func:`parse_manifest` checks them)."""
    with _opened(directory) as handle:
        try:
            return handle.read_file(MANIFEST_FILE, "a manifest", expected_size=None,
                                    limit=MAX_MANIFEST_BYTES)
        except (UncommittedCheckpointError, CheckpointStorageError):
            raise
        except CheckpointNotFoundError:
            raise CheckpointNotFoundError(
                f"{handle.path} is not a cairn checkpoint: it has no {MANIFEST_FILE}. Pass the "
                "directory that Algorithm.save() or Policy.export_checkpoint() wrote."
                + _newest_inside(handle.path)
            ) from None


def _article(word: str) -> str:
    """``"an"`` before a vowel (an Algorithm checkpoint), else ``"a"`` (a Policy checkpoint)."""
    return "an" if word[:1].lower() in "aeiou" else "a"


def _newest_inside(path: Any) -> str:
    """For a local folder of ``checkpoint_<N>`` checkpoints (a CheckpointManager root), or one
    whose ``checkpoints/`` holds them (a ``cairn train`` run directory), the sentence naming the
    newest to pass; else ``""``. Only names and manifests' presence are looked at."""
    for root in (Path(path), Path(path) / "checkpoints") if isinstance(path, (str, Path)) else ():
        try:
            names = os.listdir(root)
        except OSError:
            continue
        found = [(int(match.group(1)), name) for name in names
                 if (match := re.fullmatch(r"checkpoint_(\d{6,})", name))
                 and (root / name / MANIFEST_FILE).is_file()]
        if found:
            return f" It holds checkpoints: pass one of them, such as the newest, {root / max(found)[1]}."
    return ""


def parse_manifest(data: bytes | memoryview, directory: Any, *,
                   expected_type: str | None = None) -> dict[str, Any]:
    """Check and return the manifest held in ``data``, the bytes of ``directory``'s manifest
    (already read, e.g. verified against a root manifest)."""
    path = directory / MANIFEST_FILE
    return _check_manifest(_load_json(data, str(path)), path, directory, expected_type)


def _check_manifest(manifest: Any, path: Any, directory: Any, expected_type: str | None) -> dict[str, Any]:
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT_NAME:
        found = manifest.get("format") if isinstance(manifest, dict) else type(manifest).__name__
        raise CheckpointFormatError(
            f"{path} is not a cairn checkpoint manifest: format is {found!r:.60}, expected "
            f"{FORMAT_NAME!r}."
        )
    version = manifest.get("format_version")
    if parse_version(version) > parse_version(FORMAT_VERSION):
        raise UnsupportedCheckpointVersionError(
            f"{path} has format version {version}, newer than {FORMAT_VERSION}, the newest this "
            "cairn reads. Upgrade cairn (pip install -U cairn-rl) to load it."
        )
    kind = manifest.get("type")
    if kind not in CHECKPOINT_TYPES:
        raise CheckpointFormatError(f"{path} has type {kind!r:.40}; expected one of {CHECKPOINT_TYPES}.")
    if expected_type is not None and kind != expected_type:
        raise CheckpointFormatError(
            f"{directory} is {_article(kind)} {kind} checkpoint, but {_article(expected_type)} "
            f"{expected_type} checkpoint is needed here."
            + (" Use Policy.from_checkpoint() for a Policy checkpoint." if kind == "Policy" else "")
        )
    for key, types in (("class", str), ("state_file", str), ("files", dict), ("versions", dict)):
        if not isinstance(manifest.get(key), types):
            raise CheckpointFormatError(f"{path}: key {key!r} is missing or has the wrong type.")
    check_class_reference_form(manifest["class"], what=f"{path}: the manifest's class")
    if manifest.get("hash_algorithm") != HASH_ALGORITHM:
        raise CheckpointFormatError(
            f"{path}: hash_algorithm {manifest.get('hash_algorithm')!r:.40} is not {HASH_ALGORITHM!r}."
        )
    if not isinstance(manifest.get("format_version"), str):
        raise CheckpointFormatError(f"{path}: key 'format_version' is missing or not a str.")
    for name, entry in manifest["files"].items():
        check_relative_name(name)
        if not (isinstance(entry, dict) and type(entry.get("size")) is int and entry["size"] >= 0
                and isinstance(entry.get("hash"), str)):
            raise CheckpointFormatError(f"{path}: entry for {name!r:.100} needs an int size and a hash.")
    if manifest["state_file"] not in manifest["files"]:
        raise CheckpointFormatError(f"{path}: state_file {manifest['state_file']!r:.100} "
                                    "is not listed in files.")
    policy_ids = manifest.get("policy_ids")
    if kind == "Algorithm":
        if not isinstance(policy_ids, list):
            raise CheckpointFormatError(f"{path}: policy_ids must be a list.")
        lowered: set[str] = set()
        for pid in policy_ids:
            if not validate_policy_id(pid):
                raise UnsafeCheckpointError(
                    f"{path} lists policy ID {pid!r:.80}, which is not a safe directory name."
                )
            if pid.lower() in lowered:
                raise CheckpointFormatError(f"{path} lists policy ID {pid!r} twice (ignoring case).")
            lowered.add(pid.lower())
            if f"{POLICIES_DIR}/{pid}/{MANIFEST_FILE}" not in manifest["files"]:
                raise CheckpointFormatError(
                    f"{path} lists policy {pid!r}, but not its manifest "
                    f"{POLICIES_DIR}/{pid}/{MANIFEST_FILE} among its files."
                )
        components = manifest.get("components", [])
        if not isinstance(components, list):
            raise CheckpointFormatError(f"{path}: 'components' must be a list of names.")
        for name in components:
            if not validate_policy_id(name):
                raise UnsafeCheckpointError(
                    f"{path} lists component {name!r:.80}, which is not a safe directory name."
                )
    elif policy_ids is not None:
        raise CheckpointFormatError(f"{path}: a Policy checkpoint has policy_ids null.")
    _check_component_files(manifest, path)
    if not isinstance(manifest.get("metadata", {}), (dict, type(None))):
        raise CheckpointFormatError(f"{path}: 'metadata' must be an object (or null).")
    return manifest


def _check_component_files(manifest: dict[str, Any], path: Any) -> None:
    """Refuse listed files under ``components/<name>/`` whose ``name`` the manifest's
    ``components`` does not list: nothing would read them, so a manifest whose list was damaged
    (one flipped byte in the key ``"components"`` drops the list, which defaults to none) would
    load without the component (a replay buffer) that its hashed files still hold."""
    listed = manifest.get("components", []) if manifest.get("type") == "Algorithm" else []
    for name in manifest["files"]:
        parts = name.split("/")
        if parts[0] == COMPONENTS_DIR and len(parts) > 2 and parts[1] not in listed:
            raise CheckpointFormatError(
                f"{path} lists the file {name!r:.120}, but not its component {parts[1]!r:.80} among its "
                f"'components' ({listed!r:.200}): the manifest is damaged; restore the checkpoint "
                "from a copy, or load an older checkpoint of the run.")


def read_verified(directory: Directory, name: str, manifest: Mapping[str, Any], *,
                  limit: int = MAX_JSON_BYTES) -> memoryview:
    """Read one listed file, checking that it is a regular file inside the checkpoint with the
    manifest's size (before reading) and hash (after)."""
    entry = manifest["files"].get(name)
    with _opened(directory) as handle:
        if entry is None:
            raise CheckpointFormatError(f"{handle.path}: {name} is not listed in the manifest.")
        check_relative_name(name)
        buffer = handle.read_file(name, f"checkpoint file {name}", expected_size=entry["size"],
                                  limit=limit)
        if file_entry([buffer])["hash"] != entry["hash"]:
            raise CheckpointCorruptedError(
                f"{handle.path / name} does not match its hash in the manifest; the file is "
                "corrupted or was modified. Restore it from a good copy."
            )
    return buffer


def load_json_file(directory: Directory, name: str, manifest: Mapping[str, Any]) -> Any:
    """Read a listed JSON file with verification."""
    data = read_verified(directory, name, manifest)
    shown = (directory if isinstance(directory, Path) else directory.path) / name
    return _load_json(data, str(shown))
