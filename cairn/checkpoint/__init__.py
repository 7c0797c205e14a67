"""Checkpoints: the only package that reads or writes checkpoint files.

It stores and reads *state trees* (JSON values and numpy arrays) and knows no Algorithm, Policy
or config class: the layers above hand it a tree (plus callbacks that write native model files)
and rebuild their objects from the trees it returns. See docs/checkpoint-format.md for the
normative format.

Locations: a local path, a ``file://`` URL, or any fsspec URL (``s3://``, ``gs://``,
``memory://``) with ``storage_options``; :func:`resolve_storage` gives its :class:`Storage`
(docs/storage.md). Writing: :func:`check_save_location` (check a target before gathering
state; :func:`save_location` for a local directory),
:func:`write_policy_checkpoint`, :func:`write_algorithm_checkpoint`. Reading:
:func:`get_checkpoint_info` (the manifest alone), :func:`load_policy_state`,
:func:`load_policy_states`, :func:`load_algorithm_state`, and :func:`restoring`, the boundary
that turns what building objects from a tree raises into ``CheckpointError`` subclasses.
"""

from cairn.checkpoint.atomic import cleanup
from cairn.checkpoint.format import FORMAT_VERSION
from cairn.checkpoint.reader import (
    CheckpointClassMismatchError,
    get_checkpoint_info,
    load_algorithm_state,
    load_policy_state,
    load_policy_states,
    restoring,
)
from cairn.checkpoint.storage import (
    LocalStorage,
    ObjectStorage,
    Storage,
    check_save_location,
    resolve_storage,
)
from cairn.checkpoint.writer import (
    NativeFiles,
    save_location,
    write_algorithm_checkpoint,
    write_policy_checkpoint,
)

__all__ = [
    "FORMAT_VERSION",
    "CheckpointClassMismatchError",
    "LocalStorage",
    "NativeFiles",
    "ObjectStorage",
    "Storage",
    "check_save_location",
    "cleanup",
    "get_checkpoint_info",
    "load_algorithm_state",
    "load_policy_state",
    "load_policy_states",
    "resolve_storage",
    "restoring",
    "save_location",
    "write_algorithm_checkpoint",
    "write_policy_checkpoint",
]
