"""Writing a checkpoint's files into a local directory, each fsynced, with its size and hash
recorded for the manifest; and the same entries computed without writing
(:func:`state_file_entries`, which incremental saves compare with an earlier manifest)."""

from __future__ import annotations

import contextlib
import contextvars
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from cairn.checkpoint.safetensors_io import file_entry, new_hasher, stored_dtype, write_safetensors
from cairn.checkpoint.tree import TreeError, split_arrays
from cairn.errors import CheckpointError

__all__ = ["Files", "HashingFile", "UnsaveableStateError", "encode_state", "split_state", "staging",
           "write_json_file", "write_state_files", "state_file_entries"]

#: ``{relative path: {"size": int, "hash": str}}``, a manifest's ``files``.
Files = dict[str, dict[str, Any]]
#: False while a checkpoint is staged locally for an upload: the staged files are read back
#: at once and never are the checkpoint themselves, so making them durable would be wasted.
_DURABLE: contextvars.ContextVar[bool] = contextvars.ContextVar("cairn_durable_writes", default=True)


@contextlib.contextmanager
def staging() -> Iterator[None]:
    """Within this block (in this thread), files are written without fsync: for a local
    staging copy of a checkpoint that is uploaded to an object store."""
    token = _DURABLE.set(False)
    try:
        yield
    finally:
        _DURABLE.reset(token)


class HashingFile:
    """Writes a file, fsyncs it, and records its size and hash in ``files``."""

    def __init__(self, root: Path, name: str, files: Files) -> None:
        self.path, self.name, self.files = root / name, name, files
        self.hasher = new_hasher()

    def __enter__(self) -> HashingFile:
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
                if _DURABLE.get():
                    os.fsync(self.f.fileno())
                self.files[self.name] = {"size": self.f.tell(), "hash": self.hasher.hexdigest()}
        finally:
            self.f.close()


def write_json_file(root: Path, name: str, data: Any, files: Files, *, compact: bool = False) -> None:
    """Write ``data`` as the JSON file ``root/name``, recording its size and hash in ``files``.
    Indented for people to read (manifests), or ``compact`` (state trees: their JSON is as
    large as their number of values, and the compact encoder is several times faster)."""
    text = _json_bytes(data, compact=compact)
    with HashingFile(root, name, files) as out:
        out.write(text)


def write_state_files(root: Path, json_name: str, arrays_name: str, state: Any, files: Files) -> None:
    """Write a state tree as ``json_name`` (its JSON values) and ``arrays_name`` (its arrays,
    safetensors), recording both in ``files``."""
    text, arrays = encode_state(state)  # before any file: a state it refuses writes nothing
    with HashingFile(root, arrays_name, files) as out:
        write_safetensors(out.f, arrays, out.hasher)
    with HashingFile(root, json_name, files) as out:
        out.write(text)


class UnsaveableStateError(CheckpointError):
    """A state tree holds a value that a checkpoint cannot store; ``reason`` names it and where
    it is (``"dict key 1 at 'config/env_config' is not a str"``)."""

    def __init__(self, reason: str) -> None:
        super().__init__(f"Cannot save this state: {reason}.")
        self.reason = reason


def split_state(state: Any) -> tuple[Any, dict[str, Any]]:
    """A state tree's JSON tree (arrays replaced by references) and its arrays, by name."""
    try:
        return split_arrays(state)
    except TreeError as exc:
        raise UnsaveableStateError(str(exc)) from exc


def encode_state(state: Any) -> tuple[bytes, dict[str, np.ndarray]]:
    """A state tree as a save stores it: its compact JSON (arrays replaced by references) and
    its arrays, by name. UnsaveableStateError for the first value a checkpoint cannot store:
    this is the one test of what a save takes, which ``AlgorithmConfig.validate()`` also runs
    on each setting, so that such a config fails at ``build()`` rather than at its first save."""
    tree, arrays = split_state(state)
    for name, array in arrays.items():
        if stored_dtype(array.dtype) is None:
            raise UnsaveableStateError(
                f"array at {name!r} has dtype {array.dtype}, which safetensors cannot store (it "
                "stores bool, int8 to int64, uint8 to uint64, float16, float32 and float64)")
    try:
        return _json_bytes(tree, compact=True), arrays
    except ValueError as exc:  # an int with more digits than Python converts to a str
        raise UnsaveableStateError(str(exc)) from exc


class _Discard:
    """A binary sink that keeps nothing (hashing a file without writing it)."""

    def write(self, data: Any) -> int:
        return len(data)


def state_file_entries(state: Any, json_name: str, arrays_name: str) -> Files:
    """The ``{"size", "hash"}`` entries :func:`write_state_files` would record for ``state``,
    computed without writing."""
    text, arrays = encode_state(state)
    entries: Files = {json_name: file_entry([text])}
    hasher = new_hasher()
    size = write_safetensors(_Discard(), arrays, hasher)  # type: ignore[arg-type]
    entries[arrays_name] = {"size": size, "hash": hasher.hexdigest()}
    return entries


def _json_bytes(data: Any, *, compact: bool) -> bytes:
    if compact:  # json's C encoder; indent= makes json fall back to its Python encoder
        return json.dumps(data, separators=(",", ":"), allow_nan=False).encode()
    return json.dumps(data, indent=1, allow_nan=False).encode()
