"""Incremental saves take an unchanged policy's files from the previous checkpoint by linking
them relative to directory descriptors (cairn.checkpoint.storage.local), once the state's
hashes equal those its manifest lists. What the previous checkpoint holds may change at any
time before or during the save: each such change makes the policy be written anew, or the save
fail with nothing saved, never a file linked other than the one the manifest vouched for."""

from __future__ import annotations

import os
import shutil
import warnings
from pathlib import Path

import pytest

import cairn
from cairn.algorithms.save_restore import prepare_algorithm_save, save_algorithm
from cairn.checkpoint import load_algorithm_state
from cairn.checkpoint.storage import local
from cairn.errors import CheckpointError, ExportError
from cairn.export import checkpoint_files, onnx_model
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


def _native_record(path: str, pid: str) -> dict:
    return cairn.get_checkpoint_info(Path(path, "policies", pid))["native_model"]


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
def test_a_file_damaged_before_the_write_is_written_anew(algo, tmp_path, damage):
    first = save_algorithm(algo, tmp_path / "c1")
    target = tmp_path / "c2"
    old = save_algorithm(algo, target)  # a checkpoint already at the target is replaced
    write = prepare_algorithm_save(algo, target, snapshot=False, previous=first)
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
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a previous checkpoint without p1's manifest is ignored
        second = write()
    assert not os.path.islink(Path(second) / "policies" / "p1" / ARRAYS)
    _saved_live_state(second, algo)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c1", "c2"]  # no partial write left


def test_a_previous_checkpoint_replaced_before_the_write_is_compared_as_it_is_then(algo, tmp_path):
    first = save_algorithm(algo, tmp_path / "c1")
    write = prepare_algorithm_save(algo, tmp_path / "c2", snapshot=False, previous=first)
    live = algo.get_policy("p1").get_weights()
    algo.get_policy("p1").set_weights({k: v * 2 for k, v in live.items()})
    save_algorithm(algo, first)  # another checkpoint at the same path: p1's weights differ
    algo.get_policy("p1").set_weights(live)  # what the prepared save holds
    second = write()
    assert not _linked(first, second, ARRAYS)
    assert os.stat(f"{first}/policies/p0/{ARRAYS}").st_ino == os.stat(f"{second}/policies/p0/{ARRAYS}").st_ino
    _saved_live_state(second, algo)


def test_a_previous_checkpoint_replaced_while_its_files_are_taken_fails_the_save(algo, tmp_path, monkeypatch):
    """Files are linked from whatever directory the path names at that moment: if the
    checkpoint was replaced between reading its manifest and linking, the links may be the
    replacement's. The root manifest, read again after linking, tells."""
    first = save_algorithm(algo, tmp_path / "c1")
    old = save_algorithm(algo, tmp_path / "c2")
    reuse_dirs_into, calls = local.LocalStorage.reuse_dirs_into, []
    policy = algo.get_policy("p1")
    live = policy.get_weights()

    def replaced_meanwhile(self, *args, **kwargs):
        if not calls:  # the same files, of the same sizes, but other weights
            policy.set_weights({k: v * 2 for k, v in live.items()})
            calls.append(save_algorithm(algo, first))
            policy.set_weights(live)
        return reuse_dirs_into(self, *args, **kwargs)

    monkeypatch.setattr(local.LocalStorage, "reuse_dirs_into", replaced_meanwhile)
    with pytest.raises(CheckpointError, match="replaced or removed during this save"):
        save_algorithm(algo, tmp_path / "c2", previous=first)
    _saved_live_state(old, algo)  # the earlier checkpoint at the target is intact
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c1", "c2"]  # no partial write left


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
    with pytest.warns(UserWarning, match=f"p1/{ARRAYS} is missing"):
        third = write()  # p1's arrays file is gone from the previous checkpoint: written anew
    _saved_live_state(third, algo)


