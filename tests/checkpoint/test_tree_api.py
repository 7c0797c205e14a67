"""The checkpoint layer's tree-level API: it writes and reads state trees, and the layers above
build objects from them (Policy.from_checkpoint, Algorithm.from_checkpoint)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import cairn
from cairn.algorithms.dqn import DQNConfig
from cairn.checkpoint import (
    CheckpointClassMismatchError,
    get_checkpoint_info,
    load_algorithm_state,
    load_policy_state,
    load_policy_states,
    write_algorithm_checkpoint,
    write_policy_checkpoint,
)
from cairn.checkpoint.format import MANIFEST_FILE
from cairn.errors import CheckpointError, CheckpointFormatError
from cairn.registry import native_model_writer
from tests.helpers import assert_trees_equal


def test_a_policy_state_round_trips_as_a_tree(ppo_algo: Any, tmp_path: Path) -> None:
    policy = ppo_algo.get_policy()
    state = policy.get_state()
    path = write_policy_checkpoint(tmp_path / "p", state)
    assert get_checkpoint_info(path)["class"] == state["spec"]["policy_class"]
    assert_trees_equal(load_policy_state(path), state)


def test_native_files_callback_writes_opaque_files_into_the_checkpoint(ppo_algo: Any, tmp_path: Path) -> None:
    def native_files(directory: Path, files: dict[str, dict[str, Any]]) -> dict[str, Any]:
        (directory / "model").mkdir()
        (directory / "model" / "blob.bin").write_bytes(b"opaque")
        files["model/blob.bin"] = {"size": 6, "hash": _hash(b"opaque")}
        return {"status": "ok", "formats": ["blob"]}

    path = Path(write_policy_checkpoint(tmp_path / "p", ppo_algo.get_policy().get_state(),
                                        native_files=native_files))
    info = get_checkpoint_info(path)
    assert info["native_model"] == {"status": "ok", "formats": ["blob"]}
    assert "model/blob.bin" in info["files"]
    assert isinstance(cairn.Policy.from_checkpoint(path), cairn.Policy)


def _hash(data: bytes) -> str:
    from cairn.checkpoint.safetensors_io import new_hasher

    hasher = new_hasher()
    hasher.update(data)
    return hasher.hexdigest()


def test_an_algorithm_state_round_trips_and_reads_a_subset(ma_algo: Any, tmp_path: Path) -> None:
    state = ma_algo.get_state()
    path = write_algorithm_checkpoint(tmp_path / "a", state)
    assert state["policies"] and "policies" in state  # the caller's tree is left whole
    loaded = load_algorithm_state(path, policy_ids=["p1"])
    assert list(loaded["policies"]) == ["p1"]
    assert_trees_equal(loaded["policies"]["p1"], state["policies"]["p1"])
    assert list(load_policy_states(path, policy_ids="p1")) == ["p1"]


def test_load_policy_states_refuses_a_policy_checkpoint(ppo_algo: Any, tmp_path: Path) -> None:
    path = write_policy_checkpoint(tmp_path / "p", ppo_algo.get_policy().get_state())
    with pytest.raises(CheckpointFormatError, match="Policy checkpoint, not an Algorithm"):
        load_policy_states(path)


def test_the_writer_refuses_a_tree_without_its_class(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match="policy_class"):
        write_policy_checkpoint(tmp_path / "p", {"spec": {}, "weights": {}})
    with pytest.raises(CheckpointError, match="algorithm_class"):
        write_algorithm_checkpoint(tmp_path / "a", {"policies": {}})
    assert not (tmp_path / "p").exists() and not (tmp_path / "a").exists()


def test_get_state_copy_false_may_share_and_copy_true_does_not(ppo_algo: Any) -> None:
    policy = ppo_algo.get_policy()
    live = policy.get_state(copy=False)["weights"]
    snapshot = policy.get_state()["weights"]
    name = next(iter(live))
    before = snapshot[name].copy()
    live[name][...] += 1.0  # a view of the network's parameter
    assert not np.array_equal(policy.get_weights()[name], before)
    assert np.array_equal(snapshot[name], before)


def test_export_checkpoint_finds_the_native_model_writer_through_the_registry() -> None:
    from cairn.export import write_native_model_files

    assert native_model_writer() is write_native_model_files


def test_policy_from_checkpoint_is_typed_by_what_it_is_given(ma_algo: Any, tmp_path: Path) -> None:
    algo_path = ma_algo.save(tmp_path / "a")
    ma_algo.get_policy("p0").export_checkpoint(tmp_path / "p")
    assert isinstance(cairn.Policy.from_policy_checkpoint(tmp_path / "p"), cairn.Policy)
    assert isinstance(cairn.Policy.from_checkpoint(tmp_path / "p"), cairn.Policy)
    assert set(cairn.Policy.from_checkpoint(algo_path)) == {"p0", "p1", "p2"}
    assert set(cairn.Policy.from_checkpoint(algo_path, policy_ids=["p2"])) == {"p2"}
    with pytest.raises(CheckpointFormatError, match="Algorithm checkpoint.*Policy checkpoint is needed"):
        cairn.Policy.from_policy_checkpoint(algo_path)


def _dqn_checkpoint(tmp_path: Path) -> str:
    config = (DQNConfig().environment("CartPole-v1").debugging(seed=0)
              .training(train_batch_size=32, num_steps_sampled_before_learning_starts=16,
                        minibatch_size=8, model={"hidden": [8]}))
    dqn = config.build()
    try:
        return str(dqn.save(tmp_path / "dqn"))
    finally:
        dqn.stop()


@pytest.mark.filterwarnings("ignore:This DQN state has no replay buffer")
def test_a_subclass_builds_only_its_own_kind(tmp_path: Path) -> None:
    path = _dqn_checkpoint(tmp_path)
    with pytest.raises(CheckpointClassMismatchError) as info:
        cairn.PPO.from_checkpoint(path)
    message = str(info.value)
    assert "DQN checkpoint" in message and "PPO.from_checkpoint" in message
    assert "cairn.Algorithm.from_checkpoint" in message and "cairn.DQN.from_checkpoint" in message
    for cls in (cairn.Algorithm, cairn.DQN):
        algo = cls.from_checkpoint(path)
        assert isinstance(algo, cairn.DQN)
        algo.stop()


@pytest.mark.filterwarnings("ignore:This DQN state has no replay buffer")
def test_restore_refuses_another_algorithms_checkpoint_and_changes_nothing(
    ppo_algo: Any, tmp_path: Path
) -> None:
    """Issue 25, item 8: ``algo.restore(dqn_checkpoint)`` on a PPO said "stored state does not
    fit ... missing ['action_head.bias', ...]"; it names the class mismatch and the fix, as
    from_checkpoint does, before touching the algorithm."""
    path = _dqn_checkpoint(tmp_path)
    before = ppo_algo.get_state()
    with pytest.raises(CheckpointClassMismatchError) as info:
        ppo_algo.restore(path)
    message = str(info.value)
    assert "DQN checkpoint" in message and "this algorithm is a PPO" in message, message
    assert "cairn.Algorithm.from_checkpoint" in message and "cairn.DQN.from_checkpoint" in message
    assert_trees_equal(ppo_algo.get_state(), before)
    ppo_algo.restore(ppo_algo.save(tmp_path / "ppo"))  # its own kind still restores


def test_a_checkpoint_manifest_names_the_policy_class(ppo_algo: Any, tmp_path: Path) -> None:
    ppo_algo.get_policy().export_checkpoint(tmp_path / "p")
    manifest = json.loads((tmp_path / "p" / MANIFEST_FILE).read_text())
    assert manifest["class"] == ppo_algo.get_policy().policy_class_reference
