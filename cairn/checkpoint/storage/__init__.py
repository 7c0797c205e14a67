"""Where checkpoints live: one :class:`Storage` interface, one implementation per medium.

:func:`resolve_storage` turns a location into a :class:`Storage`, and is the one place that
tells the media apart:

* a local path (``~`` expanded) or a ``file://`` URL gives a :class:`LocalStorage`
  (:mod:`cairn.checkpoint.storage.local`): saves replace directories atomically by rename, and
  reads reach every file through one directory descriptor with ``O_NOFOLLOW``;
* any other URL (``s3://bucket/run/ckpt``, ``gs://...``, ``memory://...``) gives an
  :class:`ObjectStorage` (:mod:`cairn.checkpoint.storage.objects`) through fsspec, imported
  only then. Object stores have no rename: a save writes every object and the manifest last,
  as the commit point (docs/storage.md).

The writer, reader and manager use only :class:`Storage`'s methods
(:mod:`cairn.checkpoint.storage.base`); none of them asks which medium it has.

>>> import tempfile
>>> root = resolve_storage(tempfile.mkdtemp())
>>> root.write_bytes("state/manager.json", b"{}")
>>> root.list_files(), root.exists("state"), root.read_bytes("state/manager.json", limit=100)
(['state/manager.json'], True, b'{}')
>>> root.delete_prefix("state"); root.list_files()
[]
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from cairn.checkpoint.paths import CheckpointLike, checkpoint_directory, is_url, save_target
from cairn.checkpoint.storage.base import ReadHandle, Storage, WriteTarget, relative_parts
from cairn.checkpoint.storage.local import LocalStorage
from cairn.checkpoint.storage.objects import ObjectStorage
from cairn.errors import UnsupportedCheckpointLocationError

__all__ = ["Storage", "LocalStorage", "ObjectStorage", "ReadHandle", "WriteTarget", "resolve_storage",
           "is_object_store", "relative_parts", "check_save_location", "writing", "located"]

#: Options of a URL's fsspec file system (docs/storage.md); None for none.
StorageOptions = Mapping[str, Any] | None


def _is_checkpoint_object(location: Any) -> bool:
    """A checkpoint object such as ``ray.tune.Checkpoint``: os.PathLike by its ``__fspath__``,
    which raises, so it must be told apart before ``os.fspath`` is called on it."""
    return hasattr(location, "as_directory") and not isinstance(location, (str, bytes, Path))


def is_object_store(location: Any) -> bool:
    """Whether ``location`` is an object store: an :class:`ObjectStorage`, or a URL that is not
    ``file://`` (it goes through fsspec)."""
    if isinstance(location, Storage):
        return isinstance(location, ObjectStorage)
    if _is_checkpoint_object(location):
        return False
    if not isinstance(location, (str, os.PathLike)) or isinstance(location, Path):
        return False
    scheme = is_url(os.fsdecode(os.fspath(location)))
    return scheme is not None and scheme.lower() != "file"


def resolve_storage(location: str | os.PathLike[str] | Storage, *,
                    storage_options: StorageOptions = None) -> Storage:
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


def check_save_location(location: str | os.PathLike[str] | Storage, *,
                        storage_options: StorageOptions = None) -> Storage:
    """The :class:`Storage` a save to ``location`` writes, refused before any state is
    gathered when a save may not go there: a local directory that is neither empty nor a
    checkpoint, or an object-store prefix holding objects other than a checkpoint's."""
    storage = resolve_storage(location, storage_options=storage_options)
    storage.check_writable()
    return storage


@contextlib.contextmanager
def writing(location: str | os.PathLike[str] | Storage, *,
            storage_options: StorageOptions = None) -> Iterator[WriteTarget]:
    """Yield the :class:`WriteTarget` of a save to ``location``; on normal exit the checkpoint
    written into it becomes ``location`` (:meth:`Storage.writing`). A prefix left uncommitted
    (objects of a failed save, no manifest) is refused by readers and replaced by the next
    save there."""
    with resolve_storage(location, storage_options=storage_options).writing() as target:
        yield target


@contextlib.contextmanager
def located(checkpoint: CheckpointLike, storage_options: StorageOptions = None) -> Iterator[Storage]:
    """The :class:`Storage` of the checkpoint to read at ``checkpoint``: a path, a URL
    (``file://``, ``s3://``, ``memory://``, ...), a :class:`Storage`, or an object with
    ``as_directory()``/``to_directory()`` (a local directory while the block runs)."""
    if isinstance(checkpoint, Storage) or is_object_store(checkpoint):
        yield resolve_storage(checkpoint, storage_options=storage_options)
        return
    if storage_options:
        resolve_storage(checkpoint, storage_options=storage_options)  # raises: local takes none
    with checkpoint_directory(checkpoint) as root:
        yield LocalStorage(root)
