"""CheckpointManager: numbered checkpoints under one root, saved when due, the last and the best kept.

A manager owns a root directory (or URI). Each save writes ``<root>/checkpoint_<NNNNNN>`` (the
iteration, six digits or more) and, *before* that checkpoint is committed, a small record next
to it, ``<root>/checkpoint_<NNNNNN>.record.json``, holding the iteration and the ``keep_best``
metric. What the manager knows is derived from the root alone, so a new manager on the same
root (a resumed run) knows every checkpoint there:

* a checkpoint counts only once it is committed (its manifest is there): :meth:`latest` lists
  the root and never trusts anything that can be stale;
* a record without a committed checkpoint belongs to a save that did not finish, and is
  ignored (and removed on the next start); a committed checkpoint without a record (copied in
  by hand) has no metric.

Retention runs after each commit: the ``keep_last`` newest checkpoints and the best one by
``keep_best`` stay, the others are deleted. A checkpoint is first made invisible (renamed to a
temporary name that :func:`cairn.checkpoint.atomic.cleanup` removes, or its manifest deleted
first on a store without rename), then removed, then its record. A crash at any point leaves
:meth:`latest` on a whole checkpoint.

The manager knows no Algorithm class: it saves anything with ``iteration`` and
``save(path, *, blocking, storage_options, previous)`` (:class:`cairn.core.Checkpointable`).
Each save passes the latest committed checkpoint as ``previous``, so that the files of
policies that did not change are linked (copied server-side) rather than written again; each
checkpoint still stands alone, so retention may delete any of them.
"""

from __future__ import annotations

import concurrent.futures
import math
import os
import re
import threading
import time
from collections.abc import Mapping
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, Literal

from cairn.checkpoint.manager_store import ManagerStore, open_store
from cairn.checkpoint.save_future import SaveFuture
from cairn.core import Checkpointable
from cairn.errors import CheckpointError, ConfigError

__all__ = ["CheckpointManager", "ManagedCheckpoint", "checkpoint_name", "resolve_checkpoint"]

_NAME = re.compile(r"^checkpoint_(\d{6,})$")
_RECORD_SUFFIX = ".record.json"
_RECORD_FORMAT = "cairn-manager-record"


def checkpoint_name(iteration: int) -> str:
    """The directory name of the checkpoint of ``iteration``: ``checkpoint_000010``."""
    return f"checkpoint_{iteration:06d}"


@dataclass(frozen=True)
class ManagedCheckpoint:
    """One committed checkpoint under a manager's root."""

    #: The training iteration it was saved at (from its name).
    iteration: int
    #: Its location: a local path or a URI, as accepted by ``Algorithm.from_checkpoint``.
    path: str
    #: The ``keep_best`` metric of the result it was saved with; None without one.
    metric: float | None


def resolve_checkpoint(location: Any, *, storage_options: Mapping[str, Any] | None = None) -> Any:
    """The checkpoint that ``location`` means: the latest committed checkpoint when
    ``location`` is a :class:`CheckpointManager` root (it is no checkpoint itself and holds
    ``checkpoint_<NNNNNN>`` checkpoints), else ``location`` unchanged.

    >>> resolve_checkpoint("/no/such/dir")
    '/no/such/dir'
    """
    if not isinstance(location, (str, os.PathLike)):
        return location
    try:
        store = open_store(location, storage_options)
        if store.is_committed(""):
            return location
        found = _committed(store)
    except (CheckpointError, OSError):
        return location  # not a manager root: the reader reports what is wrong with it
    return store.location(checkpoint_name(found[-1])) if found else location


def _committed(store: ManagerStore) -> list[int]:
    """The iterations of the committed checkpoints under the root, ascending."""
    iterations = []
    for name in store.list_names():
        match = _NAME.match(name)
        if match and store.is_committed(name):
            iterations.append(int(match.group(1)))
    return sorted(iterations)


