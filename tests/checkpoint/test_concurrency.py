"""Concurrent writers and readers of one checkpoint path.

* Two processes saving to the same path at once: afterwards it holds one complete checkpoint
  (the last one moved in), and no temporary directory is left.
* A reader opening a checkpoint while it is being replaced reads every file from the directory
  it opened first (one consistent checkpoint), and retries when the writer deleted that old
  directory's files under it (docs/security.md, "Concurrent readers").
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from cairn.algorithms.algorithm import Algorithm
from cairn.checkpoint.reader import load_algorithm_state
from cairn.errors import CheckpointCorruptedError, CheckpointNotFoundError
from tests.checkpoint.attacks import base_checkpoints


@pytest.fixture(scope="module")
def algo() -> Any:
    algo = Algorithm.from_checkpoint(base_checkpoints() / "algo")
    yield algo
    algo.stop()


def _mark(algo: Any, value: int) -> None:
    """Make the algorithm state and the policy files tell which save wrote them."""
    algo.iteration = value
    algo.get_policy().global_timestep = value


def _consistent_value(path: Path) -> int:
    state = load_algorithm_state(path)
    value = state["iteration"]
    assert state["policies"]["default_policy"]["counters"]["global_timestep"] == value, \
        "algorithm state and policy files come from different saves"
    return int(value)


def test_two_processes_save_the_same_path(algo: Any, tmp_path: Path) -> None:
    target = tmp_path / "checkpoint"
    for round_ in range(6):
        pids = []
        for writer in (1, 2):
            pid = os.fork()
            if pid == 0:
                try:
                    _mark(algo, 100 * round_ + writer)
                    for _ in range(3):
                        algo.save(target)
                    os._exit(0)
                except BaseException:
                    os._exit(3)
            pids.append(pid)
        for pid in pids:
            _, status = os.waitpid(pid, 0)
            assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
        assert _consistent_value(target) in (100 * round_ + 1, 100 * round_ + 2)
        assert [p.name for p in tmp_path.iterdir()] == ["checkpoint"]


def test_reader_sees_old_or_new_whole_while_replaced(algo: Any, tmp_path: Path) -> None:
    """The writer replaces the checkpoint while the reader loads it, one save per load: it saves
    value k once the reader has seen k - 1, so each save overlaps a load, and a load meets at most
    one replacement, which its retry survives. (With a writer saving freely and a 3 s window,
    a loaded machine can let the writer replace the checkpoint faster than the reader reads it:
    few values seen, many failed loads.)"""
    target = tmp_path / "checkpoint"
    _mark(algo, 0)
    algo.save(target)
    go_read, go_write = os.pipe()
    pid = os.fork()
    if pid == 0:  # writer: one save per token, until the pipe closes
        try:
            os.close(go_write)
            value = 1
            while os.read(go_read, 1):
                _mark(algo, value)
                algo.save(target)
                value += 1
        finally:
            os._exit(0)
    os.close(go_read)
    seen: list[int] = []
    failures, granted, last = 0, 0, 6
    deadline = time.monotonic() + 120.0
    try:
        while not (seen and seen[-1] == last) and time.monotonic() < deadline:
            if granted < last and (not seen or seen[-1] == granted):
                granted += 1
                os.write(go_write, b"x")  # save `granted` while the next loads run
            try:
                value = _consistent_value(target)
            except (CheckpointNotFoundError, CheckpointCorruptedError):
                failures += 1
                continue
            assert not seen or value >= seen[-1], (value, seen)  # never an older checkpoint again
            seen.append(value)
    finally:
        os.close(go_write)
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    assert set(seen) == set(range(last + 1)), sorted(set(seen))
    assert failures == 0, failures  # one replacement per load: the reader's retry covers it
