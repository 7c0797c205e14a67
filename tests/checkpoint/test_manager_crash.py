"""A CheckpointManager killed (SIGKILL) at any step of a save and its retention: latest() is a
whole checkpoint, older ones are gone only if the new one is committed, the metrics survive,
and the next manager on the root removes every leftover.

The test process builds the algorithm once and forks a child per trial, as
tests/checkpoint/test_crash_safety.py does: the child counts the file-system steps of one
``manager.save`` (writes, fsyncs, mkdirs, renames, unlinks, of the record, the checkpoint and
the deletions) and SIGKILLs itself at the chosen one.
"""

from __future__ import annotations

import os
import shutil
import signal
from pathlib import Path
from typing import Any

import pytest

import cairn
from cairn.checkpoint.manager import checkpoint_name
from cairn.checkpoint.reader import load_algorithm_state
from cairn.cli.run_checkpoints import list_checkpoints
from tests.checkpoint.crash_child import run_in_child
from tests.helpers import small_ppo

SCORES = {1: 1.0, 2: 5.0, 3: 2.0}  # after iteration 3: keep_last=2 keeps 2 and 3, 2 is best


def _manager(root: Path) -> cairn.CheckpointManager:
    return cairn.CheckpointManager(root, keep_last=2, keep_best=("score", "max"))


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Any:
    template = tmp_path_factory.mktemp("template")
    algo = small_ppo(train_batch_size=64, minibatch_size=32, num_epochs=1).build()
    manager = _manager(template)
    for iteration in (1, 2):
        algo.iteration = iteration
        manager.save(algo, {"score": SCORES[iteration]})
    algo.iteration = 3
    yield algo, template
    algo.stop()


def _child(algo: cairn.Algorithm, root: Path, blocking: bool, kill_at: int | None,
           count_file: Path | None) -> int:
    manager = _manager(root)  # cleans up as a resumed run would, before the child's first step

    def action() -> None:
        manager.save(algo, {"score": SCORES[3]}, blocking=blocking)
        manager.wait()

    return run_in_child(action, kill_at, count_file)


def _check(root: Path, algo: cairn.Algorithm) -> int:
    """What a resumed run finds after the kill; returns the latest iteration."""
    manager = _manager(root)  # cleans what the killed save left
    latest = manager.latest()
    assert latest is not None
    iteration = load_algorithm_state(latest)["iteration"]  # whole: every hash verifies
    assert latest == str(root / checkpoint_name(iteration)) and iteration in (2, 3)
    kept = manager.checkpoints()
    for checkpoint in kept:
        assert load_algorithm_state(checkpoint.path)["iteration"] == checkpoint.iteration
    iterations = [c.iteration for c in kept]
    if iteration == 2:
        assert iterations == [1, 2], "a checkpoint was deleted before the new one was committed"
    else:
        assert iterations in ([1, 2, 3], [2, 3])
    assert {c.iteration: c.metric for c in kept} == {i: SCORES[i] for i in iterations}
    assert manager.best() == str(root / checkpoint_name(2))
    names = sorted(os.listdir(root))
    assert names == sorted([checkpoint_name(i) for i in iterations]
                           + [checkpoint_name(i) + ".record.json" for i in iterations]), names
    manager.save(algo, {"score": SCORES[3]}, force=True)  # the next save completes the run
    assert [c.iteration for c in manager.checkpoints()] == [2, 3]
    return iteration


@pytest.mark.parametrize("blocking", [True, False], ids=["blocking", "background"])
def test_a_save_killed_at_any_step_leaves_latest_whole(setup, tmp_path, blocking):
    algo, template = setup
    root = tmp_path / "root"

    def fresh() -> None:
        shutil.rmtree(root, ignore_errors=True)
        shutil.copytree(template, root)

    fresh()
    count_file = tmp_path / "steps"
    assert _child(algo, root, blocking, None, count_file) == 0
    total = int(count_file.read_text())
    assert total > 20, total
    assert _check(root, algo) == 3
    kill_points = sorted({max(1, round(i * total / 12)) for i in range(1, 13)} | {1, total - 1})
    outcomes = set()
    for kill_at in kill_points:
        fresh()
        status = _child(algo, root, blocking, kill_at, None)
        assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL, (kill_at, total)
        outcomes.add(_check(root, algo))
    assert outcomes == {2, 3}  # kills before and after the commit were both tried


def test_a_replacement_killed_at_any_step_keeps_each_checkpoints_own_metric(setup, tmp_path):
    """save(force=True) of iteration 2 (score 5.0, the best) writes its record (score 0.5) before
    the new checkpoint: killed before the commit, the old checkpoint 2 must still rank by 5.0,
    else the next save's keep_best would keep the wrong checkpoint and best() names a result it
    never had; killed after it, the new checkpoint ranks by 0.5. The new one carries metadata."""
    algo, template = setup
    root = tmp_path / "root"

    def fresh() -> None:
        shutil.rmtree(root, ignore_errors=True)
        shutil.copytree(template, root)

    def child(kill_at: int | None, count_file: Path | None) -> int:
        manager = _manager(root)
        algo.iteration = 2

        def action() -> None:
            manager.save(algo, {"score": 0.5}, force=True, metadata={"save": "replacement"})

        try:
            return run_in_child(action, kill_at, count_file)
        finally:
            algo.iteration = 3

    fresh()
    count_file = tmp_path / "steps"
    assert child(None, count_file) == 0
    total = int(count_file.read_text())
    kill_points = sorted({max(1, round(i * total / 12)) for i in range(1, 13)} | {1, total - 1})
    outcomes = set()
    for kill_at in kill_points:
        fresh()
        status = child(kill_at, None)
        assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL, (kill_at, total)
        manager = _manager(root)
        kept = {c.iteration: c for c in manager.checkpoints()}
        assert sorted(kept) == [1, 2], kill_at
        replaced = kept[2].metadata == {"save": "replacement"}
        assert kept[2].metric == (0.5 if replaced else SCORES[2]), (kill_at, replaced)
        listed = {c.iteration: c.metric for c in list_checkpoints(str(root))}  # cairn checkpoint ls
        assert listed == {i: c.metric for i, c in kept.items()}, kill_at
        assert manager.best() == str(root / checkpoint_name(2 if not replaced else 1)), kill_at
        outcomes.add(replaced)
    assert outcomes == {False, True}  # kills before and after the commit were both tried
