"""Accept every form of 'a checkpoint' a user may hold, and turn it into a local directory."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Union
from urllib.parse import unquote, urlparse

from cairn.errors import CheckpointNotFoundError

__all__ = ["CheckpointLike", "checkpoint_directory"]

CheckpointLike = Union[str, "os.PathLike[str]", Any]


@contextlib.contextmanager
def checkpoint_directory(checkpoint: CheckpointLike) -> Iterator[Path]:
    """Yield the local directory of ``checkpoint``.

    Accepts a ``str`` or ``os.PathLike`` directory, a ``file://`` URL, or an object with
    ``as_directory()`` (a context manager, as on ``ray.train.Checkpoint``) or
    ``to_directory()`` (returning a path).
    """
    if hasattr(checkpoint, "as_directory"):
        with checkpoint.as_directory() as directory:
            yield _existing(Path(directory), checkpoint)
        return
    if hasattr(checkpoint, "to_directory") and not isinstance(checkpoint, (str, os.PathLike)):
        yield _existing(Path(checkpoint.to_directory()), checkpoint)
        return
    if isinstance(checkpoint, str) and "://" in checkpoint:
        url = urlparse(checkpoint)
        if url.scheme != "file":
            raise CheckpointNotFoundError(
                f"Cannot open checkpoint URL {checkpoint!r}: only file:// URLs and local paths "
                "are read directly; download other URLs to a local directory first."
            )
        yield _existing(Path(unquote(url.path)), checkpoint)
        return
    if isinstance(checkpoint, (str, os.PathLike)):
        yield _existing(Path(checkpoint), checkpoint)
        return
    raise CheckpointNotFoundError(
        f"Cannot interpret {type(checkpoint).__name__} as a checkpoint: pass a directory path, "
        "a file:// URL, or an object with to_directory()/as_directory()."
    )


def _existing(path: Path, original: Any) -> Path:
    if not path.is_dir():
        raise CheckpointNotFoundError(
            f"Checkpoint {original!s} not found: {path} is not a directory."
        )
    return path
