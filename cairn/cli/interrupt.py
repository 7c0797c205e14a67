"""Ctrl-C (SIGINT) and SIGTERM during ``cairn train``: finish the iteration, save, exit
128 + the signal's number (130, 143)."""

from __future__ import annotations

import os
import signal
import threading
from typing import Any

from cairn.ray_cluster import ray_sigterm_handler

__all__ = ["InterruptRequest"]


class InterruptRequest:
    """SIGINT (Ctrl-C) or SIGTERM (``kill``, a job scheduler or container runtime before its
    SIGKILL) during ``cairn train``: the first one asks to stop at the end of the current
    iteration and save (so the checkpoint resumes exactly); the next one of either raises
    KeyboardInterrupt.

    Each handler is installed only where Python's own one is in place (in the main thread;
    SIGINT not ignored by the shell, SIGTERM neither ignored nor handled by someone else; the
    handler that cairn's own ``ray.init`` put over the default SIGTERM one counts as the
    default), and the one before is back on exit.
    """

    def __init__(self) -> None:
        self.requested = False
        self.signum: int | None = None
        """The signal that asked to stop (the last one received), or None."""
        self._installed: dict[signal.Signals, Any] = {}  # each replaced signal's handler before

    @property
    def exit_status(self) -> int:
        """128 + the number of the signal that stopped the run (the shell's convention: 130
        for SIGINT, 143 for SIGTERM); 130 where no signal came (a KeyboardInterrupt raised by
        code)."""
        return 128 + (self.signum if self.signum is not None else signal.SIGINT)

    def __enter__(self) -> InterruptRequest:
        if threading.current_thread() is threading.main_thread():
            ray_handler = ray_sigterm_handler()
            for signum, defaults in ((signal.SIGINT, (signal.default_int_handler,)),
                                     (signal.SIGTERM, (signal.SIG_DFL, ray_handler))):
                before = signal.getsignal(signum)
                if before is not None and any(before is default for default in defaults):
                    signal.signal(signum, self._handle)
                    self._installed[signum] = before
        return self

    def __exit__(self, *exc_info: object) -> None:
        for signum, before in self._installed.items():
            signal.signal(signum, before)
        self._installed = {}

    def _handle(self, signum: int, frame: Any) -> None:
        self.requested = True
        self.signum = signum
        for installed in self._installed:  # the next one of either quits without saving
            signal.signal(installed, self._again)
        name, how = (("interrupted", "Ctrl-C") if signum == signal.SIGINT
                     else ("terminated (SIGTERM)", "SIGTERM"))
        # os.write, not print: a signal handler may run in the middle of another write to stderr.
        message = (f"\ncairn train: {name}; finishing this iteration, then saving a "
                   f"checkpoint ({how} again to quit without saving)\n")
        try:
            os.write(2, message.encode())
        except OSError:
            pass

    def _again(self, signum: int, frame: Any) -> None:
        self.signum = signum
        for installed, before in self._installed.items():
            signal.signal(installed, before)
        raise KeyboardInterrupt
