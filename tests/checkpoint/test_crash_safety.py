"""Crash safety: a save killed with SIGKILL at any step never destroys the last good checkpoint,
never leaves a partial checkpoint that loads, and leaves only recognisable leftovers that the
next save (or cairn.checkpoint.cleanup) removes.

The test process builds the algorithm once and forks one child per trial. The child counts the
save's steps (each write, fsync, mkdir, rename, exchange and unlink) and SIGKILLs itself at the
chosen one; a first child counts the steps of a whole save, so the trials cover all of it.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import cairn
from cairn.checkpoint import cleanup
from cairn.checkpoint import writer_files as writer_module
from cairn.checkpoint.atomic import OLD_MARKER, TMP_MARKER
from cairn.checkpoint.reader import load_algorithm_state, load_policy_state
from cairn.errors import CheckpointError
from tests.checkpoint.crash_child import run_in_child


def _fingerprint(state: dict[str, Any]) -> str:
    digest = hashlib.sha256()

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            for key in sorted(node):
                digest.update(key.encode())
                walk(node[key])
        elif isinstance(node, list):
            for item in node:
                walk(item)
        elif isinstance(node, np.ndarray):
            digest.update(np.ascontiguousarray(node).tobytes())
        else:
            digest.update(repr(node).encode())

    walk(state)
    return digest.hexdigest()


def fingerprint(path: Path, kind: str) -> str:
    """The content of a checkpoint as loaded (raises CheckpointError if it does not load)."""
    state = load_algorithm_state(path) if kind == "algo" else load_policy_state(path)
    return _fingerprint(state)


class Scenario:
    def __init__(self, name: str, kind: str, save: Callable[[Path], Any], old: Path | None) -> None:
        self.name, self.kind, self.save, self.old = name, kind, save, old


@pytest.fixture(scope="module")
def scenarios(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("crash")
    algo = (cairn.PPOConfig().environment("CartPole-v1")
            .training(train_batch_size=64, minibatch_size=32, num_epochs=1)
            .debugging(seed=0).build())
    algo.train()
    algo.save(root / "old_algo")
    policy = algo.get_policy()
    policy.export_checkpoint(root / "old_policy")
    algo.train()  # the state the killed saves write
    algo.save(root / "new_algo")
    policy.export_checkpoint(root / "new_policy")
    out = {
        "fresh": Scenario("fresh", "algo", algo.save, None),
        "over_existing": Scenario("over_existing", "algo", algo.save, root / "old_algo"),
        "policy_export": Scenario("policy_export", "policy", policy.export_checkpoint, root / "old_policy"),
        "expected": {
            "algo": {fingerprint(root / "old_algo", "algo"), fingerprint(root / "new_algo", "algo")},
            "policy": {fingerprint(root / "old_policy", "policy"),
                       fingerprint(root / "new_policy", "policy")},
        },
        "new": {"algo": fingerprint(root / "new_algo", "algo"),
                "policy": fingerprint(root / "new_policy", "policy")},
    }
    yield out
    algo.stop()




def _run_child(scenario: Scenario, target: Path, kill_at: int | None, count_file: Path | None) -> int:
    """Fork a child that saves to ``target`` and SIGKILLs itself at step ``kill_at`` (each
    chunk a file is written in is a step too)."""
    return run_in_child(lambda: scenario.save(target), kill_at, count_file,
                        also=[(writer_module.HashingFile, "write")])


def _prepare(scenario: Scenario, target: Path) -> None:
    if target.parent.exists():
        shutil.rmtree(target.parent)
    target.parent.mkdir(parents=True)
    if scenario.old is not None:
        shutil.copytree(scenario.old, target)


def _check_after_kill(scenario: Scenario, target: Path, expected: set[str], new: str) -> None:
    parent = target.parent
    if target.exists():
        assert fingerprint(target, scenario.kind) in expected, "the path holds a mix of checkpoints"
    else:
        assert scenario.old is None, "the previous checkpoint was lost"
    if scenario.old is not None:
        # the old checkpoint may only be replaced by the complete new one
        assert fingerprint(target, scenario.kind) in expected
    leftovers = [p for p in parent.iterdir() if p.name != target.name]
    for leftover in leftovers:
        assert leftover.name.startswith(f".{target.name}") and (
            TMP_MARKER in leftover.name or OLD_MARKER in leftover.name), leftover.name
        try:
            content = fingerprint(leftover, scenario.kind)
        except CheckpointError:
            continue  # a partial checkpoint never loads
        assert content in expected, f"{leftover.name} loads as something else than old or new"


def _trials(scenario: Scenario, root: Path, expected: set[str], new: str, count: int) -> int:
    target = root / scenario.name / "checkpoint"
    _prepare(scenario, target)
    count_file = root / f"{scenario.name}.steps"
    assert _run_child(scenario, target, None, count_file) == 0
    total = int(count_file.read_text())
    assert total > 20, total
    assert fingerprint(target, scenario.kind) == new
    kill_points = sorted({max(1, round(i * total / count)) for i in range(1, count + 1)})
    killed = 0
    for index, kill_at in enumerate(kill_points):
        _prepare(scenario, target)
        status = _run_child(scenario, target, kill_at, None)
        if os.WIFSIGNALED(status):
            assert os.WTERMSIG(status) == signal.SIGKILL
            killed += 1
        else:
            raise AssertionError(f"the child was not killed at step {kill_at} of {total}")
        _check_after_kill(scenario, target, expected, new)
        if index % 2:  # the next save removes the leftovers of the killed one
            scenario.save(target)
        else:
            cleanup(target.parent)
        assert sorted(p.name for p in target.parent.iterdir()) == [target.name] or scenario.old is None
        assert [p.name for p in target.parent.iterdir() if p.name != target.name] == []
        if target.exists():
            assert fingerprint(target, scenario.kind) in expected
    return killed


def _timed_trials(scenario: Scenario, root: Path, expected: set[str], new: str, count: int) -> None:
    """Kills by wall-clock time instead of by step, in case a step hook hides a window."""
    target = root / f"{scenario.name}-timed" / "checkpoint"
    start = time.perf_counter()
    _prepare(scenario, target)
    _run_child(scenario, target, None, None)
    duration = time.perf_counter() - start
    for i in range(count):
        _prepare(scenario, target)
        pid = os.fork()
        if pid == 0:
            try:
                scenario.save(target)
            finally:
                os._exit(0)
        time.sleep(duration * i / count)
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        _check_after_kill(scenario, target, expected, new)
        cleanup(target.parent)
        assert [p.name for p in target.parent.iterdir() if p.name != target.name] == []


@pytest.mark.parametrize("name", ["fresh", "over_existing", "policy_export"])
def test_kill_at_a_few_steps(name: str, scenarios: dict[str, Any], tmp_path: Path) -> None:
    scenario = scenarios[name]
    killed = _trials(scenario, tmp_path, scenarios["expected"][scenario.kind],
                     scenarios["new"][scenario.kind], count=6)
    assert killed >= 5


@pytest.mark.slow
@pytest.mark.parametrize("name", ["fresh", "over_existing", "policy_export"])
def test_kill_at_every_part_of_the_save(name: str, scenarios: dict[str, Any], tmp_path: Path) -> None:
    """Over 100 kills in all: 45 step-chosen points per scenario, plus 10 timed ones."""
    scenario = scenarios[name]
    expected, new = scenarios["expected"][scenario.kind], scenarios["new"][scenario.kind]
    killed = _trials(scenario, tmp_path, expected, new, count=45)
    assert killed >= 25  # every kill point of the save, up to 45 of them
    _timed_trials(scenario, tmp_path, expected, new, count=10)