def _metric(result: Mapping[str, Any] | None, key: str) -> float | None:
    """``result[key]``, where a dotted key reaches into nested dicts
    (``"evaluation.episode_return_mean"``); None when absent or not a finite number."""
    if result is None:
        return None
    node: Any = result
    if key in result:
        node = result[key]
    else:
        for part in key.split("."):
            if not isinstance(node, Mapping) or part not in node:
                return None
            node = node[part]
    if isinstance(node, bool) or not isinstance(node, (int, float)):
        return None
    value = float(node)
    return value if math.isfinite(value) else None


class CheckpointManager:
    """Save an algorithm's checkpoints under ``root`` when due; keep the last and the best.

    Args:
        root: A directory (created when missing), or a URI where the storage layer takes one.
        keep_last: How many of the newest checkpoints to keep (at least 1); None keeps all.
        keep_best: ``(metric, "max" | "min")``: also keep the checkpoint whose result had the
            best value of ``metric``, a key of the result dict or a dotted path into it
            (``"evaluation.episode_return_mean"``). Results without a finite value of it
            never count as best.
        save_every_iterations: :meth:`save` is due at iterations that are multiples of this;
            None: no iteration rule.
        save_every_seconds: :meth:`save` is also due once this many seconds have passed since
            the last save (or since the manager was made); None: no time rule.
        storage_options: Passed to the storage layer and to ``algo.save`` for URIs.

    >>> import tempfile
    >>> manager = CheckpointManager(tempfile.mkdtemp(), keep_last=2)
    >>> manager.latest() is None
    True
    """

    def __init__(
        self,
        root: str | os.PathLike[str],
        *,
        keep_last: int | None = 3,
        keep_best: tuple[str, Literal["max", "min"]] | None = None,
        save_every_iterations: int | None = 1,
        save_every_seconds: float | None = None,
        storage_options: Mapping[str, Any] | None = None,
    ) -> None:
        if keep_last is not None and (isinstance(keep_last, bool) or not isinstance(keep_last, int)
                                      or keep_last < 1):
            raise ConfigError(f"CheckpointManager: keep_last={keep_last!r}; expected an int >= 1 "
                              "(the latest checkpoint is always kept) or None to keep all.")
        if keep_best is not None and not (
                isinstance(keep_best, tuple) and len(keep_best) == 2 and isinstance(keep_best[0], str)
                and keep_best[1] in ("max", "min")):
            raise ConfigError(f"CheckpointManager: keep_best={keep_best!r}; expected a tuple "
                              "(metric, 'max' | 'min'), e.g. ('episode_return_mean', 'max').")
        if save_every_iterations is not None and (
                isinstance(save_every_iterations, bool) or not isinstance(save_every_iterations, int)
                or save_every_iterations < 1):
            raise ConfigError(f"CheckpointManager: save_every_iterations={save_every_iterations!r}; "
                              "expected an int >= 1, or None for no iteration rule.")
        if save_every_seconds is not None and not (
                isinstance(save_every_seconds, (int, float)) and not isinstance(save_every_seconds, bool)
                and save_every_seconds > 0):
            raise ConfigError(f"CheckpointManager: save_every_seconds={save_every_seconds!r}; "
                              "expected a number > 0, or None for no time rule.")
        self.keep_last = keep_last
        self.keep_best = keep_best
        self.save_every_iterations = save_every_iterations
        self.save_every_seconds = save_every_seconds
        self.storage_options = dict(storage_options) if storage_options else None
        self._store = open_store(root, self.storage_options)
        self._lock = threading.Lock()
        self._unwaited: list[Future[str]] = []  # background saves no wait() has seen
        self._errors: list[BaseException] = []
        self._store.clean_stale({checkpoint_name(i) for i in _committed(self._store)},
                                is_checkpoint=lambda name: bool(_NAME.match(name)),
                                record_suffix=_RECORD_SUFFIX)
        found = _committed(self._store)
        self._last_iteration: int | None = found[-1] if found else None
        self._last_time = time.monotonic()

    @property
    def root(self) -> str:
        """The root, as a local absolute path or a URI."""
        return self._store.location("")

    # ------------------------------------------------------------------------------ queries
    def checkpoints(self) -> list[ManagedCheckpoint]:
        """Every committed checkpoint under the root, oldest iteration first, with its metric."""
        out = []
        for iteration in _committed(self._store):
            name = checkpoint_name(iteration)
            record = self._store.read_json(name + _RECORD_SUFFIX)
            metric = None
            if isinstance(record, dict) and record.get("format") == _RECORD_FORMAT:
                value = record.get("metric")
                metric = (float(value) if isinstance(value, (int, float)) and not isinstance(value, bool)
                          else None)
            out.append(ManagedCheckpoint(iteration, self._store.location(name), metric))
        return out

    def latest(self) -> str | None:
        """The location of the committed checkpoint of the highest iteration; None if none."""
        found = _committed(self._store)
        return self._store.location(checkpoint_name(found[-1])) if found else None

    def best(self) -> str | None:
        """The location of the checkpoint with the best ``keep_best`` metric (the newest among
        equals); None without ``keep_best`` or without a checkpoint that has the metric."""
        chosen = self._best(self.checkpoints())
        return chosen.path if chosen else None

    def _best(self, checkpoints: list[ManagedCheckpoint]) -> ManagedCheckpoint | None:
        if self.keep_best is None:
            return None
        sign = 1.0 if self.keep_best[1] == "max" else -1.0
        scored = [c for c in checkpoints if c.metric is not None]
        return max(scored, key=lambda c: (sign * c.metric, c.iteration)) if scored else None  # type: ignore[operator]

    def due(self, iteration: int) -> bool:
        """Whether :meth:`save` at ``iteration`` would save: an iteration not saved yet that
        is a multiple of ``save_every_iterations``, or ``save_every_seconds`` have passed."""
        if self._last_iteration is not None and iteration <= self._last_iteration:
            return False
        by_iteration = self.save_every_iterations is not None and iteration % self.save_every_iterations == 0
        by_time = (self.save_every_seconds is not None
                   and time.monotonic() - self._last_time >= self.save_every_seconds)
        return by_iteration or by_time

    # ------------------------------------------------------------------------------- saving
    def save(
        self, algo: Checkpointable, result: Mapping[str, Any] | None = None, *,
        blocking: bool = True, force: bool = False,
    ) -> str | Future[str] | None:
        """Save ``algo`` as ``<root>/checkpoint_<iteration>`` if a save is due (:meth:`due`) or
        ``force``; then delete the checkpoints that retention no longer keeps.

        Args:
            algo: What to save (an Algorithm): its ``iteration`` names the checkpoint.
            result: The result dict of the iteration (``algo.train()``'s), for ``keep_best``.
            blocking: False: return at once, with the write in the background (see
                ``Algorithm.save``); retention runs when the write is committed.
            force: Save even if not due (an iteration already saved is saved again).

        Returns:
            None when no save was due. Otherwise the checkpoint's location (``blocking=True``)
            or a ``concurrent.futures.Future`` of it, done once the checkpoint is committed and
            retention has run (``blocking=False``).

        Raises:
            CheckpointError: ``algo.iteration`` is lower than the latest checkpoint's under the
                root (this root holds a later run), or an earlier background save or retention
                failed (raised once, here or from :meth:`wait`).
        """
        self._raise_errors()
        iteration = int(algo.iteration)
        if not (force or self.due(iteration)):
            return None
        # The algorithm would wait for its write in flight anyway; waiting here as well lets
        # that write's commit and retention finish, so that ``previous`` is still there.
        with self._lock:
            in_flight = [future for future in self._unwaited if not future.done()]
        concurrent.futures.wait(in_flight)  # not exception(): that would count as delivered
        self._raise_errors()
        committed = _committed(self._store)
        latest = max([*committed[-1:], *([] if self._last_iteration is None else [self._last_iteration])],
                     default=None)
        if latest is not None and iteration < latest:
            raise CheckpointError(
                f"Cannot save iteration {iteration} under {self.root}: it already holds a checkpoint "
                f"of the later iteration {latest} ({checkpoint_name(latest)}), and checkpoints of "
                "one root must go forward. Resume from the latest (Algorithm.from_checkpoint(root)), "
                "or save this run under a new root.")
        name = checkpoint_name(iteration)
        metric = _metric(result, self.keep_best[0]) if self.keep_best else None
        # The record goes first: a checkpoint is committed with its metric already stored.
        self._store.write_json(name + _RECORD_SUFFIX, {
            "format": _RECORD_FORMAT, "version": 1, "iteration": iteration,
            "metric_name": self.keep_best[0] if self.keep_best else None, "metric": metric,
            "time": time.time()})
        location = self._store.location(name)
        previous = self._store.location(checkpoint_name(committed[-1])) if committed else None
        saved = algo.save(location, blocking=blocking, storage_options=self.storage_options,
                          previous=previous if previous != location else None)
        self._last_iteration, self._last_time = iteration, time.monotonic()
        if blocking:
            self._retain()
            return str(saved)
        # The manager's Future passes the write's error on: once it has delivered it, the
        # algorithm does not raise it again (cairn.checkpoint.save_future).
        done = SaveFuture(lambda _: saved.delivered() if isinstance(saved, SaveFuture) else None)
        with self._lock:
            self._unwaited.append(done)
        saved.add_done_callback(lambda written: self._committed_in_background(written, done))
        return done

    def _committed_in_background(self, written: Future[Any], done: Future[str]) -> None:
        """After a background write (in the writer's thread): retention, then ``done``."""
        failed = (written.undelivered_exception() if isinstance(written, SaveFuture)
                  else written.exception())
        if failed is not None:  # the saved object raises it again itself, unless done delivers it
            done.set_exception(failed)
            return
        location = str(written.result())
        try:
            self._retain()
        except BaseException as exc:  # to the future and to the next save
            with self._lock:
                self._errors.append(exc)
            done.set_exception(exc)
        else:
            done.set_result(location)

    def _retain(self) -> None:
        """Delete the committed checkpoints that neither ``keep_last`` nor ``keep_best`` keeps."""
        with self._lock:
            checkpoints = self.checkpoints()
            keep = {c.iteration for c in (checkpoints[-self.keep_last:] if self.keep_last else checkpoints)}
            best = self._best(checkpoints)
            if best is not None:
                keep.add(best.iteration)
            for checkpoint in checkpoints:
                if checkpoint.iteration not in keep:
                    name = checkpoint_name(checkpoint.iteration)
                    self._store.remove_checkpoint(name)
                    self._store.remove_file(name + _RECORD_SUFFIX)

    def wait(self) -> None:
        """Wait until every background save of this manager since the last ``wait()`` is
        committed and retention has run.

        Raises:
            CheckpointError: one of those saves failed (the first failure; its cause is
                chained). A failed write is raised once more by the next save of the
                algorithm (``Algorithm.save``'s rule), a failed retention by nothing else.
        """
        with self._lock:
            futures, self._unwaited = self._unwaited, []
        failures = [exc for exc in (future.exception() for future in futures) if exc is not None]
        with self._lock:
            self._errors = [exc for exc in self._errors if exc not in failures]
        if failures:
            raise self._error(failures[0])
        self._raise_errors()

    def _raise_errors(self) -> None:
        """Raise (once) a retention failure of a background save that no ``wait()`` reported."""
        with self._lock:
            errors, self._errors = self._errors, []
            self._unwaited = [future for future in self._unwaited if not future.done()]
        if errors:
            raise self._error(errors[0])

    def _error(self, cause: BaseException) -> CheckpointError:
        error = CheckpointError(
            f"A background save under {self.root} failed: {cause}. The checkpoints committed "
            "before it are intact; fix the cause and save again.")
        error.__cause__ = cause
        return error

    def __repr__(self) -> str:
        return (f"CheckpointManager({self.root!r}, keep_last={self.keep_last}, keep_best={self.keep_best}, "
                f"save_every_iterations={self.save_every_iterations}, "
                f"save_every_seconds={self.save_every_seconds})")
