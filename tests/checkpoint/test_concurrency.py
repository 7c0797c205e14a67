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
    target = tmp_path / "checkpoint"
    _mark(algo, 0)
    algo.save(target)
    pid = os.fork()
    if pid == 0:  # writer: replace the checkpoint again and again
        try:
            value = 1
            while True:
                _mark(algo, value)
                algo.save(target)
                value += 1
        finally:
            os._exit(0)
    seen: set[int] = set()
    failures = 0
    deadline = time.monotonic() + 3.0
    try:
        while time.monotonic() < deadline:
            try:
                seen.add(_consistent_value(target))
            except (CheckpointNotFoundError, CheckpointCorruptedError):
                failures += 1  # every retry lost its directory: a caller retries again
    finally:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    assert len(seen) > 3, seen
    assert failures <= len(seen), (failures, len(seen))
