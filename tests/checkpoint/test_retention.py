"""CheckpointManager's retention and triggers (issue 29, item 5): keep the n best, keep every
k-th iteration, save every n env steps, metadata per checkpoint, delete(iteration); the kept
set after each save, and under a SIGKILL at any step of a save or a delete."""

from __future__ import annotations

import json
import os
import shutil
import signal
from pathlib import Path
from typing import Any

import pytest

import cairn
from cairn.checkpoint.manager import checkpoint_name
from cairn.checkpoint.reader import load_algorithm_state
from cairn.errors import BackgroundSaveError, CheckpointError, ConfigError
from tests.checkpoint.crash_child import run_in_child
from tests.helpers import small_ppo

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "checkpoints"


@pytest.fixture(scope="module")
def algo():
    algo = small_ppo(train_batch_size=64, minibatch_size=32, num_epochs=1).build()
    yield algo
    algo.stop()


def _save_at(manager: cairn.CheckpointManager, algo: cairn.Algorithm, iteration: int,
             result: dict | None = None, **kwargs: Any) -> Any:
    algo.iteration = iteration  # a public counter; saving needs no training
    return manager.save(algo, result, **kwargs)


def _kept(manager: cairn.CheckpointManager) -> list[int]:
    return [c.iteration for c in manager.checkpoints()]


def _on_disk(root: Path) -> list[str]:
    return sorted(os.listdir(root))


# ------------------------------------------------------------------------------ retention
def test_keep_best_n_and_every_k_after_each_save(algo, tmp_path):
    manager = cairn.CheckpointManager(tmp_path, keep_last=1, keep_best=("score", "max", 2),
                                      keep_every_iterations=3)
    scores = {1: 5.0, 2: 1.0, 3: 0.0, 4: 4.0, 5: 2.0, 6: 6.0, 7: 5.0, 8: float("nan"), 9: 3.0}
    # After each save: the newest, the two best (newest first among ties), every 3rd.
    expected = {1: [1], 2: [1, 2], 3: [1, 2, 3], 4: [1, 3, 4], 5: [1, 3, 4, 5], 6: [1, 3, 6],
                7: [3, 6, 7], 8: [3, 6, 7, 8], 9: [3, 6, 7, 9]}
    for iteration, score in scores.items():
        _save_at(manager, algo, iteration, {"score": score})
        assert _kept(manager) == expected[iteration], iteration
        assert _on_disk(tmp_path) == sorted(
            [checkpoint_name(i) for i in expected[iteration]]
            + [checkpoint_name(i) + ".record.json" for i in expected[iteration]])
    assert manager.best() == str(tmp_path / checkpoint_name(6))
    # A new manager with the same rules keeps the same set (the metrics come from the root).
    again = cairn.CheckpointManager(tmp_path, keep_last=1, keep_best=("score", "max", 2),
                                    keep_every_iterations=3)
    assert _kept(again) == [3, 6, 7, 9] and again.best() == manager.best()


def test_a_two_tuple_keeps_one_best_and_min_mode(algo, tmp_path):
    manager = cairn.CheckpointManager(tmp_path, keep_last=1, keep_best=("loss", "min"))
    for iteration, loss in {1: 3.0, 2: 1.0, 3: 2.0, 4: 1.0, 5: 9.0}.items():
        _save_at(manager, algo, iteration, {"loss": loss})
    assert _kept(manager) == [4, 5]  # the newest of the equal best


@pytest.mark.parametrize("blocking", [True, False], ids=["blocking", "background"])
def test_a_local_deletion_that_fails_warns_and_the_save_stands(algo, tmp_path, monkeypatch, blocking):
    """Retention on a local root cannot rename an old checkpoint away (EACCES, as on a
    directory another user owns): the save committed, so it returns (its Future succeeds) with
    a StorageCleanupWarning saying the old checkpoint is still whole; the next save deletes it."""
    from cairn.errors import StorageCleanupWarning

    root = tmp_path / "run"
    manager = cairn.CheckpointManager(root, keep_last=1)
    first = _save_at(manager, algo, 1)
    rename = os.rename

    def refusing(src: Any, dst: Any, *args: Any, **kwargs: Any) -> None:
        if os.fspath(src) == first:
            raise PermissionError(13, "Permission denied", os.fspath(src))
        rename(src, dst, *args, **kwargs)

    monkeypatch.setattr(os, "rename", refusing)
    with pytest.warns(StorageCleanupWarning, match=f"could not delete {first}.*still whole"):
        saved = _save_at(manager, algo, 2, blocking=blocking)
        if not blocking:
            saved = saved.result(timeout=60)
    monkeypatch.undo()
    assert saved == str(root / checkpoint_name(2))
    manager.wait()  # nothing owed: the background save did not fail
    assert _kept(manager) == [1, 2] and manager.latest() == saved
    _save_at(manager, algo, 3)
    assert _kept(manager) == [3]


