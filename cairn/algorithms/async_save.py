"""Saves written in the background: ``Algorithm.save(path, blocking=False)``.

The caller's thread checks the target and takes a snapshot of the state
(``get_state(copy=True)``), so that training after ``save`` returns never reaches the
checkpoint; one background thread writes it. The rules:

* **At most one write in flight.** A save (blocking or not) while a background write is
  running waits for that write to finish, then snapshots and writes its own: no save is
  dropped or merged, checkpoints are written in the order they were asked for, and at most one
  snapshot is held in memory besides the live state. Saving more often than a write takes
  therefore slows training down to the writer's speed.
* **Errors are not lost, nor raised twice.** A failed write sets the exception of its Future.
  If the caller has not received it from the Future (``result()`` raising it, or
  ``exception()`` returning it), the next ``save()`` or ``stop()`` raises it, once, as
  :class:`~cairn.errors.BackgroundSaveError` (its ``__cause__`` is the original error). An
  error already delivered by the Future is the caller's to handle: later saves go ahead.
* **stop() flushes**: it waits for the write in flight. So does the interpreter at exit.

The writer thread runs no torch operation of its own (it writes numpy arrays and JSON), so
training's torch thread settings and numerics are unchanged; only a policy's native model
export (``export_native_model_files``) traces torch models there, on copies of the policies
built from the snapshot.
"""

from __future__ import annotations

import concurrent.futures
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from cairn.checkpoint.save_future import SaveFuture
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
        self._in_flight: SaveFuture | None = None
        self._failure: tuple[str, BaseException, SaveFuture] | None = None
        self._lock = threading.Lock()

    def wait(self) -> None:
        """Wait for the write in flight, if any; then raise (once) a failure of an earlier
        background write that neither a call nor its Future has delivered yet."""
        with self._lock:
            in_flight = self._in_flight
        if in_flight is not None:  # not in_flight.exception(), which would count as delivered
            concurrent.futures.wait([in_flight])
        with self._lock:
            failure, self._failure = self._failure, None
        if failure is not None:
            location, cause, future = failure
            future.delivered()  # told to whoever passes it on (CheckpointManager): raised once
            raise BackgroundSaveError(
                f"The background save to {location} (save(blocking=False)) failed: {cause} "
                "(that error says what became of the checkpoint there before). Fix the cause "
                "and save again (the algorithm is unchanged)."
            ) from cause

    def submit(self, write: Callable[[], str], location: str) -> SaveFuture:
        """Run ``write()`` (which returns the saved location) in the writer thread and return
        its Future. Call :meth:`wait` first: one write at a time."""
        with self._lock:
            if self._in_flight is not None and not self._in_flight.done():
                raise RuntimeError("BackgroundSaver.submit: a write is in flight; call wait() first.")
            if self._executor is None:
                self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="cairn-save")
            future = SaveFuture(self._delivered)
            self._executor.submit(self._write, write, location, future)
            self._in_flight = future
        return future

    def _write(self, write: Callable[[], str], location: str, future: SaveFuture) -> None:
        if not future.set_running_or_notify_cancel():
            return
        try:
            saved = write()
        except BaseException as exc:
            with self._lock:
                self._failure = (location, exc, future)
            future.set_exception(exc)
        else:
            future.set_result(saved)

    def _delivered(self, future: SaveFuture) -> None:
        """``future`` handed its exception to the caller: it is no longer owed."""
        with self._lock:
            if self._failure is not None and self._failure[2] is future:
                self._failure = None

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
