"""A policy's files: Policy checkpoints written and read, and native model exports.

The thin :class:`~cairn.policy.policy.Policy` methods (``export_checkpoint``,
``export_model``, ``from_checkpoint``, ``from_policy_checkpoint``) call these functions. The
policy module imports this one, never the reverse: a function that builds policies receives
the Policy class as ``base``.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from cairn.policy.config_overrides import with_config_overrides
from cairn.policy.keras_config import uses_keras
from cairn.policy.state_check import check_policy_state, finite_checked
from cairn.registry import model_exporter, native_model_reuses, native_model_writer

if TYPE_CHECKING:
    from pathlib import Path

    from cairn.checkpoint.paths import CheckpointLike
    from cairn.checkpoint.writer import NativeFiles

__all__ = [
    "SavedPolicy",
    "RestorablePolicy",
    "write_policy_checkpoint_dir",
    "native_files_writer",
    "export_native_model",
    "is_policy_checkpoint",
    "policies_from_checkpoint",
    "policy_from_policy_checkpoint",
    "policy_from_checkpoint_state",
]


class SavedPolicy(Protocol):
    """What the writing functions read of a :class:`~cairn.policy.policy.Policy`, which imports
    this module (so it is named here, not imported back)."""

    @property
    def config(self) -> dict[str, Any]: ...

    def get_state(self, *, copy: bool = True) -> dict[str, Any]: ...


#: The policy class a reading function was given, and so the type it returns.
P = TypeVar("P", bound="RestorablePolicy")


class RestorablePolicy(Protocol):
    """A policy class, as the reading functions build from it (``Policy`` passes itself)."""

    @classmethod
    def from_state(cls: type[P], state: Mapping[str, Any], *, copy: bool = True) -> P: ...


def write_policy_checkpoint_dir(
    policy: SavedPolicy, export_dir: str | os.PathLike[str], *, export_native_model_files: bool,
    storage_options: Mapping[str, Any] | None = None,
) -> None:
    """Write ``policy`` alone as a Policy checkpoint directory (atomically), or under an
    object-store URL (``storage_options`` for its file system); with
    ``export_native_model_files`` also its ``model/`` (see :func:`native_files_writer`)."""
    from cairn.checkpoint import check_save_location, write_policy_checkpoint

    target = check_save_location(export_dir, storage_options=storage_options)  # before gathering
    # A Keras policy's checkpoint always holds model/model.keras (docs/keras.md).
    native = export_native_model_files or uses_keras(policy.config)
    native_files = native_files_writer(policy, full=export_native_model_files) if native else None
    write_policy_checkpoint(target, policy.get_state(copy=False), native_files=native_files)


def native_files_writer(policy: SavedPolicy, *, full: bool = True) -> NativeFiles:
    """The callback that writes ``policy``'s ``model/`` into a checkpoint directory (``full=False``:
    only what every checkpoint of the policy holds, a Keras policy's ``model.keras``).

    The writer is ``cairn.export``'s (a layer above this one), named in
    :data:`cairn.registry.NATIVE_MODEL_WRITER` and looked up here, when it is needed: the one
    place where the policy layer calls upward (docs/architecture.md). Its ``reuses(record)``
    tells an incremental save whether an earlier checkpoint's native files are these
    (:data:`cairn.checkpoint.writer.NativeFiles`).
    """
    return _NativeFilesWriter(functools.partial(native_model_writer(), policy, full=full),
                              keras=uses_keras(policy.config), full=full)


class _NativeFilesWriter:
    """:func:`native_files_writer`'s callback, with the ``reuses`` an incremental save asks."""

    def __init__(self, write: NativeFiles, *, keras: bool, full: bool) -> None:
        self._write, self._keras, self._full = write, keras, full

    def __call__(self, directory: Path, files: dict[str, Any]) -> dict[str, Any] | None:
        return self._write(directory, files)

    def reuses(self, record: Mapping[str, Any]) -> bool:
        """Whether native files an earlier checkpoint of the same state recorded as ``record``
        (its manifest's ``native_model``) are what this writer writes: cairn.export's answer
        (``cairn.registry.NATIVE_MODEL_REUSES``), which writes the record."""
        return native_model_reuses()(record, keras=self._keras, full=self._full)