@pytest.mark.parametrize("blocking", [True, False], ids=["blocking", "background"])
def test_a_save_that_failed_is_due_again_at_the_next_call(algo, tmp_path, blocking):
    """The save due at 100 env steps fails (a file is in the way of its checkpoint): no
    checkpoint holds those steps, so the next call saves, in the background as when blocking,
    instead of waiting for the next multiple (200)."""
    root = tmp_path / "run"
    manager = cairn.CheckpointManager(root, save_every_timesteps=100, keep_last=None)
    assert _save_at(manager, algo, 1, {"num_env_steps_sampled_lifetime": 60}) is None
    root.mkdir(exist_ok=True)
    (root / checkpoint_name(2)).write_text("in the way")
    if blocking:
        with pytest.raises(OSError):
            _save_at(manager, algo, 2, {"num_env_steps_sampled_lifetime": 120})
    else:
        _save_at(manager, algo, 2, {"num_env_steps_sampled_lifetime": 120}, blocking=False)
        with pytest.raises(BackgroundSaveError):
            manager.wait()
    saved = _save_at(manager, algo, 3, {"num_env_steps_sampled_lifetime": 180}, blocking=blocking)
    assert saved is not None, "the env steps that the failed save was for are in no checkpoint"
    manager.wait()
    assert _kept(manager) == [3]


def test_keep_every_iterations_alone_keeps_multiples_forever(algo, tmp_path):
    manager = cairn.CheckpointManager(tmp_path, keep_last=2, keep_every_iterations=4)
    for iteration in range(1, 11):
        _save_at(manager, algo, iteration)
    assert _kept(manager) == [4, 8, 9, 10]


def test_delete_removes_one_checkpoint_and_its_record(algo, tmp_path):
    manager = cairn.CheckpointManager(tmp_path, keep_last=None)
    for iteration in (1, 2, 3):
        _save_at(manager, algo, iteration)
    manager.delete(2)
    assert _kept(manager) == [1, 3]
    assert _on_disk(tmp_path) == [checkpoint_name(1), checkpoint_name(1) + ".record.json",
                                  checkpoint_name(3), checkpoint_name(3) + ".record.json"]
    with pytest.raises(CheckpointError, match=r"iteration 2.*\[1, 3\]"):
        manager.delete(2)
    manager.delete(3)  # the latest too: latest() falls back, and iteration 3 is not due again
    assert manager.latest() == str(tmp_path / checkpoint_name(1))
    assert _save_at(manager, algo, 3) is None
    assert _save_at(manager, algo, 4) == str(tmp_path / checkpoint_name(4))


def test_delete_waits_for_a_background_save(algo, tmp_path):
    manager = cairn.CheckpointManager(tmp_path, keep_last=None)
    _save_at(manager, algo, 1)
    _save_at(manager, algo, 2, blocking=False)
    manager.delete(2)  # committed first, then deleted
    manager.wait()
    assert _kept(manager) == [1]


# --------------------------------------------------------------------------------- triggers
def test_save_every_timesteps_saves_when_a_multiple_is_reached(algo, tmp_path):
    manager = cairn.CheckpointManager(tmp_path, keep_last=None, save_every_timesteps=1000)
    steps = {1: 400, 2: 800, 3: 1200, 4: 1600, 5: 2000, 6: 2400, 7: 4100, 8: 4500}
    saved = [i for i, t in steps.items()
             if _save_at(manager, algo, i, {"num_env_steps_sampled_lifetime": t}) is not None]
    assert saved == [3, 5, 7]  # 1200 >= 1000, 2000 >= 2000, 4100 >= 3000 (and 4000)
    assert manager.save_every_iterations is None  # the env-step rule alone, as SB3's save_freq
    assert manager.due(9, 4999) is False and manager.due(9, 5000) is True
    # A resumed manager continues from the env steps of the latest save.
    again = cairn.CheckpointManager(tmp_path, keep_last=None, save_every_timesteps=1000)
    assert again.due(9, 4999) is False and again.due(9, 5000) is True
    with pytest.raises(ConfigError, match="num_env_steps_sampled_lifetime"):
        _save_at(again, algo, 9, {"episode_return_mean": 1.0})


