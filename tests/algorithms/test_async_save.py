"""Algorithm.save(blocking=False): a snapshot taken before save returns, written in one
background thread, one write at a time, errors raised from the Future and again from the next
save() or stop(), and stop() flushes."""

from __future__ import annotations

import concurrent.futures
import os
import threading
import time
from concurrent.futures import Future
from typing import Any

import pytest

import cairn
from cairn.algorithms import save_restore
from cairn.errors import BackgroundSaveError
from tests.helpers import assert_trees_equal, small_ppo, weights_digest


class GatedWriter:
    """Wraps the checkpoint writer: records the thread and overlap of each write, and holds
    each write until ``gate`` is set, so that tests control when a background write ends."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.gate = threading.Event()
        self.started = threading.Event()
        self.threads: list[str] = []
        self.order: list[str] = []
        self.active = 0
        self.max_active = 0
        self._lock = threading.Lock()
        self._write = save_restore.write_algorithm_checkpoint
        monkeypatch.setattr(save_restore, "write_algorithm_checkpoint", self)

    def __call__(self, path: Any, state: Any, **kwargs: Any) -> str:
        with self._lock:
            self.active += 1
            self.max_active = max(self.max_active, self.active)
            self.threads.append(threading.current_thread().name)
        self.started.set()
        try:
            assert self.gate.wait(30), "the test never opened the gate"
            result = self._write(path, state, **kwargs)
            self.order.append(os.path.basename(str(path)))  # a path or a Storage
            return result
        finally:
            with self._lock:
                self.active -= 1


def _release_after(event: threading.Event, seconds: float) -> threading.Thread:
    thread = threading.Thread(target=lambda: (time.sleep(seconds), event.set()))
    thread.start()
    return thread


def test_the_snapshot_is_taken_before_save_returns_and_training_never_leaks_in(tmp_path, monkeypatch):
    algo = small_ppo().build()
    algo.train()
    snapshot = algo.get_state()
    writer = GatedWriter(monkeypatch)
    future = algo.save(tmp_path / "c", blocking=False)
    assert isinstance(future, Future)
    assert writer.started.wait(10) and not future.done()  # written in the background...
    before = weights_digest(algo)
    algo.train()  # ...while training goes on, before the write has begun
    algo.train()
    assert weights_digest(algo) != before
    writer.gate.set()
    assert future.result(30) == str(tmp_path / "c")
    assert writer.threads == ["cairn-save_0"]
    restored = cairn.Algorithm.from_checkpoint(tmp_path / "c")
    assert_trees_equal(restored.get_state(), snapshot)
    algo.stop()
    restored.stop()


def test_a_second_save_waits_for_the_write_in_flight(tmp_path, monkeypatch):
    """The rule is "wait", not "coalesce": every save is written, in order, one at a time."""
    algo = small_ppo().build()
    writer = GatedWriter(monkeypatch)
    first = algo.save(tmp_path / "first", blocking=False)
    assert writer.started.wait(10)
    releaser = _release_after(writer.gate, 0.3)
    second = algo.save(tmp_path / "second", blocking=False)  # returns once "first" is written
    assert writer.gate.is_set() and first.done()
    assert second.result(30) == str(tmp_path / "second")
    assert algo.save(tmp_path / "third") == str(tmp_path / "third")  # blocking waits as well
    releaser.join()
    assert writer.order == ["first", "second", "third"]
    assert writer.max_active == 1
    algo.stop()


def test_a_failed_write_not_looked_at_is_raised_by_the_next_save_once(tmp_path):
    algo = small_ppo().build()
    blocker = tmp_path / "a_file"
    blocker.write_text("not a directory")
    future = algo.save(blocker / "ckpt", blocking=False)  # its parent is a file: unwritable
    concurrent.futures.wait([future], timeout=30)  # done, but its error not asked for
    with pytest.raises(BackgroundSaveError, match="a_file/ckpt") as raised:
        algo.save(tmp_path / "next")
    assert isinstance(raised.value.__cause__, OSError)
    assert not (tmp_path / "next").exists()  # the failing call saved nothing
    assert algo.save(tmp_path / "next") == str(tmp_path / "next")  # raised once, then clear
    assert isinstance(future.exception(), OSError)  # the Future still holds it
    algo.stop()


@pytest.mark.parametrize("deliver", ["result", "exception"])
def test_a_failure_the_future_delivered_is_not_raised_again(tmp_path, deliver):
    """Issue 25, item 9: after ``future.result()`` raised the error (or ``exception()``
    returned it), the next ``save()`` went on raising BackgroundSaveError and wrote nothing,
    and ``stop()`` raised it again."""
    algo = small_ppo().build()
    blocker = tmp_path / "a_file"
    blocker.write_text("not a directory")
    future = algo.save(blocker / "ckpt", blocking=False)
    if deliver == "result":
        with pytest.raises(OSError, match="a_file/ckpt"):
            future.result(30)
    else:
        assert isinstance(future.exception(30), OSError)
    assert algo.save(tmp_path / "next") == str(tmp_path / "next")
    assert algo.save(tmp_path / "later", blocking=False).result(30) == str(tmp_path / "later")
    algo.stop()  # nothing owed


def test_stop_flushes_the_write_in_flight_and_raises_a_failure_no_save_raised(tmp_path, monkeypatch):
    algo = small_ppo().build()
    writer = GatedWriter(monkeypatch)
    future = algo.save(tmp_path / "c", blocking=False)
    assert writer.started.wait(10)
    releaser = _release_after(writer.gate, 0.2)
    algo.stop()
    assert future.done() and (tmp_path / "c" / "cairn_checkpoint.json").is_file()
    releaser.join()

    other = small_ppo().build()
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    other.save(blocker / "ckpt", blocking=False)
    with pytest.raises(BackgroundSaveError, match="a_file/ckpt"):
        other.stop()
    other.stop()  # the failure was raised once


def test_background_writes_do_not_change_training(tmp_path):
    """Checkpointing every iteration in the background trains bit for bit as not saving, and
    what was written resumes exactly."""
    saving, plain = small_ppo().build(), small_ppo().build()
    futures = []
    for _ in range(3):
        saving.train()
        plain.train()
        futures.append(saving.save(tmp_path / f"c{saving.iteration}", blocking=False))
    assert weights_digest(saving) == weights_digest(plain)
    assert_trees_equal(saving.get_state(), plain.get_state())
    assert futures[-1].result(30) == str(tmp_path / "c3")
    resumed = cairn.Algorithm.from_checkpoint(futures[1].result())
    resumed.train()
    assert_trees_equal(resumed.get_state(), plain.get_state())
    for algo in (saving, plain, resumed):
        algo.stop()


def test_native_model_files_of_a_background_save_are_those_of_the_snapshot(tmp_path, monkeypatch):
    """With export_native_model_files, the model files are exported from copies of the
    snapshot's policies, not from the live ones that train on meanwhile (the torch program
    only: ONNX export, tested in tests/export, takes most of a minute here)."""
    from cairn.export import checkpoint_files
    from tests.export.conftest import check_model_dir

    monkeypatch.setattr(checkpoint_files, "missing_onnx_packages", lambda: ["onnx (left out by the test)"])

    algo = small_ppo().checkpointing(export_native_model_files=True).build()
    algo.train()
    at_save = cairn.Policy.from_state(algo.get_policy().get_state())
    writer = GatedWriter(monkeypatch)
    future = algo.save(tmp_path / "c", blocking=False)
    assert writer.started.wait(10)
    algo.train()  # before the export has begun
    writer.gate.set()
    check_model_dir(at_save, tmp_path / future.result(60) / "policies" / "default_policy" / "model")
    assert weights_digest(algo) != weights_digest(cairn.Algorithm.from_checkpoint(tmp_path / "c"))
    algo.stop()
