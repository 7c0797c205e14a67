"""Ctrl-C during ``cairn train``: finish the iteration, save, exit 130."""

from __future__ import annotations

import os
import signal
import threading

__all__ = ["InterruptRequest"]


class InterruptRequest:
    """SIGINT during ``cairn train``: the first one asks to stop at the end of the current
    iteration and save (so the checkpoint resumes exactly); the next raises KeyboardInterrupt.

    The handler is installed only where Python's own one is (in the main thread, and not where
    the shell made the process ignore SIGINT).
    """

    def __init__(self) -> None:
        self.requested = False
        self._installed = False

    def __enter__(self) -> InterruptRequest:
        if (threading.current_thread() is threading.main_thread()
                and signal.getsignal(signal.SIGINT) is signal.default_int_handler):
            signal.signal(signal.SIGINT, self._handle)
            self._installed = True
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self._installed:
            signal.signal(signal.SIGINT, signal.default_int_handler)

    def _handle(self, signum: int, frame: object) -> None:
        self.requested = True
        signal.signal(signal.SIGINT, signal.default_int_handler)
        # os.write, not print: a signal handler may run in the middle of another write to stderr.
        message = ("\ncairn train: interrupted; finishing this iteration, then saving a "
                   "checkpoint (Ctrl-C again to quit without saving)\n")
        try:
            os.write(2, message.encode())
        except OSError:
            pass
