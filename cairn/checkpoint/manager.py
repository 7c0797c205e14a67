"""CheckpointManager: numbered checkpoints under one root, saved when due, some of them kept.

A manager owns a root directory (or URI). Each save writes ``<root>/checkpoint_<NNNNNN>`` (the
iteration, six digits or more) and, *before* that checkpoint is committed, a small record next
to it, ``<root>/checkpoint_<NNNNNN>.record.json``, holding the iteration, the ``keep_best``
metric and the env steps sampled (for ``save_every_timesteps``); a save's ``metadata`` goes
into the checkpoint's own manifest. What the manager knows is derived from the root alone, so
a new manager on the same root (a resumed run) knows every checkpoint there:

* a checkpoint counts only once it is committed (its manifest is there): :meth:`latest` lists
  the root and never trusts anything that can be stale;
* a record without a committed checkpoint belongs to a save in progress or one that did not
  finish, and is ignored; it names its writer, who renews it while the save runs, and a
  manager that starts removes it (with the uncommitted files beside it) only once that writer
  is proven gone (:mod:`cairn.checkpoint.manager_records`), so that opening a manager on a root
  another process writes never takes anything from under it; a committed checkpoint without a
  record (copied in by hand) has no metric.

Each save is checked once committed: every file its manifests list must be there with its
size (:meth:`~cairn.checkpoint.manager_store.ManagerStore.problems`), else the save fails,
saying what is missing, the broken checkpoint is removed and retention does not run.

Retention runs after each commit: the ``keep_last`` newest checkpoints, the ``n`` best by
``keep_best`` and every ``keep_every_iterations``-th stay (:mod:`cairn.checkpoint.retention`),
the others are deleted, as :meth:`CheckpointManager.delete` deletes one; the newest
checkpoint whose files are all there is never deleted, nor (with ``keep_best``) one whose
record is there but cannot be read at that moment (its metric is unknown: a warning). A checkpoint is first
made invisible (renamed to a temporary name that :func:`cairn.checkpoint.atomic.cleanup`
removes, or its manifest deleted first on a store without rename), then removed, then its
record. A crash at any point leaves
:meth:`latest` on a whole checkpoint. A deletion that fails does not fail the save, which
committed: it is a :class:`~cairn.errors.StorageCleanupWarning` saying what that checkpoint
holds now (:func:`~cairn.checkpoint.manager_store.retention_failure_warning`).

The manager knows no Algorithm class: it saves anything with ``iteration`` and
``save(path, *, blocking, storage_options, previous, metadata)``
(:class:`cairn.core.Checkpointable`).
Each save passes the latest committed checkpoint as ``previous``, so that the files of
policies that did not change are linked (copied server-side) rather than written again; each
checkpoint still stands alone, so retention may delete any of them.
"""

from __future__ import annotations

import concurrent.futures
import os
import re
import threading
import warnings
from collections.abc import Mapping
from concurrent.futures import Future
from typing import Any, Literal

from cairn.checkpoint.manager_records import RECORD_SUFFIX, RecordLease, abandoned, read_record
from cairn.checkpoint.manager_store import (
    ManagerStore,
    incomplete_save_error,
    open_store,
    retention_failure_warning,
    unread_record_warning,
)
from cairn.checkpoint.manifest import check_metadata
from cairn.checkpoint.reader import get_checkpoint_info
from cairn.checkpoint.retention import (
    KeepBest,
    ManagedCheckpoint,
    best_checkpoints,
    newest_whole,
    parse_keep_best,
    retained,
)
from cairn.checkpoint.save_future import SaveFuture
from cairn.checkpoint.save_schedule import (
    TIMESTEPS_KEY,
    SaveSchedule,
    check_count,
    result_metric,
    result_timesteps,
)
from cairn.core import Checkpointable
from cairn.errors import BackgroundSaveError, CheckpointError, CheckpointNotFoundError, ConfigError

__all__ = ["CheckpointManager", "ManagedCheckpoint", "checkpoint_name", "resolve_checkpoint"]

_NAME = re.compile(r"^checkpoint_(\d{6,})$")


class _Default:
    """The default of ``save_every_iterations``: 1, or None when ``save_every_timesteps`` is
    the rule (SB3's ``save_freq`` alone)."""

    def __repr__(self) -> str:
        return "1"


_DEFAULT_ITERATIONS = _Default()


def checkpoint_name(iteration: int) -> str:
    """The directory name of the checkpoint of ``iteration``: ``checkpoint_000010``."""
    return f"checkpoint_{iteration:06d}"


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


