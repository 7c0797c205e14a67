"""Restoring some policies reads only their files."""

import shutil
from pathlib import Path

import numpy as np
import pytest

import cairn
from cairn.errors import ConfigError, UnknownPolicyIdError


def test_subset_restore_survives_corrupted_siblings(ma_algo, tmp_path):
    ma_algo.train()
    path = Path(ma_algo.save(tmp_path / "c"))
    broken = tmp_path / "broken"
    shutil.copytree(path, broken)
    for pid in ("p1", "p2"):
        for f in (broken / "policies" / pid).iterdir():
            f.write_bytes(b"\x00corrupted")
    restored = cairn.Algorithm.from_checkpoint(
        broken, policy_ids=["p0"], policy_mapping_fn=lambda aid, **kw: "p0")
    assert set(restored.policies) == {"p0"}
    w, v = restored.get_policy("p0").get_weights(), ma_algo.get_policy("p0").get_weights()
    assert all(np.array_equal(w[k], v[k]) for k in w)
    assert restored.train()["learners"].keys() == {"p0"}
    with pytest.raises(cairn.errors.CheckpointError):  # the full restore does notice
        cairn.Algorithm.from_checkpoint(broken)


def test_dropped_policy_needs_a_new_mapping(ma_algo, tmp_path):
    path = ma_algo.save(tmp_path / "c")
    with pytest.raises(ConfigError, match="'p1'") as err:
        cairn.Algorithm.from_checkpoint(path, policy_ids=["p0"])
    assert "policy_mapping_fn" in str(err.value)


def test_unknown_policy_id(ma_algo, tmp_path):
    path = ma_algo.save(tmp_path / "c")
    with pytest.raises(UnknownPolicyIdError, match="'p9'"):
        cairn.Algorithm.from_checkpoint(path, policy_ids=["p9"])
    with pytest.raises(UnknownPolicyIdError, match="'p9'"):
        cairn.Policy.from_checkpoint(path, policy_ids=["p9"])


def test_policies_to_train_changes_at_restore(ma_algo, tmp_path):
    path = ma_algo.save(tmp_path / "c")
    restored = cairn.Algorithm.from_checkpoint(path, policies_to_train=["p2"])
    assert restored.train()["learners"].keys() == {"p2"}
