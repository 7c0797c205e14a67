"""A manager's record of each checkpoint: what it holds, who writes it, and when what a save
left is proven abandoned.

A :class:`~cairn.checkpoint.manager.CheckpointManager` writes a record
(``checkpoint_<N>.record.json``: the iteration, the ``keep_best`` metric, the env steps) before
the checkpoint it describes, and the record names its writer: the host, the process ID and
``renewed``, the time it was last rewritten. While the save is in flight the writer rewrites
it every :data:`RENEW_EVERY` seconds (:class:`LeaseRenewal`): that is its lease. A record
without a committed checkpoint beside it is the trace of a save in progress *or* of one that
died, and only the second may be cleaned up, so another manager opening the root removes it
(and the uncommitted files beside it) only when :func:`abandoned` proves that no writer uses it:

* its save committed (the record says so) and its checkpoint is gone since (a deletion was
  interrupted), or
* its writer's process is dead (the record names this host and a process ID that does not
  run), or
* its lease has expired: ``renewed`` is more than :data:`LEASE_SECONDS` old (a writer that
  runs renews it ten times within that; the clocks of the hosts writing one root must agree
  to within minutes).

Anything else (a live writer, a record that cannot be read, files without a record) is left
alone: an uncommitted checkpoint is never loaded, and the next save of its iteration writes
over it.
"""

from __future__ import annotations

import contextlib
import hashlib
import math
import os
import socket
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from cairn.checkpoint.atomic import pid_alive
from cairn.errors import CheckpointError, CheckpointStorageError

if TYPE_CHECKING:
    from cairn.checkpoint.manager_store import ManagerStore

__all__ = ["LEASE_SECONDS", "RECORD_SUFFIX", "RENEW_EVERY", "LeaseRenewal", "RecordLease", "abandoned",
           "owner", "read_record", "resolve_record"]

#: A checkpoint ``checkpoint_<N>``'s record is ``checkpoint_<N>.record.json`` beside it.
RECORD_SUFFIX = ".record.json"
_RECORD_FORMAT = "cairn-manager-record"
#: The field of a replacement's record, until it commits: the replaced manifest and record.
_REPLACES = "replaces"

#: How long after its last renewal a record of an uncommitted checkpoint counts as abandoned.
LEASE_SECONDS = 600.0
#: How often a writer renews the record of the checkpoint it is writing.
RENEW_EVERY = LEASE_SECONDS / 10


def owner() -> dict[str, Any]:
    """The record fields that name this process as the writer, renewed now."""
    return {"host": socket.gethostname(), "pid": os.getpid(), "renewed": time.time()}


def abandoned(record: Any) -> bool:
    """Whether the save that wrote ``record`` (a parsed record, or None) is proven over: its
    process is dead on this host, or its lease expired (module docstring). Records of older
    cairn versions carry only ``time``, which counts as their last renewal."""
    if not isinstance(record, dict):
        return False  # unreadable: nothing proves that its writer is gone
    if record.get("committed") is True:
        return True  # its save committed: no writer uses it (its checkpoint's deletion was cut short)
    pid = record.get("pid")
    if (record.get("host") == socket.gethostname() and type(pid) is int and pid > 0
            and not pid_alive(pid)):
        return True
    renewed = record.get("renewed", record.get("time"))
    if isinstance(renewed, bool) or not isinstance(renewed, (int, float)) or not math.isfinite(renewed):
        return False
    return time.time() - renewed > LEASE_SECONDS


class LeaseRenewal:
    """Call ``renew`` every ``every`` seconds in a daemon thread, from :meth:`start` until
    :meth:`stop` (which waits for a renewal under way, so that none comes after it)."""

    def __init__(self, renew: Callable[[], None], every: float = RENEW_EVERY) -> None:
        self._renew = renew
        self._every = every
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name="cairn-lease", daemon=True)

    def start(self) -> LeaseRenewal:
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stopped.wait(self._every):
            try:
                self._renew()
            except Exception:  # a missed renewal only shortens the lease
                continue

    def stop(self) -> None:
        self._stopped.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join()