def export_native_model(policy: SavedPolicy, export_dir: str | os.PathLike[str], *, onnx: int | None,
                        extra_outputs: Sequence[str] = ()) -> None:
    """Write ``policy``'s observation-to-action path with ``cairn.export.export_model`` (named in
    :data:`cairn.registry.MODEL_EXPORTER`): a torch program, or ONNX with ``onnx=<opset>``, plus
    the optional outputs named in ``extra_outputs``."""
    model_exporter()(policy, export_dir, onnx=onnx, extra_outputs=extra_outputs)


def is_policy_checkpoint(checkpoint: CheckpointLike, *,
                         storage_options: Mapping[str, Any] | None = None) -> bool:
    """Whether ``checkpoint`` is a Policy checkpoint (not an Algorithm checkpoint)."""
    from cairn.checkpoint import get_checkpoint_info

    return bool(get_checkpoint_info(checkpoint, storage_options=storage_options)["type"] == "Policy")


def policies_from_checkpoint(
    checkpoint: CheckpointLike, *, policy_ids: str | Sequence[str] | None, base: type[P],
    storage_options: Mapping[str, Any] | None = None, config_overrides: Mapping[str, Any] | None = None,
) -> dict[str, P]:
    """``{policy_id: Policy}`` of an Algorithm checkpoint: all its policies, or only
    ``policy_ids``, reading only their files; each stored class must subclass ``base``;
    ``config_overrides`` set in each policy's config (:mod:`cairn.policy.config_overrides`)."""
    from cairn.checkpoint import load_policy_states
    from cairn.checkpoint.reference_scope import loading_checkpoint

    with loading_checkpoint(checkpoint, storage_options):  # never code from inside it
        states = load_policy_states(checkpoint, policy_ids=policy_ids, storage_options=storage_options)
        return {pid: policy_from_checkpoint_state(state, f"{checkpoint} (policy {pid!r})", base=base,
                                                  config_overrides=config_overrides)
                for pid, state in states.items()}


def policy_from_policy_checkpoint(checkpoint: CheckpointLike, *, base: type[P],
                                  storage_options: Mapping[str, Any] | None = None,
                                  config_overrides: Mapping[str, Any] | None = None) -> P:
    """The policy of a Policy checkpoint; an Algorithm checkpoint is refused with
    ``CheckpointFormatError``. The stored class must subclass ``base``; ``config_overrides`` as
    in :func:`policies_from_checkpoint`."""
    from cairn.checkpoint import load_policy_state
    from cairn.checkpoint.reference_scope import loading_checkpoint

    with loading_checkpoint(checkpoint, storage_options):  # never code from inside it
        state = load_policy_state(checkpoint, storage_options=storage_options)
        return policy_from_checkpoint_state(state, checkpoint, base=base, config_overrides=config_overrides)


def policy_from_checkpoint_state(state: Mapping[str, Any], where: Any, *, base: type[P],
                                 config_overrides: Mapping[str, Any] | None = None) -> P:
    """Set ``config_overrides`` in a state tree the checkpoint reader returned, check it, and
    build its policy from it."""
    from cairn.checkpoint import restoring

    state = with_config_overrides(state, config_overrides, where)  # checked as it will be built
    check_policy_state(state, where, base=base)
    with restoring(where), finite_checked(state):  # check_policy_state did
        # The arrays were read into buffers nobody else holds: adopt them, don't copy.
        return base.from_state(state, copy=False)
    raise AssertionError("unreachable")  # restoring() re-raises every error it catches
