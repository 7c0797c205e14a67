"""Small helpers for the checkpoint robustness tests (not tests themselves)."""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def fresh_dir() -> Iterator[Path]:
    """A temporary directory for one hypothesis example (function fixtures are not reset
    between examples)."""
    path = Path(tempfile.mkdtemp(prefix="cairn-fuzz-"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)