class RecordLease:
    """The record of the checkpoint ``name`` about to be saved, written now and naming this
    process as its writer, renewed until the save is over: then :meth:`finish` (it committed)
    or :meth:`abandon` (it failed)."""

    def __init__(self, store: ManagerStore, name: str, *, iteration: int, metric_name: str | None,
                 metric: float | None, timesteps: int | None, replacing: bool = False) -> None:
        self._store, self._checkpoint, self._name = store, name, name + RECORD_SUFFIX
        self._record = {"format": _RECORD_FORMAT, "version": 1, "iteration": iteration,
                        "metric_name": metric_name, "metric": metric, "timesteps": timesteps,
                        "time": time.time()}
        # ``replacing``: this save replaces the committed checkpoint ``name`` (``save(force=True)``
        # of its iteration), and writes over its record; keep what that said, and of which
        # checkpoint (its manifest), so that a replacement that fails gives the record back.
        self._replaced: tuple[bytes, Any] | None = None
        # Until the replacement commits, the record says so, with the replaced checkpoint's
        # manifest digest and record: a reader (another manager, one after a crash) whose
        # checkpoint still has that manifest reads the replaced record (read_record).
        self._pending: dict[str, Any] = {}
        if replacing:
            manifest = store.manifest_bytes(name)
            if manifest is not None:
                earlier = store.read_json(self._name)
                if isinstance(earlier, dict) and isinstance(earlier.get(_REPLACES), dict):
                    earlier = resolve_record(earlier, manifest)  # an earlier replacement cut short
                self._replaced = (manifest, earlier)
                self._pending = {_REPLACES: {"manifest_sha256": hashlib.sha256(manifest).hexdigest(),
                                             "record": earlier}}
        self._renew()
        self._renewal = LeaseRenewal(self._renew).start()

    def _renew(self) -> None:
        self._store.write_json(self._name, {**self._record, **self._pending, **owner()})

    def finish(self) -> list[str]:
        """After the checkpoint committed: stop renewing and check that every file its
        manifests list is there with its size (:meth:`ManagerStore.problems`). If so, mark the
        record as that of a committed checkpoint (``"committed": true``: once its checkpoint is
        gone, the record is abandoned, as when a deletion was cut short between the two) and
        return ``[]``; else remove the broken checkpoint and its record, and return what is
        wrong. A store that fails to answer that check raises (``CheckpointStorageError``), the
        checkpoint left in place: a failed read proves nothing wrong with it."""
        self._renewal.stop()
        try:
            problems = self._store.problems(self._checkpoint, strict=True)
        except CheckpointStorageError as exc:  # the store failed: nothing is known to be wrong
            location = self._store.location(self._checkpoint)
            raise type(exc)(
                f"The save to {location} committed, but reading it back to check that its files "
                f"are all there failed ({exc}). It was left as it is: `cairn checkpoint verify "
                f"{location}` checks it; save again to be sure.") from exc
        if problems:
            self._store.remove_checkpoint(self._checkpoint)
            self._store.remove_file(self._name)
        else:
            self._store.write_json(self._name, {**self._record, **owner(), "committed": True})
        return problems

    def abandon(self) -> None:
        """After a save that failed: stop renewing, and remove the record unless a checkpoint
        it describes is committed. A failed replacement that left the earlier checkpoint of the
        iteration in place (its manifest unchanged) gets that checkpoint's record back (or none,
        when it had none): its metric is not the failed save's."""
        self._renewal.stop()
        with contextlib.suppress(CheckpointError, OSError):
            if not self._store.is_committed(self._checkpoint):
                self._store.remove_file(self._name)
            elif self._replaced is not None:
                manifest, earlier = self._replaced
                if self._store.manifest_bytes(self._checkpoint) != manifest:
                    return  # the replacement went through: the record is the new checkpoint's
                if earlier is None:
                    self._store.remove_file(self._name)
                else:
                    self._store.write_json(self._name, earlier)


def read_record(store: ManagerStore, name: str, *, strict: bool = False) -> dict[str, Any] | None:
    """The record of the checkpoint ``name``; None when it has none (or an unreadable one;
    with ``strict``, a record file that is there but cannot be read or parsed raises:
    :meth:`ManagerStore.read_json_strictly`). The record of a replacement
    (``save(force=True)``) that has not committed (in flight, or cut short by a crash) is the
    replaced checkpoint's: :func:`resolve_record`."""
    record = (store.read_json_strictly if strict else store.read_json)(name + RECORD_SUFFIX)
    if isinstance(record, dict) and isinstance(record.get(_REPLACES), dict):
        record = resolve_record(record, store.manifest_bytes(name))
    return record if isinstance(record, dict) and record.get("format") == _RECORD_FORMAT else None


def resolve_record(record: dict[str, Any], manifest: bytes | None) -> Any:
    """The record that describes the checkpoint whose manifest is ``manifest`` (None: none can
    be read), given ``record`` as read: a replacement's record names the manifest it replaces
    and that checkpoint's record; while the checkpoint still has that manifest (the
    replacement did not commit), that record (None when it had none) is the checkpoint's."""
    replaces = record.get(_REPLACES)
    if not isinstance(replaces, dict) or manifest is None:
        return record
    if replaces.get("manifest_sha256") != hashlib.sha256(manifest).hexdigest():
        return record  # the replacement committed
    return replaces.get("record")