def _same_metric(recorded: Any, metric: str) -> bool:
    """Whether a record's ``metric_name`` names ``metric`` (nested keys joined with ``/`` or
    ``.``, as ``keep_best`` takes them)."""
    return isinstance(recorded, str) and recorded.replace(".", "/") == metric.replace(".", "/")


class CheckpointManager:
    """Save an algorithm's checkpoints under ``root`` when due; keep the last, the best, and
    every k-th.

    Args:
        root: A directory (created when missing), or a URI where the storage layer takes one.
        keep_last: How many of the newest checkpoints to keep (at least 1); None keeps all.
        keep_best: ``(metric, "max" | "min")`` or ``(metric, "max" | "min", n)``: also keep
            the ``n`` checkpoints (1 for a 2-tuple) whose results had the best value of
            ``metric``: a key of the result dict, or a nested value named as progress.csv and
            the loggers name it (keys joined with ``/``: ``"league/win_rate/random_legal"``,
            :mod:`cairn.result_names`) or with ``.`` (``"evaluation.episode_return_mean"``).
            Results without a finite value of it never count as best (nor those without
            ``evaluation``, for an evaluation metric); among equal values the newest wins. A
            result that lacks the metric otherwise, or whose value of it is no number (a group such
            as ``"evaluation"``, a string, a bool), makes :meth:`save` raise a
            :class:`~cairn.errors.ConfigError` naming it and the result's metrics; so does a
            ``league/win_rate/<opponent>`` whose opponent the result's league can never report
            (not a fixed opponent nor a snapshot ``<main>_v<n>``: a misspelt name). A
            checkpoint whose record holds another metric (saved under another ``keep_best``)
            has no metric for this manager.
        keep_every_iterations: Also keep, forever, the checkpoints of iterations that are
            multiples of this (``iteration % k == 0``); None: no such rule.
        save_every_iterations: :meth:`save` is due at iterations that are multiples of this;
            None: no iteration rule. Default 1, or None when ``save_every_timesteps`` is given.
        save_every_seconds: :meth:`save` is also due once this many seconds have passed since
            the last save (or since the manager was made); None: no time rule.
        save_every_timesteps: :meth:`save` is also due once the env steps sampled (the
            result's ``num_env_steps_sampled_lifetime``) reach a multiple of this not reached
            at the last save (Stable-Baselines3's ``save_freq``); None: no env-step rule.
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
        keep_best: tuple[str, Literal["max", "min"]] | tuple[str, Literal["max", "min"], int] | None = None,
        keep_every_iterations: int | None = None,
        save_every_iterations: int | _Default | None = _DEFAULT_ITERATIONS,
        save_every_seconds: float | None = None,
        save_every_timesteps: int | None = None,
        storage_options: Mapping[str, Any] | None = None,
    ) -> None:
        if keep_last is not None and (isinstance(keep_last, bool) or not isinstance(keep_last, int)
                                      or keep_last < 1):
            raise ConfigError(f"CheckpointManager: keep_last={keep_last!r}; expected an int >= 1 "
                              "(the latest checkpoint is always kept) or None to keep all.")
        self._keep_best: KeepBest | None = parse_keep_best(keep_best)
        check_count("keep_every_iterations", keep_every_iterations, "no such rule")
        if isinstance(save_every_iterations, _Default):
            save_every_iterations = None if save_every_timesteps is not None else 1
        self._schedule = SaveSchedule(every_iterations=save_every_iterations,
                                      every_seconds=save_every_seconds, every_timesteps=save_every_timesteps)
        self.keep_last = keep_last
        self.keep_best = keep_best
        self.keep_every_iterations = keep_every_iterations
        self.save_every_iterations = save_every_iterations
        self.save_every_seconds = save_every_seconds
        self.save_every_timesteps = save_every_timesteps
        self.storage_options = dict(storage_options) if storage_options else None
        self._store = open_store(root, self.storage_options)
        self._lock = threading.Lock()
        #: Background saves not yet reported: this manager's Future of each, and the algorithm's.
        self._unwaited: list[tuple[SaveFuture, Future[str]]] = []
        self._store.clean_stale({checkpoint_name(i) for i in _committed(self._store)},
                                is_checkpoint=lambda name: bool(_NAME.match(name)),
                                record_suffix=RECORD_SUFFIX, abandoned=abandoned)
        found = _committed(self._store)
        if found:  # a resumed run: the env steps of its latest save, when its record has them
            record = read_record(self._store, checkpoint_name(found[-1]))
            steps = record.get("timesteps") if record else None
            self._schedule.saved(found[-1], steps if type(steps) is int and steps >= 0 else None)

    @property
    def root(self) -> str:
        """The root, as a local absolute path or a URI."""
        return self._store.location("")

    # ------------------------------------------------------------------------------ queries
    def _listing(self, unread: dict[int, Exception] | None = None) -> list[ManagedCheckpoint]:
        """The committed checkpoints with their metrics (from the records), oldest first. With
        ``keep_best``, a record's metric counts only when it is of the same metric (a manager
        restarted with another ``keep_best`` metric must not rank the old values as the new).
        With ``unread`` (retention), a record that is there but cannot be read is no metric
        here and its error goes into ``unread`` by iteration, instead of passing for none."""
        out = []
        for iteration in _committed(self._store):
            try:
                record = read_record(self._store, checkpoint_name(iteration), strict=unread is not None)
            except (CheckpointError, OSError, ValueError) as exc:
                assert unread is not None
                unread[iteration], record = exc, None
            value = record.get("metric") if record else None
            best = self._keep_best
            if record and best and not _same_metric(record.get("metric_name"), best.metric):
                value = None
            metric = float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None
            out.append(ManagedCheckpoint(iteration, self._store.location(checkpoint_name(iteration)), metric))
        return out

    def checkpoints(self) -> list[ManagedCheckpoint]:
        """Every committed checkpoint under the root, oldest iteration first, with its metric
        (from the manager's record) and its ``metadata`` (from its manifest)."""
        out = []
        for checkpoint in self._listing():
            try:
                info = get_checkpoint_info(checkpoint.path, storage_options=self.storage_options)
            except CheckpointNotFoundError:
                continue  # deleted meanwhile (retention of a background save)
            out.append(ManagedCheckpoint(checkpoint.iteration, checkpoint.path, checkpoint.metric,
                                         info.get("metadata")))
        return out

    def latest(self) -> str | None:
        """The location of the committed checkpoint of the highest iteration; None if none."""
        found = _committed(self._store)
        return self._store.location(checkpoint_name(found[-1])) if found else None

    def best(self) -> str | None:
        """The location of the checkpoint with the best ``keep_best`` metric (the newest among
        equals); None without ``keep_best`` or without a checkpoint that has the metric."""
        chosen = best_checkpoints(self._listing(), self._keep_best)
        return chosen[0].path if chosen else None

    def due(self, iteration: int, timesteps: int | None = None) -> bool:
        """Whether :meth:`save` at ``iteration`` would save: an iteration not saved yet that is
        a multiple of ``save_every_iterations``, or ``save_every_seconds`` have passed, or
        ``timesteps`` (env steps sampled so far; :meth:`save` takes them from the result)
        reached a multiple of ``save_every_timesteps`` not reached at the last save."""
        return self._schedule.due(iteration, timesteps)

    # ------------------------------------------------------------------------------- saving
    def save(
        self, algo: Checkpointable, result: Mapping[str, Any] | None = None, *,
        blocking: bool = True, force: bool = False, metadata: Mapping[str, Any] | None = None,
    ) -> str | Future[str] | None:
        """Save ``algo`` as ``<root>/checkpoint_<iteration>`` if a save is due (:meth:`due`) or
        ``force``; then delete the checkpoints that retention no longer keeps.

        Args:
            algo: What to save (an Algorithm): its ``iteration`` names the checkpoint.
            result: The result dict of the iteration (``algo.train()``'s), for ``keep_best``
                and ``save_every_timesteps`` (its ``num_env_steps_sampled_lifetime``).
            blocking: False: return at once, with the write in the background (see
                ``Algorithm.save``); retention runs when the write is committed.
            force: Save even if not due (an iteration already saved is saved again).
            metadata: JSON data (a dict) stored in the checkpoint's manifest, returned by
                :meth:`checkpoints` and ``cairn.get_checkpoint_info(path)["metadata"]``.

        Returns:
            None when no save was due. Otherwise the checkpoint's location (``blocking=True``)
            or a ``concurrent.futures.Future`` of it, done once the checkpoint is committed and
            retention has run (``blocking=False``).

        Raises:
            BackgroundSaveError: an earlier background save or its retention failed and
                nothing has reported it yet (raised once, here or from :meth:`wait`; a save
                that is not due raises it too). Nothing was saved by this call.
            CheckpointError: ``algo.iteration`` is lower than the latest checkpoint's under the
                root (this root holds a later run), or ``metadata`` is not JSON data.
            ConfigError: ``save_every_timesteps`` is set and ``result`` has no env-step count.
        """
        self._raise_errors()
        metadata = check_metadata(metadata)
        iteration = int(algo.iteration)
        timesteps = result_timesteps(result)
        if self.save_every_timesteps is not None and timesteps is None:
            raise ConfigError(
                f"CheckpointManager(save_every_timesteps={self.save_every_timesteps}).save() needs the "
                f"env steps sampled so far: pass the result of algo.train() (its {TIMESTEPS_KEY!r}) "
                "as result=.")
        if not (force or self.due(iteration, timesteps)):
            return None
        self._wait_in_flight()
        committed = _committed(self._store)
        last = self._schedule.last_iteration
        latest = max([*committed[-1:], *([] if last is None else [last])], default=None)
        if latest is not None and iteration < latest:
            raise CheckpointError(
                f"Cannot save iteration {iteration} under {self.root}: it already holds a checkpoint "
                f"of the later iteration {latest} ({checkpoint_name(latest)}), and checkpoints of "
                "one root must go forward. Resume from the latest (Algorithm.from_checkpoint(root)), "
                "or save this run under a new root.")
        name = checkpoint_name(iteration)
        best = self._keep_best
        metric = result_metric(result, best.metric) if best else None
        # The record goes first: a checkpoint is committed with its metric already stored. It
        # names this process, which renews it until the save is over (manager_records).
        lease = RecordLease(self._store, name, iteration=iteration, metric=metric,
                            metric_name=best.metric if best else None, timesteps=timesteps,
                            replacing=iteration in committed)
        location = self._store.location(name)
        previous = self._store.location(checkpoint_name(committed[-1])) if committed else None
        extra: dict[str, Any] = {} if metadata is None else {"metadata": metadata}
        try:
            saved = algo.save(location, blocking=blocking, storage_options=self.storage_options,
                              previous=previous if previous != location else None, **extra)
        except BaseException:
            lease.abandon()
            raise
        if blocking:
            self._check_whole(iteration, lease)
            self._schedule.saved(iteration, timesteps)
            self._retain(whole=iteration)
            return str(saved)
        # Saved as far as due() is concerned while the write runs; forgotten if it fails.
        before = self._schedule.saved(iteration, timesteps)
        # The manager's Future passes the write's error on: once it has delivered it, the
        # algorithm does not raise it again (cairn.checkpoint.save_future).
        done = SaveFuture(lambda _: saved.delivered() if isinstance(saved, SaveFuture) else None)
        with self._lock:
            self._unwaited.append((done, saved))
        saved.add_done_callback(
            lambda written: self._committed_in_background(written, done, iteration, lease, before))
        return done

    def _wait_in_flight(self) -> None:
        """Wait for this manager's background saves in flight, with their commit and retention
        (the algorithm would wait for its write anyway; this also lets retention finish)."""
        self._raise_errors()
        with self._lock:
            in_flight = [done for done, _ in self._unwaited if not done.done()]
        concurrent.futures.wait(in_flight)  # not exception(): that would count as delivered
        self._raise_errors()

    def delete(self, iteration: int) -> None:
        """Delete the checkpoint of ``iteration`` (and its record), as retention does: it stops
        being a checkpoint in one step before its files go, so a crash leaves it whole or gone.
        Waits for this manager's background saves first.

        Raises:
            CheckpointError: there is no committed checkpoint of ``iteration`` under the root
                (the message lists the iterations there are).
        """
        self._wait_in_flight()
        with self._lock:
            committed = _committed(self._store)
            if iteration not in committed:
                raise CheckpointError(
                    f"CheckpointManager.delete({iteration!r}): {self.root} holds no checkpoint of "
                    f"iteration {iteration!r}; its checkpoints are of iterations {committed}.")
            self._remove(iteration)

    def _remove(self, iteration: int) -> None:
        name = checkpoint_name(iteration)
        self._store.remove_checkpoint(name)  # no longer committed before any file goes
        self._store.remove_file(name + RECORD_SUFFIX)

    def _committed_in_background(self, written: Future[Any], done: Future[str], iteration: int,
                                 lease: RecordLease, before: tuple[int | None, float, int]) -> None:
        """After a background write (in the writer's thread): the check that its files are
        there, retention, then ``done``. A write that failed, or whose checkpoint was removed
        as broken, is forgotten by the schedule (``before``: its state before that save), as a
        blocking save that raises never enters it: the next call is due again."""
        failed = (written.undelivered_exception() if isinstance(written, SaveFuture)
                  else written.exception())
        if failed is not None:  # the saved object raises it again itself, unless done delivers it
            lease.abandon()
            self._schedule.unsaved(before)
            done.set_exception(failed)
            return
        location = str(written.result())
        try:
            self._check_whole(iteration, lease)
        except BaseException as exc:  # to the future, else to the next save() or wait()
            self._schedule.unsaved(before)
            done.set_exception(exc)
            return
        try:
            self._retain(whole=iteration)
        except BaseException as exc:
            done.set_exception(exc)
        else:
            done.set_result(location)

    def _check_whole(self, iteration: int, lease: RecordLease) -> None:
        """Raise if the just committed checkpoint of ``iteration`` lacks a file its manifests
        list (someone deleted it while it was written), once it is removed, so that
        :meth:`latest` is the previous checkpoint again (:meth:`RecordLease.finish`)."""
        with self._lock:
            problems = lease.finish()
        if problems:
            raise incomplete_save_error(self._store.location(checkpoint_name(iteration)), problems,
                                        latest=self.latest())

    def _retain(self, *, whole: int) -> None:
        """Delete the committed checkpoints that no rule keeps (``keep_last``, ``keep_best``,
        ``keep_every_iterations``: :func:`cairn.checkpoint.retention.retained`), but never the
        newest one whose files are all there (``whole``: an iteration just checked), nor, with
        ``keep_best``, one whose record is there but cannot be read now (a store that failed to
        answer): its metric is unknown, so it may be the best (a warning says so)."""
        with self._lock:
            unread: dict[int, Exception] = {}
            checkpoints = self._listing(unread if self._keep_best else None)
            keep = retained(checkpoints, keep_last=self.keep_last, keep_best=self._keep_best,
                            keep_every_iterations=self.keep_every_iterations)
            if any(checkpoint.iteration not in keep for checkpoint in checkpoints):
                keep.update(newest_whole(checkpoints, lambda c: c.iteration == whole or not
                                         self._store.problems(checkpoint_name(c.iteration))))
            for iteration, exc in unread.items():
                if iteration not in keep and self._keep_best:
                    keep.add(iteration)
                    name = checkpoint_name(iteration)
                    warnings.warn(unread_record_warning(self._store, name, name + RECORD_SUFFIX, exc,
                                                        metric=self._keep_best.metric), stacklevel=3)
            for checkpoint in checkpoints:
                if checkpoint.iteration not in keep:
                    try:
                        self._remove(checkpoint.iteration)
                    except (CheckpointError, OSError) as exc:  # the save committed: never say it failed
                        warnings.warn(retention_failure_warning(
                            self._store, checkpoint_name(checkpoint.iteration), exc,
                            saved=self._store.location(checkpoint_name(whole))),
                            stacklevel=3)

    def wait(self) -> None:
        """Wait until every background save of this manager since the last ``wait()`` is
        committed and retention has run.

        Raises:
            BackgroundSaveError: one of this manager's background saves failed (its write or
                its retention) and nothing has reported it yet: not its Future (``result()``,
                ``exception()``), not an earlier ``save()`` or ``wait()`` of this manager, not
                the algorithm (whose next ``save()`` or ``stop()`` raises a failed write that
                nobody reported). Each failure is raised once; the first is raised, its cause
                chained, and the message counts the others.
        """
        with self._lock:
            unwaited = [done for done, _ in self._unwaited]
        concurrent.futures.wait(unwaited)  # not exception(): that would count as delivered
        self._raise_errors()

    def _raise_errors(self) -> None:
        """Raise (once) the failures of finished background saves that nobody reported (see
        :meth:`wait`), and forget the finished saves."""
        with self._lock:
            finished = [pair for pair in self._unwaited if pair[0].done()]
            self._unwaited = [pair for pair in self._unwaited if not pair[0].done()]
        owed = [done for done, saved in finished if not done.is_delivered
                and not (isinstance(saved, SaveFuture) and saved.is_delivered)
                and done.undelivered_exception() is not None]
        for done in owed:
            done.delivered()  # and so the algorithm's Future: the algorithm does not raise it again
        if owed:
            raise self._error(owed[0].undelivered_exception(), others=len(owed) - 1)

    def _error(self, cause: BaseException | None, *, others: int) -> BackgroundSaveError:
        more = f" ({others} later background save(s) failed too)" if others else ""
        error = BackgroundSaveError(
            f"A background save under {self.root} failed: {cause}{more}. The checkpoints "
            "committed before it are intact; fix the cause and save again.")
        error.__cause__ = cause
        return error

    def __repr__(self) -> str:
        return (f"CheckpointManager({self.root!r}, keep_last={self.keep_last}, keep_best={self.keep_best}, "
                f"keep_every_iterations={self.keep_every_iterations}, "
                f"save_every_iterations={self.save_every_iterations}, "
                f"save_every_seconds={self.save_every_seconds}, "
                f"save_every_timesteps={self.save_every_timesteps})")
