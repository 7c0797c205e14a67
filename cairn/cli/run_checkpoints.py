"""The checkpoints of a run directory, ``RUN/checkpoints/``: a :class:`cairn.CheckpointManager`
root (``checkpoint_<NNNNNN>`` plus the manager's ``.record.json`` files).

``cairn train`` saves through the manager (every ``--checkpoint-every`` iterations and at the
end; the newest ``--keep`` and the best by ``episode_return_mean`` are kept). ``cairn
checkpoint ls`` only reads: it lists committed checkpoints without opening a manager, whose
start-up cleans a crashed save's leftovers and could race a run that is saving.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from cairn.checkpoint.manager import CheckpointManager

__all__ = ["CHECKPOINTS_DIR", "BEST_METRIC", "StoredCheckpoint", "run_manager", "list_checkpoints",
           "list_checkpoints_and_damaged", "latest_checkpoint",
           "checkpoint_or_latest_of_run", "refuse_run_directory", "latest_and_unreadable_after"]

#: The folder of a run directory that holds its checkpoints.
CHECKPOINTS_DIR = "checkpoints"
#: The result key by which a run keeps its best checkpoint (besides the newest ``--keep``).
BEST_METRIC = "episode_return_mean"

_NAME = re.compile(r"checkpoint_(\d{6,})")


@dataclass(frozen=True)
class StoredCheckpoint:
    """One committed checkpoint: where, its iteration, its size in bytes, when it was written,
    and the metric its manager recorded (None without one)."""

    path: str
    iteration: int
    size: int
    created_at: str | None
    metric: float | None
    metric_name: str | None


def run_manager(root: str, *, keep: int | None, every: int | None,
                every_timesteps: int | None = None) -> CheckpointManager:
    """The :class:`cairn.CheckpointManager` of a run: ``keep`` newest (None: all) plus the best
    by :data:`BEST_METRIC`; due every ``every`` iterations and/or each time the env steps pass a
    multiple of ``every_timesteps`` (both None: only forced saves)."""
    from cairn.checkpoint.manager import CheckpointManager

    return CheckpointManager(root, keep_last=keep, keep_best=(BEST_METRIC, "max"),
                             save_every_iterations=every, save_every_timesteps=every_timesteps)


def _record(root: str, name: str) -> dict[str, Any]:
    """The manager's record of the checkpoint ``name`` ({} without one), read as the manager
    reads it (:func:`~cairn.checkpoint.manager_records.read_record`): that of the checkpoint it
    replaces while a ``save(force=True)`` has not committed."""
    from cairn.checkpoint.manager_records import read_record
    from cairn.checkpoint.manager_store import ManagerStore
    from cairn.checkpoint.storage import LocalStorage

    return read_record(ManagerStore(LocalStorage(root)), name) or {}


def _scan(root: str) -> tuple[list[tuple[int, str, str, dict[str, Any]]], list[tuple[int, str, str]]]:
    """``(iteration, name, path, manifest summary)`` of each committed ``checkpoint_<N>`` in the
    local folder ``root``, in no order (anything else there is left out), and ``(iteration,
    path, the reader's error)`` of each ``checkpoint_<N>`` whose manifest is there but cannot be
    read (one still being written has no manifest yet: it is in neither list)."""
    from cairn.checkpoint import get_checkpoint_info
    from cairn.checkpoint.format import MANIFEST_FILE
    from cairn.errors import CheckpointError

    if not os.path.isdir(root):
        return [], []
    found, damaged = [], []
    for name in os.listdir(root):
        match = _NAME.fullmatch(name)
        path = os.path.join(root, name)
        if match is None or not os.path.isdir(path):
            continue
        try:
            found.append((int(match.group(1)), name, path, get_checkpoint_info(path)))
        except CheckpointError as exc:
            if os.path.isfile(os.path.join(path, MANIFEST_FILE)):
                damaged.append((int(match.group(1)), path, " ".join(str(exc).split())))
    return found, damaged


def list_checkpoints(root: str) -> list[StoredCheckpoint]:
    """The committed cairn checkpoints in the local folder ``root`` (named ``checkpoint_<N>``),
    oldest iteration first; anything else there is left out (those whose manifest cannot be read:
    :func:`list_checkpoints_and_damaged`).
    Reads only manifests and records."""
    return list_checkpoints_and_damaged(root)[0]


def list_checkpoints_and_damaged(root: str) -> tuple[list[StoredCheckpoint], list[tuple[str, str]]]:
    """:func:`list_checkpoints` of ``root``, and ``(path, the reader's error)`` of each
    ``checkpoint_<N>`` there whose manifest is there but cannot be read (oldest first)."""
    committed, damaged = _scan(root)
    stored = []
    for iteration, name, path, info in committed:
        record = _record(root, name)
        metric = record.get("metric")
        stored.append(StoredCheckpoint(path, iteration, _listed_size(path, info), info.get("created_at"),
                                       float(metric) if isinstance(metric, (int, float)) else None,
                                       record.get("metric_name")))
    return (sorted(stored, key=lambda c: c.iteration),
            [(path, error) for _, path, error in sorted(damaged)])


def _listed_size(path: str, info: dict[str, Any]) -> int:
    """Bytes of a checkpoint's manifest and the files it lists, with each policy's files, which
    the policy's own manifest (``policies/<id>/cairn_checkpoint.json``) lists (a policy manifest
    that cannot be read adds only its own bytes)."""
    from cairn.checkpoint import get_checkpoint_info
    from cairn.checkpoint.format import MANIFEST_FILE
    from cairn.errors import CheckpointError

    size = os.path.getsize(os.path.join(path, MANIFEST_FILE))
    for name, entry in info["files"].items():
        size += int(entry["size"])
        if name.endswith("/" + MANIFEST_FILE):  # a policy's manifest: add what it lists
            try:
                policy = get_checkpoint_info(os.path.join(path, os.path.dirname(name)))
            except CheckpointError:
                continue
            size += sum(int(e["size"]) for e in policy["files"].values())
    return size


def latest_checkpoint(root: str) -> str | None:
    """The path of the newest committed checkpoint in ``root``, or None when there is none
    (reads only the checkpoints' top manifests: no records, no sizes)."""
    return latest_and_unreadable_after(root)[0]


def latest_and_unreadable_after(root: str) -> tuple[str | None, tuple[str, str] | None]:
    """:func:`latest_checkpoint` of the local folder ``root``, and ``(path, the reader's
    error)`` of the newest ``checkpoint_<N>`` there after it whose manifest is there but cannot
    be read (None when there is none, or no readable checkpoint), from one read of each
    manifest. The checkpoint manager counts such a one as saved (its manifest is there), so a
    run resumed from an older checkpoint would train its iterations again without saving them."""
    committed, damaged = _scan(root)
    if not committed:
        return None, None
    iteration, _, latest, _ = max(committed, key=lambda c: c[0])
    later = [(n, path, error) for n, path, error in damaged if n > iteration]
    return latest, (max(later)[1:] if later else None)


def checkpoint_or_latest_of_run(path: str) -> str:
    """``path`` itself, or, for a run directory (what ``cairn train --out`` writes: no manifest
    of its own, a ``checkpoints/`` folder) or its ``checkpoints/`` folder, the path of the
    newest committed checkpoint there.

    Raises :class:`~cairn.cli.common.UsageError` for a run directory without a committed
    checkpoint. Anything else (a checkpoint, an object-store URI, a wrong path) is returned
    unchanged for the checkpoint reader to accept or explain.
    """
    from cairn.checkpoint.format import MANIFEST_FILE
    from cairn.cli.common import UsageError

    if os.path.isfile(os.path.join(path, MANIFEST_FILE)):
        return path
    folder = os.path.join(path, CHECKPOINTS_DIR)
    for root in (folder, path):
        latest = latest_checkpoint(root)
        if latest is not None:
            return latest
    if os.path.isdir(folder):
        raise UsageError(f"{path} is a run directory with no committed checkpoint in {folder}; train it with "
                         "--checkpoint-every N or until it ends (the last iteration is always saved).")
    return path


def refuse_run_directory(path: str, command: str) -> None:
    """Raise :class:`~cairn.cli.common.UsageError` when ``path`` is a run directory or its
    ``checkpoints/`` folder rather than a checkpoint: ``command`` (``cairn checkpoint verify``,
    ``upgrade``, ``diff``) acts on the checkpoints it is given, not on the newest of a run as
    ``info``, ``evaluate`` and ``export`` do, so the error names the newest to pass and how to
    list the others. Anything else is left for the checkpoint reader to accept or explain."""
    from cairn.cli.common import UsageError

    checkpoint = checkpoint_or_latest_of_run(path)  # a run without a committed checkpoint: its own error
    if checkpoint == path:
        return
    folder = os.path.dirname(checkpoint)
    run_dir = os.path.dirname(folder) if os.path.basename(folder) == CHECKPOINTS_DIR else folder
    raise UsageError(f"{path} is a run directory, not a checkpoint; {command} takes a checkpoint, such as "
                     f"the run's newest: {checkpoint}; cairn checkpoint ls {run_dir} lists them all.")