def test_save_every_timesteps_with_cairns_own_results(tmp_path):
    algo = small_ppo(train_batch_size=64, minibatch_size=32, num_epochs=1).build()
    try:
        manager = cairn.CheckpointManager(tmp_path, keep_last=None, save_every_timesteps=150)
        saved = [algo.iteration for _ in range(5) if manager.save(algo, algo.train()) is not None]
        assert saved == [3, 5]  # 64 env steps an iteration: 192 >= 150, 320 >= 300
    finally:
        algo.stop()


def test_rules_combine_with_or(algo, tmp_path):
    manager = cairn.CheckpointManager(tmp_path, keep_last=None, save_every_iterations=4,
                                      save_every_timesteps=1000)
    steps = {1: 100, 2: 1100, 3: 1200, 4: 1300, 5: 1400}
    saved = [i for i, t in steps.items()
             if _save_at(manager, algo, i, {"num_env_steps_sampled_lifetime": t}) is not None]
    assert saved == [2, 4]


@pytest.mark.parametrize("kwargs", [
    {"keep_best": ("r", "max", 0)}, {"keep_best": ("r", "max", 1.5)}, {"keep_best": ("r", "up", 2)},
    {"keep_best": ("r", "max", 2, 3)}, {"keep_every_iterations": 0}, {"keep_every_iterations": True},
    {"save_every_timesteps": 0}, {"save_every_timesteps": 10.0},
])
def test_bad_arguments_name_the_value(tmp_path, kwargs):
    name = next(iter(kwargs))
    with pytest.raises(ConfigError, match=name):
        cairn.CheckpointManager(tmp_path, **kwargs)


# --------------------------------------------------------------------------------- metadata
def test_metadata_is_stored_with_the_checkpoint(algo, tmp_path):
    manager = cairn.CheckpointManager(tmp_path / "root", keep_last=None)
    given = {"note": "after the lr drop", "eval": [1.5, 2], "nested": {"ok": True, "none": None}}
    location = _save_at(manager, algo, 1, metadata=given)
    given["note"] = "changed afterwards"  # the checkpoint keeps what was given at save()
    _save_at(manager, algo, 2)
    assert [c.metadata for c in manager.checkpoints()] == [
        {"note": "after the lr drop", "eval": [1.5, 2], "nested": {"ok": True, "none": None}}, None]
    assert cairn.get_checkpoint_info(location)["metadata"]["note"] == "after the lr drop"
    # Without a manager, and into a copy of the checkpoint: it lives in the manifest.
    plain = algo.save(tmp_path / "plain", metadata={})
    assert cairn.get_checkpoint_info(plain)["metadata"] == {}
    shutil.copytree(location, tmp_path / "copied")
    assert cairn.get_checkpoint_info(tmp_path / "copied")["metadata"]["eval"] == [1.5, 2]
    assert cairn.Algorithm.from_checkpoint(tmp_path / "copied").iteration == 1


def test_metadata_in_a_background_save(algo, tmp_path):
    manager = cairn.CheckpointManager(tmp_path, keep_last=None)
    given = {"step": 1}
    future = _save_at(manager, algo, 1, blocking=False, metadata=given)
    given["step"] = 2
    assert cairn.get_checkpoint_info(future.result())["metadata"] == {"step": 1}


@pytest.mark.parametrize("metadata", [
    {"x": float("nan")}, {1: "int key"}, {"t": (1, 2)}, {"p": Path("/tmp")}, ["not a dict"],
    {"deep": {"a": {"b": object()}}},
])
def test_metadata_must_be_json_data(algo, tmp_path, metadata):
    manager = cairn.CheckpointManager(tmp_path, keep_last=None)
    with pytest.raises(CheckpointError, match="metadata"):
        _save_at(manager, algo, 1, metadata=metadata)
    with pytest.raises(CheckpointError, match="metadata"):
        algo.save(tmp_path / "plain", metadata=metadata)
    assert _on_disk(tmp_path) == []  # refused before anything was written


def test_fixtures_metadata_by_version():
    assert cairn.get_checkpoint_info(FIXTURES / "1" / "ppo_single")["metadata"] is None
    assert cairn.get_checkpoint_info(FIXTURES / "2" / "ppo_single")["metadata"] == {
        "note": "frozen fixture", "tags": ["ppo", "cartpole"], "score": 1.5, "nested": {"ok": True}}
    assert cairn.get_checkpoint_info(FIXTURES / "2" / "ppo_multi")["metadata"] is None


