"""algo.restore_from_path(path, component=...): one policy (or its weights) from a checkpoint
into a live algorithm, reading only that policy's files and leaving the rest untouched
(issue 29, item 4)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

import cairn
from cairn.checkpoint import load_policy_states
from cairn.cli import main
from cairn.errors import (
    CheckpointClassMismatchError,
    CheckpointError,
    CheckpointFormatError,
    UnknownComponentError,
    UnknownPolicyIdError,
)
from tests.helpers import assert_trees_equal, small_ma_ppo, small_ppo


def _three_policies() -> cairn.Algorithm:
    return small_ma_ppo(3).env_runners(observation_filter="MeanStdFilter").build()


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """A three-policy algorithm trained once, saved, then trained once more (so that every
    part of every policy differs from the checkpoint)."""
    algo = _three_policies()
    algo.train()
    path = algo.save(tmp_path_factory.mktemp("component") / "c")
    yield algo, path
    algo.stop()


def _live(saved_path: str) -> cairn.Algorithm:
    """A fresh copy of the algorithm as saved, trained once more: every policy moved on."""
    algo = cairn.Algorithm.from_checkpoint(saved_path)
    algo.train()
    return algo


def _snapshot(algo: cairn.Algorithm) -> dict:
    return {"policies": {pid: p.get_state() for pid, p in algo.policies.items()},
            "iteration": algo.iteration, "counters": dict(algo.counters),
            "rng": algo.rng.bit_generator.state, "runners": algo.env_runner_group.get_state()}


def test_one_policy_restored_whole_the_other_two_bit_identical(saved):
    _, path = saved
    algo = _live(path)
    try:
        before = _snapshot(algo)
        stored = load_policy_states(path, policy_ids=["p1"])["p1"]
        live_weights = before["policies"]["p1"]["weights"]
        assert any(not np.array_equal(live_weights[k], v) for k, v in stored["weights"].items())
        algo.restore_from_path(path, component="policies/p1")
        after = _snapshot(algo)
        # p1: weights, optimizer, filter, counters, RNG all as stored.
        assert_trees_equal(after["policies"]["p1"], stored)
        # Everything else: bit-identical to before the restore.
        for pid in ("p0", "p2"):
            assert_trees_equal(after["policies"][pid], before["policies"][pid], f"policy {pid}")
        assert_trees_equal({k: v for k, v in after.items() if k != "policies"},
                           {k: v for k, v in before.items() if k != "policies"})
        algo.train()  # it trains on from there
    finally:
        algo.stop()


def test_weights_only_leaves_optimizer_filter_counters_and_rng(saved):
    _, path = saved
    algo = _live(path)
    try:
        before = _snapshot(algo)
        algo.restore_from_path(path, component="policies/p2/weights")
        after = _snapshot(algo)["policies"]
        stored = load_policy_states(path, policy_ids=["p2"])["p2"]
        assert_trees_equal(after["p2"]["weights"], stored["weights"])
        assert_trees_equal({k: v for k, v in after["p2"].items() if k != "weights"},
                           {k: v for k, v in before["policies"]["p2"].items() if k != "weights"})
        for pid in ("p0", "p1"):
            assert_trees_equal(after[pid], before["policies"][pid])
    finally:
        algo.stop()


def test_none_is_the_whole_checkpoint_as_restore(saved):
    _, path = saved
    algo, other = _live(path), _live(path)
    try:
        algo.restore_from_path(path)
        other.restore(path)
        assert_trees_equal(algo.get_state(), other.get_state())
    finally:
        algo.stop()
        other.stop()


def test_reads_only_that_policys_files(saved, tmp_path):
    _, path = saved
    broken = tmp_path / "broken"
    shutil.copytree(path, broken)
    for name in ("algorithm_state.json", "algorithm_state.safetensors"):
        (broken / name).write_bytes(b"\x00corrupted")
    for pid in ("p0", "p2"):
        for f in (broken / "policies" / pid).iterdir():
            f.unlink()
    algo = _live(path)
    try:
        algo.restore_from_path(broken, component="policies/p1")
        algo.restore_from_path(broken, component="policies/p1/weights")
        assert_trees_equal(algo.get_policy("p1").get_state(), load_policy_states(path, policy_ids="p1")["p1"])
        with pytest.raises(CheckpointError):  # the whole checkpoint does notice
            algo.restore_from_path(broken)
    finally:
        algo.stop()


@pytest.mark.parametrize("component", ["policies/p9", "policies/p0/optimizer", "p0", "policies", "", None])
def test_unknown_component_lists_the_checkpoints_components(saved, component):
    algo, path = saved
    if component is None:
        return  # None is the whole checkpoint (tested above)
    with pytest.raises(UnknownComponentError) as err:
        algo.restore_from_path(path, component=component)
    assert "policies/p0/weights" in str(err.value) and "policies/p2" in str(err.value)
    assert isinstance(err.value, KeyError)


def test_a_policy_the_live_algorithm_lacks(saved, tmp_path):
    _, path = saved
    two = small_ma_ppo(2).build()
    try:
        with pytest.raises(UnknownPolicyIdError, match="'p2'.*add_policy"):
            two.restore_from_path(path, component="policies/p2")
    finally:
        two.stop()


def test_other_spaces_class_or_network_are_refused_before_anything_changes(tmp_path):
    live = small_ppo().build()
    pendulum = small_ppo().environment("Pendulum-v1").build()
    dqn = cairn.DQNConfig().environment("CartPole-v1").debugging(seed=0).build()
    wider = small_ppo(model={"hidden": [8]}).build()
    try:
        before = live.get_policy().get_state()
        cases = [(pendulum, CheckpointClassMismatchError, "observation_space"),
                 (dqn, CheckpointClassMismatchError, "DQNPolicy"),
                 (wider, CheckpointFormatError, "network differs")]
        for other, error, words in cases:
            path = other.save(tmp_path / type(other).__name__ / str(id(other)))
            for component in ("policies/default_policy", "policies/default_policy/weights"):
                with pytest.raises(error, match=words):
                    live.restore_from_path(path, component=component)
        assert_trees_equal(live.get_policy().get_state(), before)
    finally:
        for algo in (live, pendulum, dqn, wider):
            algo.stop()


def test_object_store_reads_only_the_component(saved, s3):
    algo, _ = saved
    url = s3.url("component/c")
    algo.save(url, storage_options=s3.storage_options)
    live = _three_policies()
    try:
        s3.server.reset_requests()
        live.restore_from_path(url, component="policies/p1", storage_options=s3.storage_options)
        read = {p.split("/component/c/", 1)[1] for _, p in s3.server.requests("GET") if "/component/c/" in p}
        assert read == {"cairn_checkpoint.json", "policies/p1/cairn_checkpoint.json",
                        "policies/p1/policy_state.json", "policies/p1/policy_state.safetensors"}
        assert not any(word in p for _, p in s3.server.requests()
                       for word in ("/policies/p0/", "/policies/p2/", "algorithm_state"))
        assert_trees_equal(live.get_policy("p1").get_state(), algo.get_policy("p1").get_state())
    finally:
        live.stop()


def test_cli_info_prints_one_component(saved, capsys):
    _, path = saved
    assert main(["checkpoint", "info", path, "--component", "policies/p1"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["component"] == "policies/p1" and info["type"] == "Policy" and info["policy_ids"] is None
    assert main(["info", path, "--component", "policies/p1/weights"]) == 0
    weights = json.loads(capsys.readouterr().out)
    stored = load_policy_states(path, policy_ids="p1")["p1"]["weights"]
    expected = {k: {"shape": list(v.shape), "dtype": str(v.dtype)} for k, v in stored.items()}
    assert weights["weights"] == expected
    assert weights["num_parameters"] == sum(v.size for v in stored.values())
    assert main(["checkpoint", "info", path, "--component", "policies/p7"]) != 0
    assert "policies/p0/weights" in capsys.readouterr().err
    assert Path(path).is_dir()
