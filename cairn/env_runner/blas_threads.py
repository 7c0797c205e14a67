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
from collections.abc import Iterator
from typing import Any

__all__ = ["single_threaded_blas"]

_CONTROLLER: Any = None


@contextlib.contextmanager
def single_threaded_blas() -> Iterator[None]:
    """Limit the BLAS libraries loaded in this process to one thread for the block (about
    10 us to enter and leave; the libraries are looked up once per process)."""
    global _CONTROLLER
    if _CONTROLLER is None:
        from threadpoolctl import ThreadpoolController

        _CONTROLLER = ThreadpoolController()
    with _CONTROLLER.limit(limits=1, user_api="blas"):
        yield