def test_a_manifest_with_metadata_that_is_not_an_object_is_refused(algo, tmp_path):
    path = Path(algo.save(tmp_path / "c"))
    manifest = json.loads((path / "cairn_checkpoint.json").read_text())
    manifest["metadata"] = ["a", "list"]
    (path / "cairn_checkpoint.json").write_text(json.dumps(manifest))
    with pytest.raises(cairn.errors.CheckpointFormatError, match="metadata"):
        cairn.get_checkpoint_info(path)


def test_on_an_object_store(algo, s3):
    root = s3.url("retention")
    manager = cairn.CheckpointManager(root, keep_last=1, keep_best=("score", "max", 2),
                                      keep_every_iterations=2, storage_options=s3.storage_options)
    for iteration, score in {1: 5.0, 2: 1.0, 3: 2.0, 4: 0.0, 5: 4.0}.items():
        _save_at(manager, algo, iteration, {"score": score}, metadata={"i": iteration})
    assert _kept(manager) == [1, 2, 4, 5]
    assert [c.metadata for c in manager.checkpoints()] == [{"i": i} for i in (1, 2, 4, 5)]
    manager.delete(4)
    assert _kept(manager) == [1, 2, 5]
    assert not s3.keys("retention/checkpoint_000003/") and not s3.keys("retention/checkpoint_000004/")


# ------------------------------------------------------------------------------ crash safety
#: keep_last=1, 2 best by score, every 2nd: after 4 the set is {1, 2, 3, 4}; saving 5 (score
#: 4.0) keeps {1, 2, 4, 5} and deletes 3.
SCORES = {1: 5.0, 2: 1.0, 3: 2.0, 4: 0.0, 5: 4.0}


def _manager(root: Path) -> cairn.CheckpointManager:
    return cairn.CheckpointManager(root, keep_last=1, keep_best=("score", "max", 2), keep_every_iterations=2)


def _whole(root: Path) -> list[int]:
    """What a new manager finds: every kept checkpoint loads whole and has its metric."""
    manager = _manager(root)  # removes what the killed process left
    kept = manager.checkpoints()
    for checkpoint in kept:
        assert load_algorithm_state(checkpoint.path)["iteration"] == checkpoint.iteration
        assert checkpoint.metric == SCORES[checkpoint.iteration]
        assert checkpoint.metadata == {"i": checkpoint.iteration}
    iterations = [c.iteration for c in kept]
    assert _on_disk(root) == sorted([checkpoint_name(i) for i in iterations]
                                    + [checkpoint_name(i) + ".record.json" for i in iterations])
    return iterations


@pytest.fixture(scope="module")
def template(algo, tmp_path_factory):
    root = tmp_path_factory.mktemp("retention-template")
    manager = _manager(root)
    for iteration in (1, 2, 3, 4):
        _save_at(manager, algo, iteration, {"score": SCORES[iteration]}, metadata={"i": iteration})
    assert _kept(manager) == [1, 2, 3, 4]
    return root


@pytest.mark.parametrize("operation", ["save", "delete"])
def test_killed_at_any_step_leaves_a_consistent_set(algo, template, tmp_path, operation):
    root = tmp_path / "root"

    def fresh() -> None:
        shutil.rmtree(root, ignore_errors=True)
        shutil.copytree(template, root)

    def action() -> None:
        if operation == "save":
            _save_at(_manager(root), algo, 5, {"score": SCORES[5]}, metadata={"i": 5})
        else:
            _manager(root).delete(2)

    before = [1, 2, 3, 4]
    after = [1, 2, 4, 5] if operation == "save" else [1, 3, 4]
    fresh()
    count_file = tmp_path / "steps"
    assert run_in_child(action, None, count_file) == 0
    total = int(count_file.read_text())
    assert _whole(root) == after
    outcomes = set()
    for kill_at in sorted({max(1, round(i * total / 12)) for i in range(1, 13)} | {1, total - 1}):
        fresh()
        status = run_in_child(action, kill_at, None)
        assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL, (kill_at, total)
        found = _whole(root)
        # Before the commit: the old set; after it: the new checkpoint with the old ones not
        # yet deleted, or the new set. Never a deletion before the commit.
        allowed = ([before, after, [1, 2, 3, 4, 5]] if operation == "save" else [before, after])
        assert found in allowed, (kill_at, found)
        outcomes.add(tuple(found))
    assert tuple(before) in outcomes and tuple(after) in outcomes
