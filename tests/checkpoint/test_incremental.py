"""Incremental saves (issue 12, item 5): a policy whose files would hash the same as in the
previous checkpoint is taken from there (hard link locally, server-side copy on S3), and each
checkpoint still stands alone."""

from __future__ import annotations

import os
import shutil

import numpy as np
import pytest

import cairn
from cairn.algorithms.save_restore import save_algorithm
from cairn.checkpoint import get_checkpoint_info, resolve_storage
from tests.helpers import assert_trees_equal, small_ma_ppo


@pytest.fixture
def ma_algo():
    algo = small_ma_ppo(3).build()
    algo.train()
    yield algo
    algo.stop()


def _touch_policy(algo, pid: str) -> None:
    """Change one policy's state as training would (its weights and its counters)."""
    policy = algo.get_policy(pid)
    weights = policy.get_weights()
    name = next(iter(weights))
    policy.set_weights({**weights, name: weights[name] + 1.0})


def _inode(path) -> int:
    return os.stat(path).st_ino


def test_unchanged_policies_are_hard_links_and_survive_deleting_the_previous(ma_algo, tmp_path):
    first = save_algorithm(ma_algo, tmp_path / "c1")
    _touch_policy(ma_algo, "p1")
    second = save_algorithm(ma_algo, tmp_path / "c2", previous=first)
    for pid, linked in (("p0", True), ("p1", False), ("p2", True)):
        for name in ("cairn_checkpoint.json", "policy_state.json", "policy_state.safetensors"):
            a, b = tmp_path / "c1" / "policies" / pid / name, tmp_path / "c2" / "policies" / pid / name
            assert (_inode(a) == _inode(b)) is linked, (pid, name)
    # the root manifest vouches for the linked policy manifests (same entry as before)
    old, new = get_checkpoint_info(first)["files"], get_checkpoint_info(second)["files"]
    assert new["policies/p0/cairn_checkpoint.json"] == old["policies/p0/cairn_checkpoint.json"]
    assert new["policies/p1/cairn_checkpoint.json"] != old["policies/p1/cairn_checkpoint.json"]
    expected = ma_algo.get_state()["policies"]
    shutil.rmtree(first)  # each checkpoint stands alone
    restored = cairn.Algorithm.from_checkpoint(second)
    try:
        assert_trees_equal(restored.get_state()["policies"], expected)
    finally:
        restored.stop()


def test_an_incremental_checkpoint_equals_a_full_one(ma_algo, tmp_path):
    first = save_algorithm(ma_algo, tmp_path / "c1")
    _touch_policy(ma_algo, "p0")
    incremental = save_algorithm(ma_algo, tmp_path / "inc", previous=first)
    full = save_algorithm(ma_algo, tmp_path / "full")
    for pid in ("p0", "p1", "p2"):
        for name in ("policy_state.json", "policy_state.safetensors"):
            assert (tmp_path / "inc" / "policies" / pid / name).read_bytes() == (
                tmp_path / "full" / "policies" / pid / name).read_bytes()
    a, b = cairn.Algorithm.from_checkpoint(incremental), cairn.Algorithm.from_checkpoint(full)
    try:
        assert_trees_equal(a.get_state()["policies"], b.get_state()["policies"])
    finally:
        a.stop()
        b.stop()


def test_replacing_the_previous_checkpoint_itself_keeps_it_whole(ma_algo, tmp_path):
    path = save_algorithm(ma_algo, tmp_path / "c")
    _touch_policy(ma_algo, "p2")
    save_algorithm(ma_algo, path, previous=path)  # linked from the checkpoint being replaced
    policies = cairn.Policy.from_checkpoint(path, policy_ids=["p0", "p2"])
    assert_trees_equal(policies["p2"].get_weights(), ma_algo.get_policy("p2").get_weights())


def test_a_previous_checkpoint_that_cannot_be_read_gives_a_full_save(ma_algo, tmp_path):
    with pytest.warns(UserWarning, match="every file is written anew"):
        path = save_algorithm(ma_algo, tmp_path / "c", previous=tmp_path / "missing")
    assert get_checkpoint_info(path)["policy_ids"] == ["p0", "p1", "p2"]


def test_on_s3_unchanged_policies_are_server_side_copies(ma_algo, s3):
    options = s3.storage_options
    first = save_algorithm(ma_algo, s3.url("run/c1"), storage_options=options)
    _touch_policy(ma_algo, "p1")
    s3.server.reset_requests()
    second = save_algorithm(ma_algo, s3.url("run/c2"), storage_options=options, previous=first)
    copies = {p.split("/run/c2/", 1)[1] for m, p in s3.server.requests("COPY")}
    uploads = {p.split("/run/c2/", 1)[1] for m, p in s3.server.requests("PUT") if "/run/c2/" in p}
    assert copies == {f"policies/{pid}/{f}" for pid in ("p0", "p2")
                      for f in ("cairn_checkpoint.json", "policy_state.json", "policy_state.safetensors")}
    assert {f"policies/p1/{f}" for f in ("policy_state.json", "policy_state.safetensors")} <= uploads
    assert not any(name.startswith(("policies/p0/", "policies/p2/")) for name in uploads)
    expected = ma_algo.get_state()["policies"]
    resolve_storage(first, storage_options=options).delete_prefix()
    assert s3.keys("run/c1/") == []
    states = cairn.Algorithm.from_checkpoint(second, storage_options=options)
    try:
        assert_trees_equal(states.get_state()["policies"], expected)
    finally:
        states.stop()


def test_on_memory_an_incremental_save_round_trips(ma_algo):
    first = save_algorithm(ma_algo, "memory://cairn-incremental/c1")
    _touch_policy(ma_algo, "p0")
    second = save_algorithm(ma_algo, "memory://cairn-incremental/c2", previous=first)
    resolve_storage(first).delete_prefix()
    policies = cairn.Policy.from_checkpoint(second, policy_ids=["p0", "p1"])
    np.testing.assert_array_equal(
        next(iter(policies["p0"].get_weights().values())),
        next(iter(ma_algo.get_policy("p0").get_weights().values())))
