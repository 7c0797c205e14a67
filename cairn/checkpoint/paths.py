"""Accept every form of 'a checkpoint' a user may hold, and turn it into a local directory.

Reading takes a directory path, a ``file://`` URL, or a checkpoint object
(:func:`checkpoint_directory`); writing takes a path or a ``file://`` URL (:func:`save_target`).
Both expand ``~``. Other URL schemes are refused until object-store support lands.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Union
from urllib.parse import unquote, urlparse

from cairn.errors import CheckpointError, CheckpointNotFoundError, UnsupportedCheckpointLocationError

__all__ = ["CheckpointLike", "UnsupportedCheckpointLocationError", "checkpoint_directory", "is_url",
           "save_target"]

CheckpointLike = Union[str, "os.PathLike[str]", Any]

# A URL scheme (RFC 3986) of two characters or more, so that a Windows drive ("C:") is none.
_URL = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]+)://")
# What ``Path("s3://bucket/x")`` leaves of a URL: a first component "s3:" ("//" collapsed).
_COLLAPSED_URL = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]+):$")


def is_url(text: str) -> str | None:
    """The URL scheme of ``text`` (``"s3"`` for ``s3://b/k``), or None for a plain path."""
    match = _URL.match(text)
    return match.group(1) if match else None


def save_target(target: str | os.PathLike[str]) -> Path:
    """The local directory that a save to ``target`` writes.

    ``target`` is a ``str`` or ``os.PathLike`` path (``~`` is expanded) or a ``file://`` URL.
    Any other URL scheme raises :class:`UnsupportedCheckpointLocationError`, as does a path
    whose first component looks like a URL scheme whose ``//`` was collapsed by ``Path()``:
    writing it would create a local directory named after the scheme.

    >>> str(save_target("file:///tmp/run%201/ckpt"))
    '/tmp/run 1/ckpt'
    """
    text = _as_text(target)
    match = _URL.match(text)
    if match and match.group(1).lower() != "file":
        raise UnsupportedCheckpointLocationError(
            f"Cannot save a checkpoint to {text!r}: the URL scheme {match.group(1)!r} is not "
            "supported yet; only local paths and file:// URLs are. Save to a local path (and "
            "copy the directory to its destination yourself)."
        )
    first = Path(text).parts[:1]
    if not match and first and _COLLAPSED_URL.match(first[0]):
        raise UnsupportedCheckpointLocationError(
            f"Cannot save a checkpoint to {text!r}: it starts with {first[0]!r}, like a URL "
            f"whose '//' was lost (Path('{first[0]}//...') collapses it), and saving would create "
            f"a local directory named {first[0]!r}. Pass a URL as a str (only file:// URLs are "
            "supported yet), or, to mean a local directory of that name, its absolute path."
        )
    return _local_path(text)


@contextlib.contextmanager
def checkpoint_directory(checkpoint: CheckpointLike) -> Iterator[Path]:
    """Yield the local directory of ``checkpoint``.

    Accepts a ``str`` or ``os.PathLike`` directory (``~`` is expanded), a ``file://`` URL, or an
    object with ``as_directory()`` (a context manager, as on ``ray.train.Checkpoint``) or
    ``to_directory()`` (returning a path).
    """
    if hasattr(checkpoint, "as_directory"):
        with checkpoint.as_directory() as directory:
            yield _existing(Path(directory), checkpoint)
        return
    if hasattr(checkpoint, "to_directory") and not isinstance(checkpoint, (str, os.PathLike)):
        yield _existing(Path(checkpoint.to_directory()), checkpoint)
        return
    if isinstance(checkpoint, (str, os.PathLike)):
        text = _as_text(checkpoint)
        match = _URL.match(text)
        if match and match.group(1).lower() != "file":
            raise CheckpointNotFoundError(
                f"Cannot open checkpoint URL {text!r}: only file:// URLs and local paths "
                "are read directly; download other URLs to a local directory first."
            )
        yield _existing(_local_path(text), checkpoint)
        return
    raise CheckpointNotFoundError(
        f"Cannot interpret {type(checkpoint).__name__} as a checkpoint: pass a directory path, "
        "a file:// URL, or an object with to_directory()/as_directory()."
    )


def _as_text(location: Any) -> str:
    if not isinstance(location, (str, bytes, os.PathLike)):
        raise CheckpointError(
            f"Cannot use a {type(location).__name__} as a checkpoint location: pass a str or "
            "os.PathLike directory path, or a file:// URL."
        )
    return os.fsdecode(os.fspath(location))


def _local_path(text: str) -> Path:
    """The local path of a plain path (``~`` expanded) or of a ``file://`` URL."""
    if not _URL.match(text):
        return Path(text).expanduser()
    url = urlparse(text)
    if url.netloc not in ("", "localhost"):
        raise UnsupportedCheckpointLocationError(
            f"Cannot use the checkpoint URL {text!r}: it names the host {url.netloc!r}, and only "
            "local files are supported. Write a local absolute path as file:///absolute/path "
            "(three slashes), or pass the path itself."
        )
    if not url.path:
        raise UnsupportedCheckpointLocationError(
            f"Cannot use the checkpoint URL {text!r}: it names no path. Write file:///absolute/path."
        )
    return Path(unquote(url.path))


def _existing(path: Path, original: Any) -> Path:
    if not path.is_dir():
        raise CheckpointNotFoundError(
            f"Checkpoint {original!s} not found: {path} is not a directory."
        )
    return path
