"""numpy's BLAS on one thread while an env runner acts.

Acting runs the networks' numpy paths on a few observations per step. OpenBLAS (numpy's BLAS)
splits even such small products over every core, and when the cores are busy (the learner, other
runners, other processes) each call waits for a thread to be scheduled: a batch of 8 rows through
256x256 layers took 7-10 ms instead of 70-85 us on a loaded 2-core machine (bench/README.md,
connect-four self-play). One thread is the right size for these calls; torch's own threads are
set separately (``config.torch_num_threads``).
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from typing import Any

__all__ = ["single_threaded_blas"]

#: ``(len(sys.modules) when it was made, threadpoolctl.ThreadpoolController)``.
_CONTROLLER: tuple[int, Any] | None = None


@contextlib.contextmanager
def single_threaded_blas() -> Iterator[None]:
    """Limit the BLAS libraries loaded in this process to one thread for the block (about
    10 us to enter and leave). The libraries are looked up again (~0.4 ms) when modules were
    imported since the last look, as an import may load another BLAS (scipy's, torch's)."""
    global _CONTROLLER
    if _CONTROLLER is None or _CONTROLLER[0] != len(sys.modules):
        from threadpoolctl import ThreadpoolController

        _CONTROLLER = (len(sys.modules), ThreadpoolController())
    with _CONTROLLER[1].limit(limits=1, user_api="blas"):
        yield
