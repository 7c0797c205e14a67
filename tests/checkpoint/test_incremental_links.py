"""Incremental saves take an unchanged policy's files from the previous checkpoint by linking
them relative to directory descriptors (cairn.checkpoint.storage.local). What the previous
checkpoint holds may change between the plan (markers compared, state not gathered) and the
write: each such change makes the save fail with nothing saved, or write the policy anew, never
link a file other than the one the plan vouched for."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

import cairn
from cairn.algorithms.checkpointing import prepare_algorithm_save, save_algorithm
from cairn.checkpoint import load_algorithm_state
from cairn.checkpoint.storage import local
from cairn.errors import CheckpointError
from tests.helpers import assert_trees_equal, small_ma_ppo

ARRAYS = "policy_state.safetensors"


@pytest.fixture
def algo():
    algo = (small_ma_ppo(2, model={"hidden": [8]}, train_batch_size=64, minibatch_size=32, num_epochs=1)
            .multi_agent(policies_to_train=["p0"]).build())
    algo.train()
    yield algo
    algo.stop()


def _saved_live_state(path: str, algo: cairn.Algorithm) -> None:
    stored = load_algorithm_state(path)["policies"]
    for pid, policy in algo.policies.items():
        assert_trees_equal(stored[pid], policy.get_state(), pid)


def _linked(a: str, b: str, name: str) -> bool:
    return os.stat(f"{a}/policies/p1/{name}").st_ino == os.stat(f"{b}/policies/p1/{name}").st_ino


def test_unchanged_policies_are_linked_and_the_checkpoint_stands_alone(algo, tmp_path):
    first = save_algorithm(algo, tmp_path / "c1")
    algo.get_policy("p0").set_weights({k: v + 1 for k, v in algo.get_policy("p0").get_weights().items()})
    second = save_algorithm(algo, tmp_path / "c2", previous=first)
    assert all(_linked(first, second, name)
               for name in ("cairn_checkpoint.json", "policy_state.json", ARRAYS))
    shutil.rmtree(first)
    _saved_live_state(second, algo)


@pytest.mark.parametrize("damage", ["deleted", "resized", "symlink", "policy directory removed"])
def test_a_linked_file_that_changed_after_the_plan_fails_the_save_and_keeps_the_target(
        algo, tmp_path, damage):
    first = save_algorithm(algo, tmp_path / "c1")
    target = tmp_path / "c2"
    old = save_algorithm(algo, target)  # a checkpoint already at the target must survive
    write = prepare_algorithm_save(algo, target, snapshot=False, previous=first)  # p1 planned as linked
    victim = Path(first) / "policies" / "p1" / ARRAYS
    if damage == "deleted":
        victim.unlink()
    elif damage == "resized":
        with open(victim, "ab") as f:
            f.write(b"\0")
    elif damage == "symlink":
        victim.unlink()
        victim.symlink_to(Path(old) / "policies" / "p1" / ARRAYS)
    else:
        shutil.rmtree(victim.parent)
    with pytest.raises(CheckpointError, match="policy 'p1' in the previous checkpoint .* changed or"):
        write()
    _saved_live_state(old, algo)  # the earlier checkpoint at the target is intact
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c1", "c2"]  # no partial write left


def test_a_previous_checkpoint_replaced_after_the_plan_fails_the_save(algo, tmp_path):
    first = save_algorithm(algo, tmp_path / "c1")
    write = prepare_algorithm_save(algo, tmp_path / "c2", snapshot=False, previous=first)
    algo.get_policy("p1").set_weights({k: v * 2 for k, v in algo.get_policy("p1").get_weights().items()})
    save_algorithm(algo, first)  # another checkpoint at the same path: p1's manifest differs
    with pytest.raises(CheckpointError, match="no longer holds the files of policy 'p1'"):
        write()
    assert not (tmp_path / "c2").exists()


def test_files_are_linked_by_path_where_directory_descriptors_cannot_be_used(algo, tmp_path, monkeypatch):
    monkeypatch.setattr(local, "_LINK_AT", False)  # as on Windows
    first = save_algorithm(algo, tmp_path / "c1")
    algo.train()  # p0 learns, p1 acts: its arrays file is linked, its JSON file rewritten
    second = save_algorithm(algo, tmp_path / "c2", previous=first)
    assert _linked(first, second, ARRAYS) and not _linked(first, second, "policy_state.json")
    _saved_live_state(second, algo)
    Path(first, "policies", "p1", ARRAYS).unlink()
    write = prepare_algorithm_save(algo, tmp_path / "c3", snapshot=False, previous=second)
    Path(second, "policies", "p1", ARRAYS).unlink()
    with pytest.raises(CheckpointError, match="changed or vanished"):
        write()


def test_a_file_changed_in_a_checkpoint_this_process_did_not_write_is_written_anew(algo, tmp_path):
    """Without a marker (the previous checkpoint was written before a restart), a policy is
    hashed against the previous manifest; a file changed on disk since is not linked."""
    first = save_algorithm(algo, tmp_path / "c1")
    restored = cairn.Algorithm.from_checkpoint(first)
    try:
        with open(Path(first) / "policies" / "p1" / ARRAYS, "ab") as f:
            f.write(b"\0")
        second = save_algorithm(restored, tmp_path / "c2", previous=first)
        assert not _linked(first, second, ARRAYS)
        _saved_live_state(second, restored)
    finally:
        restored.stop()