def test_a_file_changed_in_a_checkpoint_this_process_did_not_write_is_written_anew(algo, tmp_path):
    """After a restart, a file changed on disk since its manifest was written is not linked."""
    first = save_algorithm(algo, tmp_path / "c1")
    restored = cairn.Algorithm.from_checkpoint(first)
    try:
        with open(Path(first) / "policies" / "p1" / ARRAYS, "ab") as f:
            f.write(b"\0")
        with pytest.warns(UserWarning, match=f"p1/{ARRAYS} has .* bytes where its manifest lists"):
            second = save_algorithm(restored, tmp_path / "c2", previous=first)
        assert not _linked(first, second, ARRAYS)
        _saved_live_state(second, restored)
    finally:
        restored.stop()


@pytest.mark.parametrize("link_at", [True, False], ids=["descriptors", "paths"])
def test_native_model_files_of_an_unchanged_policy_are_linked(algo, tmp_path, monkeypatch, link_at):
    """model/ is a subdirectory of the policy's: its files are linked there too, not refused as
    missing (which warned that the earlier checkpoint was damaged and wrote the policy anew)."""
    monkeypatch.setattr(local, "_LINK_AT", local._LINK_AT and link_at)
    algo.config.export_native_model_files = True
    first = save_algorithm(algo, tmp_path / "c1")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        second = save_algorithm(algo, tmp_path / "c2", previous=first)
    names = sorted(p.relative_to(Path(first, "policies", "p1")).as_posix()
                   for p in Path(first, "policies", "p1").rglob("*") if p.is_file())
    assert "model/signature.json" in names and len(names) > 4  # the state files and model/'s
    assert all(_linked(first, second, name) for name in names)
    _saved_live_state(second, algo)


def test_native_files_saved_without_the_onnx_packages_are_not_reused_where_they_can_be_written(
        algo, tmp_path, monkeypatch):
    """An earlier save that lacked the ONNX packages has no model.onnx: a save that has them
    writes the policy anew with it (as a save without ``previous`` would), and a save that lacks
    them too takes the earlier files."""
    algo.config.export_native_model_files = True
    with monkeypatch.context() as patch:  # as if the onnx extra were not installed
        patch.setattr(onnx_model, "ONNX_PACKAGES", ("onnx", "no_such_package_for_cairn"))
        first = save_algorithm(algo, tmp_path / "c1")
        also_without = save_algorithm(algo, tmp_path / "c2", previous=first)
    skipped = _native_record(first, "p1")["skipped"]
    assert skipped == {"onnx": "not installed: no_such_package_for_cairn"}
    assert _linked(first, also_without, ARRAYS) and _linked(first, also_without, "model/signature.json")
    second = save_algorithm(algo, tmp_path / "c3", previous=first)
    full = save_algorithm(algo, tmp_path / "c4")
    for pid in ("p0", "p1"):
        model = Path(second, "policies", pid, "model")
        assert sorted(p.name for p in model.iterdir()) == sorted(
            p.name for p in Path(full, "policies", pid, "model").iterdir())
        assert (model / "model.onnx").is_file()
        assert "onnx" in _native_record(second, pid)["formats"]
    _saved_live_state(second, algo)
    # Files with model.onnx are taken by the next save that has the packages.
    third = save_algorithm(algo, tmp_path / "c5", previous=second)
    assert _linked(second, third, "model/model.onnx")


def test_native_files_whose_onnx_export_failed_for_the_model_are_reused(algo, tmp_path, monkeypatch):
    """ONNX skipped because the export failed for the model (an ExportError) is what a save of
    the same state gets again: its files are taken, without the packages' reason to write anew."""
    algo.config.export_native_model_files = True

    def failing(*args, **kwargs):
        raise ExportError("the exporter cannot convert this model")

    with monkeypatch.context() as patch, pytest.warns(UserWarning, match="has no model.onnx"):
        patch.setattr(checkpoint_files, "write_onnx_file", failing)
        first = save_algorithm(algo, tmp_path / "c1")
    assert _native_record(first, "p1")["skipped"] == {"onnx": "the exporter cannot convert this model"}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        second = save_algorithm(algo, tmp_path / "c2", previous=first)
    assert _linked(first, second, ARRAYS) and _linked(first, second, "model/signature.json")
    assert not Path(second, "policies", "p1", "model", "model.onnx").exists()
