"""Saves written in the background: ``Algorithm.save(path, blocking=False)``.

The caller's thread checks the target and takes a snapshot of the state
(``get_state(copy=True)``), so that training after ``save`` returns never reaches the
checkpoint; one background thread writes it. The rules:

* **At most one write in flight.** A save (blocking or not) while a background write is
  running waits for that write to finish, then snapshots and writes its own: no save is
  dropped or merged, checkpoints are written in the order they were asked for, and at most one
  snapshot is held in memory besides the live state. Saving more often than a write takes
  therefore slows training down to the writer's speed.
* **Errors are not lost.** A failed write sets the exception of its Future, and is raised
  again, once, by the next ``save()`` or ``stop()`` as :class:`~cairn.errors.BackgroundSaveError`
  (its ``__cause__`` is the original error), whether or not the Future was looked at.
* **stop() flushes**: it waits for the write in flight. So does the interpreter at exit.

The writer thread runs no torch operation of its own (it writes numpy arrays and JSON), so
training's torch thread settings and numerics are unchanged; only a policy's native model
export (``export_native_model_files``) traces torch models there, on copies of the policies
built from the snapshot.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor

from cairn.errors import BackgroundSaveError

__all__ = ["BackgroundSaver"]


class BackgroundSaver:
    """One background writer thread (started on first use) and the failure it owes the caller.

    >>> saver = BackgroundSaver()
    >>> saver.submit(lambda: "ckpt", "ckpt").result()
    'ckpt'
    >>> saver.flush()
    """

    def __init__(self) -> None:
        self._executor: ThreadPoolExecutor | None = None
        self._in_flight: Future[str] | None = None
        self._failure: tuple[str, BaseException] | None = None
        self._lock = threading.Lock()

    def wait(self) -> None:
        """Wait for the write in flight, if any; then raise (once) a failure of an earlier
        background write that no call has raised yet."""
        with self._lock:
            in_flight = self._in_flight
        if in_flight is not None:
            in_flight.exception()  # waits; the failure is recorded by _write
        with self._lock:
            failure, self._failure = self._failure, None
        if failure is not None:
            location, cause = failure
            raise BackgroundSaveError(
                f"The background save to {location} (save(blocking=False)) failed: {cause}. "
                f"Nothing at {location} was changed: the checkpoint there, if any, is the "
                "previous one. Fix the cause and save again (the algorithm is unchanged)."
            ) from cause

    def submit(self, write: Callable[[], str], location: str) -> Future[str]:
        """Run ``write()`` (which returns the saved location) in the writer thread and return
        its Future. Call :meth:`wait` first: one write at a time."""
        with self._lock:
            if self._in_flight is not None and not self._in_flight.done():
                raise RuntimeError("BackgroundSaver.submit: a write is in flight; call wait() first.")
            if self._executor is None:
                self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="cairn-save")
            future = self._executor.submit(self._write, write, location)
            self._in_flight = future
        return future

    def _write(self, write: Callable[[], str], location: str) -> str:
        try:
            return write()
        except BaseException as exc:
            with self._lock:
                self._failure = (location, exc)
            raise

    def flush(self) -> None:
        """Wait for the write in flight and stop the thread (a later submit starts another);
        raise a failure no call has raised yet, as :meth:`wait` does."""
        try:
            self.wait()
        finally:
            with self._lock:
                executor, self._executor, self._in_flight = self._executor, None, None
            if executor is not None:
                executor.shutdown(wait=True)
