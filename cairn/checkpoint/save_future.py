"""The Future of a background save, which knows when it has handed its error to the caller.

``Algorithm.save(path, blocking=False)`` and ``CheckpointManager.save(..., blocking=False)``
return a :class:`SaveFuture`. A failed write must reach the caller once: through the Future if
the caller asks it (``result()`` raises the error, ``exception()`` returns it), else through the
next ``save()`` or ``stop()``. The Future tells its owner when it has delivered the error, so
that the owner does not raise it a second time.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future

__all__ = ["SaveFuture"]


class SaveFuture(Future[str]):
    """A ``concurrent.futures.Future`` of a saved location that calls ``on_delivered(self)``
    once its exception has reached the caller.

    >>> delivered = []
    >>> future = SaveFuture(lambda f: delivered.append(True))
    >>> future.set_exception(OSError("disk full"))
    >>> isinstance(future.exception(), OSError), delivered
    (True, [True])
    """

    def __init__(self, on_delivered: Callable[[SaveFuture], None] | None = None) -> None:
        super().__init__()
        self._on_delivered = on_delivered
        self._delivered = False

    @property
    def is_delivered(self) -> bool:
        """Whether this Future's exception has reached the caller (through :meth:`result`,
        :meth:`exception`, or its owner raising it: :meth:`delivered` was called)."""
        return self._delivered

    def result(self, timeout: float | None = None) -> str:
        try:
            return super().result(timeout)
        except BaseException:
            if self.done() and not self.cancelled():  # the write's own error, not a timeout
                self.delivered()
            raise

    def exception(self, timeout: float | None = None) -> BaseException | None:
        exc = super().exception(timeout)
        if exc is not None:
            self.delivered()
        return exc

    def undelivered_exception(self) -> BaseException | None:
        """The exception (waiting as :meth:`exception` does) without counting it as delivered:
        for code that passes it on to a Future of its own, such as ``CheckpointManager``."""
        return super().exception()

    def delivered(self) -> None:
        """Record that the caller has the exception (called by :meth:`result` and
        :meth:`exception`; a Future that passes this one's error on calls it for its caller;
        the owner that raised the error itself calls it too)."""
        self._delivered = True
        if self._on_delivered is not None:
            self._on_delivered(self)
