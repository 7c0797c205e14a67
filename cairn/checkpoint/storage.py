"""Where checkpoints live: a local directory or an object store, behind one small interface.

:func:`resolve_storage` turns a location into a :class:`Storage`:

* a local path (``~`` expanded) or a ``file://`` URL gives a :class:`LocalStorage`: the
  checkpoint writer replaces directories atomically by rename (:mod:`cairn.checkpoint.atomic`)
  and the reader reaches every file through one directory descriptor with ``O_NOFOLLOW``
  (:mod:`cairn.checkpoint.dirhandle`);
* any other URL (``s3://bucket/run/ckpt``, ``gs://...``, ``memory://...``) gives an
  :class:`~cairn.checkpoint.object_store.ObjectStorage` through fsspec, imported only then.
  Object stores have no rename: a save writes every object under its final prefix and the
  manifest last, as the commit point (docs/storage.md).

A :class:`Storage` names a directory (a prefix, on an object store); its methods take paths
relative to it, POSIX style (``"policies/p0/cairn_checkpoint.json"``), ``""`` for itself.

>>> import tempfile
>>> root = resolve_storage(tempfile.mkdtemp())
>>> root.write_bytes("state/manager.json", b"{}")
>>> root.list_files(), root.exists("state"), root.read_bytes("state/manager.json", limit=100)
(['state/manager.json'], True, b'{}')
>>> root.delete_prefix("state"); root.list_files()
[]
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from cairn.checkpoint.object_store import ObjectStorage
from cairn.checkpoint.paths import is_url, save_target
from cairn.checkpoint.storage_base import LocalStorage, Storage, relative_parts
from cairn.errors import UnsupportedCheckpointLocationError

__all__ = ["Storage", "LocalStorage", "ObjectStorage", "resolve_storage", "is_object_store", "relative_parts"]


def _is_checkpoint_object(location: Any) -> bool:
    """A checkpoint object such as ``ray.tune.Checkpoint``: os.PathLike by its ``__fspath__``,
    which raises, so it must be told apart before ``os.fspath`` is called on it."""
    return hasattr(location, "as_directory") and not isinstance(location, (str, bytes, Path))


def is_object_store(location: Any) -> bool:
    """Whether ``location`` is a URL that is not ``file://`` (it goes through fsspec)."""
    if isinstance(location, Storage):
        return not location.is_local
    if _is_checkpoint_object(location):
        return False
    if not isinstance(location, (str, os.PathLike)) or isinstance(location, Path):
        return False
    scheme = is_url(os.fsdecode(os.fspath(location)))
    return scheme is not None and scheme.lower() != "file"


def resolve_storage(location: str | os.PathLike[str] | Storage, *,
                    storage_options: Mapping[str, Any] | None = None) -> Storage:
    """The :class:`Storage` of a checkpoint location.

    ``location`` is a local path (``~`` expanded), a ``file://`` URL, any other URL fsspec
    knows (``s3://`` with the ``s3`` extra, ``gs://`` with ``gcs``, ``memory://``), or a
    :class:`Storage` (returned as it is). ``storage_options`` go to the fsspec file system
    (``{"key": ..., "secret": ..., "client_kwargs": {"endpoint_url": ...}}`` for s3fs); they
    are refused for a local location, which has none.

    Raises:
        UnsupportedCheckpointLocationError: an unknown URL scheme, or a ``file://`` URL naming
            another host.
        StorageBackendMissingError: the scheme's fsspec backend is not installed (the message
            says which ``pip install``).
    """
    if isinstance(location, Storage):
        return location
    if _is_checkpoint_object(location):
        raise UnsupportedCheckpointLocationError(
            f"A {type(location).__name__} is read through its as_directory()/to_directory() "
            "(cairn.checkpoint.paths.checkpoint_directory), not as a storage location.")
    if is_object_store(location):
        return ObjectStorage.from_url(os.fsdecode(os.fspath(location)), storage_options or {})
    if storage_options:
        raise UnsupportedCheckpointLocationError(
            f"storage_options={dict(storage_options)!r:.200} were given for the local location "
            f"{os.fsdecode(os.fspath(location))!r}, which takes none; they are for URLs such as "
            "s3://bucket/path. Drop storage_options, or pass a URL."
        )
    return LocalStorage(save_target(location))
