"""The command line's logging: the library logs to the ``cairn`` logger and stays quiet (a
``NullHandler``, set in ``cairn/__init__.py``); the ``cairn`` command shows its records on
stderr at the level that ``-v``, ``--debug`` or ``--log-level`` ask for (WARNING by default)."""

from __future__ import annotations

import argparse
import logging
import os
import sys
import warnings
from collections.abc import Callable
from typing import TextIO

__all__ = ["LOGGER_NAME", "configure_logging", "remove_handler", "log_level", "shows_tracebacks",
           "warnings_as_log_records"]

LOGGER_NAME = "cairn"


def log_level(args: argparse.Namespace) -> int:
    """The level asked for: ``--log-level``, else DEBUG for ``-vv``/``--debug``, INFO for
    ``-v``, ERROR for ``-q``, WARNING otherwise."""
    explicit = getattr(args, "log_level", None)
    if explicit:
        return int(logging.getLevelName(explicit))
    verbose = getattr(args, "verbose", 0) or 0
    if getattr(args, "debug", False) or verbose >= 2:
        return logging.DEBUG
    if verbose == 1:
        return logging.INFO
    return logging.ERROR if getattr(args, "quiet", False) else logging.WARNING


def shows_tracebacks(args: argparse.Namespace) -> bool:
    """Whether a failure prints its traceback (``-v``, ``--debug``, or ``--log-level DEBUG``)."""
    return bool(getattr(args, "verbose", 0) or getattr(args, "debug", False)
                or getattr(args, "log_level", None) == "DEBUG")


class _Formatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        prefix = "cairn" if record.levelno < logging.WARNING else f"cairn: {record.levelname.lower()}"
        text = f"{prefix}: {record.getMessage()}"
        if record.exc_info and record.levelno <= logging.DEBUG:
            text += "\n" + self.formatException(record.exc_info)
        return text


class _StderrHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes to whatever ``sys.stderr`` is when a record comes: while the progress bar runs,
    rich puts a writer there that prints above the bar."""

    def emit(self, record: logging.LogRecord) -> None:
        self.stream = sys.stderr
        super().emit(record)


def configure_logging(args: argparse.Namespace) -> logging.Handler:
    """Send the ``cairn`` logger's records at :func:`log_level` to stderr, one line each
    (``cairn: warning: ...``, ``cairn: ...`` for INFO/DEBUG); returns the handler, which the
    command removes when it ends (``main()`` may run more than once in a process)."""
    logger = logging.getLogger(LOGGER_NAME)
    handler = _StderrHandler(sys.stderr)
    handler.setFormatter(_Formatter())
    logger.addHandler(handler)
    logger.setLevel(log_level(args))
    return handler


def remove_handler(handler: logging.Handler) -> None:
    """Undo :func:`configure_logging`."""
    logger = logging.getLogger(LOGGER_NAME)
    logger.removeHandler(handler)
    logger.setLevel(logging.NOTSET)


_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def warnings_as_log_records() -> Callable[..., None]:
    """A ``warnings.showwarning`` that prints cairn's warnings (of a class cairn defines, or
    issued from cairn's code) as the ``cairn`` logger's WARNING records (one line,
    ``cairn: warning: ...``, hidden by ``-q``) instead of Python's two lines naming a source
    file; others go to Python's own display. Install it inside ``warnings.catch_warnings()``,
    which puts the original back."""
    original = warnings.showwarning

    def show(message: Warning | str, category: type[Warning], filename: str, lineno: int,
             file: TextIO | None = None, line: str | None = None) -> None:
        in_cairn = os.path.abspath(filename).startswith(_PACKAGE_DIR + os.sep)
        if in_cairn or category.__module__.split(".")[0] == "cairn":
            logging.getLogger(LOGGER_NAME).warning("%s", " ".join(str(message).split()))
        else:
            original(message, category, filename, lineno, file, line)

    return show
