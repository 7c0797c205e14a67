"""Memory alignment of arrays that become network parameters or optimizer state.

Math libraries pick their kernels by the address of their operands. On AVX-512 machines, MKL's
matrix-vector product (``torch.addmm`` with one input row) returns different low bits for a
weight matrix that is not 16-byte aligned than for the same values 64-byte aligned, which is
what torch's own allocator gives every tensor. A restored policy whose parameters were left
where a file buffer happened to put them therefore trained differently from the original,
although every value was equal. Arrays that a checkpoint hands over as storage are kept on
64-byte boundaries, or copied onto them, so that restored state computes what it computed
before.
"""

from __future__ import annotations

import numpy as np

__all__ = ["ALIGNMENT", "is_aligned", "empty_aligned", "aligned"]

#: Bytes; the alignment of torch's CPU allocator and the width of an AVX-512 register.
ALIGNMENT = 64


def is_aligned(array: np.ndarray) -> bool:
    """True when ``array``'s data starts on an :data:`ALIGNMENT`-byte boundary (or is empty)."""
    return array.nbytes == 0 or array.ctypes.data % ALIGNMENT == 0


def empty_aligned(nbytes: int) -> np.ndarray:
    """An uninitialised, writable ``uint8`` buffer of ``nbytes`` starting on a boundary."""
    raw = np.empty(nbytes + ALIGNMENT, dtype=np.uint8)
    start = -raw.ctypes.data % ALIGNMENT
    return raw[start : start + nbytes]


def aligned(array: np.ndarray, *, copy: bool = False) -> np.ndarray:
    """``array`` itself when it is C-contiguous, writable and aligned (and ``copy`` is false);
    else an aligned, C-contiguous, writable copy."""
    if not copy and array.flags.c_contiguous and array.flags.writeable and is_aligned(array):
        return array
    out = empty_aligned(array.nbytes).view(array.dtype).reshape(array.shape)
    np.copyto(out, array, casting="no")
    return out
