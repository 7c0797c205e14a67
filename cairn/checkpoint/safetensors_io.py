"""A streaming safetensors writer and a strict, zero-copy safetensors reader.

The files are standard safetensors (https://github.com/huggingface/safetensors): an 8-byte
little-endian header length, a JSON header ``{name: {dtype, shape, data_offsets}}``, then the
raw little-endian bytes. Writing streams each array's memory straight to the file (no
serialisation copy); reading parses the header strictly and returns numpy views of one buffer.
"""

from __future__ import annotations

import json
import math
import struct
from collections.abc import Iterable, Mapping
from typing import IO, Any

import numpy as np
import xxhash

from cairn.alignment import ALIGNMENT, aligned, is_aligned

__all__ = ["write_safetensors", "parse_safetensors", "stored_dtype", "SafetensorsError"]

_DTYPES: dict[str, np.dtype[Any]] = {
    "BOOL": np.dtype(np.bool_),
    "U8": np.dtype("<u1"), "I8": np.dtype("<i1"),
    "U16": np.dtype("<u2"), "I16": np.dtype("<i2"), "F16": np.dtype("<f2"),
    "U32": np.dtype("<u4"), "I32": np.dtype("<i4"), "F32": np.dtype("<f4"),
    "U64": np.dtype("<u8"), "I64": np.dtype("<i8"), "F64": np.dtype("<f8"),
}
_NAMES = {dtype: name for name, dtype in _DTYPES.items()}
MAX_HEADER_BYTES = 100 << 20  # the reference implementation's limit


class SafetensorsError(ValueError):
    """The bytes are not a valid safetensors file."""


def stored_dtype(dtype: np.dtype[Any]) -> np.dtype[Any] | None:
    """The little-endian dtype ``dtype``'s arrays are written as, or None when the format has
    none for it (strings, objects, complex numbers, float128)."""
    dtype = dtype.newbyteorder("<") if dtype.byteorder == ">" else dtype
    return dtype if dtype in _NAMES else None


def write_safetensors(f: IO[bytes], arrays: Mapping[str, np.ndarray], hasher: Any) -> int:
    """Write ``arrays`` to the open binary file ``f``, feeding ``hasher``; return bytes written.

    The header is padded (with spaces, as the format allows) so that the data starts on an
    ``ALIGNMENT``-byte boundary, and arrays whose size is a multiple of ``ALIGNMENT`` come
    first: read into an aligned buffer or mapped from a page, those arrays are aligned in
    place and need no copy to serve as parameters (see :mod:`cairn.alignment`).
    """
    header: dict[str, Any] = {}
    views = []
    offset = 0
    order = sorted(arrays, key=lambda name: arrays[name].nbytes % ALIGNMENT != 0)  # stable
    for name in order:
        array = arrays[name]
        # np.ascontiguousarray would turn 0-d arrays (Adam's step) into 1-d ones.
        arr = array if array.flags.c_contiguous else array.copy(order="C")
        dtype = stored_dtype(arr.dtype)
        if dtype is None:
            raise SafetensorsError(f"array {name!r} has unsupported dtype {arr.dtype}")
        arr = arr.astype(dtype, copy=False)
        header[name] = {"dtype": _NAMES[dtype], "shape": list(arr.shape),
                        "data_offsets": [offset, offset + arr.nbytes]}
        offset += arr.nbytes
        views.append(memoryview(arr.reshape(-1)).cast("B") if arr.nbytes else b"")  # type: ignore[arg-type]
    header_bytes = json.dumps(header, separators=(",", ":")).encode()
    header_bytes += b" " * (-(8 + len(header_bytes)) % ALIGNMENT)
    prefix = struct.pack("<Q", len(header_bytes)) + header_bytes
    f.write(prefix)
    hasher.update(prefix)
    for view in views:
        f.write(view)
        hasher.update(view)
    return len(prefix) + offset


def parse_safetensors(buffer: bytearray | bytes | memoryview) -> dict[str, np.ndarray]:
    """Parse a whole safetensors file held in ``buffer`` into numpy arrays viewing it.

    Every array returned starts on an ``ALIGNMENT``-byte boundary: arrays that do not in
    ``buffer`` (files of other writers or of earlier cairn versions) are copied.

    Rejects: short files, oversized or non-JSON headers, unknown dtypes, shapes that do not
    match their byte ranges, ranges outside the data, overlapping or gapped ranges.
    """
    if len(buffer) < 8:
        raise SafetensorsError(f"file has {len(buffer)} bytes, fewer than the 8-byte header size")
    (header_len,) = struct.unpack_from("<Q", buffer, 0)
    if header_len > MAX_HEADER_BYTES or 8 + header_len > len(buffer):
        raise SafetensorsError(
            f"header claims {header_len} bytes, but the file has {len(buffer)} bytes in all"
        )
    try:
        header = json.loads(bytes(buffer[8 : 8 + header_len]))
    except (ValueError, RecursionError) as exc:
        raise SafetensorsError(f"header is not valid JSON: {exc}") from None
    if not isinstance(header, dict):
        raise SafetensorsError("header is not a JSON object")
    header.pop("__metadata__", None)
    data_start = 8 + header_len
    data_len = len(buffer) - data_start
    spans = []
    for name, info in header.items():
        if not isinstance(info, dict) or set(info) != {"dtype", "shape", "data_offsets"}:
            raise SafetensorsError(f"entry {name!r} is malformed")
        dtype = _DTYPES.get(info["dtype"]) if isinstance(info["dtype"], str) else None
        if dtype is None:
            raise SafetensorsError(f"entry {name!r} has unsupported dtype {info['dtype']!r}")
        shape, offsets = info["shape"], info["data_offsets"]
        if not (isinstance(shape, list) and len(shape) <= 32 and all(
                type(d) is int and d >= 0 for d in shape)):
            raise SafetensorsError(f"entry {name!r} has invalid shape {shape!r:.100}")
        if not (isinstance(offsets, list) and len(offsets) == 2 and all(
                type(o) is int for o in offsets)):
            raise SafetensorsError(f"entry {name!r} has invalid data_offsets {offsets!r:.100}")
        begin, end = offsets
        count = math.prod(shape)
        if not 0 <= begin <= end <= data_len:
            raise SafetensorsError(f"entry {name!r} has bytes [{begin}, {end}) outside the data")
        if (end - begin) != count * dtype.itemsize:
            raise SafetensorsError(
                f"entry {name!r} has shape {shape} of {dtype} but {end - begin} bytes"
            )
        spans.append((begin, end, name, dtype, shape))
    spans.sort()
    position = 0
    for begin, end, name, _, _ in spans:
        if begin != position:
            raise SafetensorsError(f"entry {name!r} overlaps or leaves a gap at byte {begin}")
        position = end
    if position != data_len:
        raise SafetensorsError(f"{data_len - position} trailing bytes after the last entry")
    out = {}
    for begin, end, name, dtype, shape in spans:
        count = (end - begin) // dtype.itemsize
        view = np.frombuffer(buffer, dtype=dtype, count=count, offset=data_start + begin)
        out[name] = (view if is_aligned(view) else aligned(view)).reshape(shape)
    return out


def new_hasher() -> Any:
    """The hasher used for every checkpoint file."""
    return xxhash.xxh3_128()


def file_entry(chunks: Iterable[Any]) -> dict[str, Any]:
    """The ``{"size", "hash"}`` a manifest lists for a file holding the bytes of ``chunks``."""
    hasher, size = new_hasher(), 0
    for chunk in chunks:
        hasher.update(chunk)
        size += len(chunk)
    return {"size": size, "hash": hasher.hexdigest()}
