"""Checkpoint locations other than local paths (issue 12): the Storage interface, memory://
round trips through fsspec, object-store commit semantics, and the errors of bad URLs.

S3 itself (a real moto server through s3fs) is in test_s3.py; incremental saves in
test_incremental.py.
"""

from __future__ import annotations

import importlib.util
import json
import secrets

import numpy as np
import pytest

import cairn
from cairn.checkpoint import resolve_storage
from cairn.checkpoint.format import MANIFEST_FILE
from cairn.errors import (
    CheckpointCorruptedError,
    CheckpointFormatError,
    StorageBackendMissingError,
    UncommittedCheckpointError,
    UnsupportedCheckpointLocationError,
)
from cairn.policy.policy import Policy
from tests.helpers import assert_trees_equal, small_ma_ppo


@pytest.fixture(scope="module")
def ma_algo():
    algo = small_ma_ppo(3).build()
    algo.train()
    yield algo
    algo.stop()


def _url(name: str = "c") -> str:
    return f"memory://cairn-tests-{secrets.token_hex(4)}/{name}"


@pytest.mark.parametrize("where", ["local", "memory"])
def test_storage_interface_lists_reads_writes_and_deletes(tmp_path, where):
    root = resolve_storage(tmp_path / "root" if where == "local" else _url("root"))
    assert not root.exists() and root.list_files() == []
    root.write_bytes("a/b.json", b"{}")
    root.child("a").write_bytes("c/d.bin", b"\x00" * 10)
    root.write_bytes("top", b"1")
    assert root.list_files() == ["a/b.json", "a/c/d.bin", "top"]
    assert root.list_files("a/c") == ["a/c/d.bin"]
    assert root.exists("a") and root.exists("a/b.json") and not root.exists("zz")
    assert root.read_bytes("a/c/d.bin", limit=10) == b"\x00" * 10
    with pytest.raises(CheckpointCorruptedError, match="more than 9"):
        root.read_bytes("a/c/d.bin", limit=9)
    root.write_bytes("top", b"2")  # replaced whole
    assert root.read_bytes("top", limit=1) == b"2"
    root.delete("top")
    root.delete("top")  # missing: nothing happens
    root.delete_prefix("a/c")
    assert root.list_files() == ["a/b.json"]
    root.delete_prefix()
    assert root.list_files() == []
    with pytest.raises(Exception, match="leaves its directory"):
        root.read_bytes("../x", limit=1)


def test_memory_round_trip_of_an_algorithm_and_of_a_subset(ma_algo):
    url = _url()
    assert ma_algo.save(url) == url
    info = cairn.get_checkpoint_info(url)
    assert info["type"] == "Algorithm" and info["checkpoint_dir"] == url
    assert info["state_file"] == f"{url}/algorithm_state.json"
    restored = cairn.Algorithm.from_checkpoint(url)
    try:
        assert_trees_equal(restored.get_state()["policies"], ma_algo.get_state()["policies"])
        assert restored.iteration == ma_algo.iteration
    finally:
        restored.stop()
    policies = Policy.from_checkpoint(url, policy_ids=["p1"])
    assert list(policies) == ["p1"]
    assert_trees_equal(policies["p1"].get_weights(), ma_algo.get_policy("p1").get_weights())


def test_memory_restore_in_place_and_policy_export(ma_algo):
    url = _url()
    ma_algo.save(url)
    other = small_ma_ppo(3).build()
    try:
        other.restore(url)
        assert_trees_equal(other.get_policy("p0").get_weights(), ma_algo.get_policy("p0").get_weights())
    finally:
        other.stop()
    policy_url = _url("policy")
    ma_algo.get_policy("p2").export_checkpoint(policy_url)
    loaded = Policy.from_checkpoint(policy_url)
    obs = np.zeros(4, dtype=np.float32)
    assert loaded.compute_single_action(obs, explore=False) == ma_algo.get_policy("p2").compute_single_action(
        obs, explore=False)
    assert cairn.get_checkpoint_info(policy_url)["type"] == "Policy"


def test_a_prefix_without_its_manifest_is_refused_as_uncommitted(ma_algo):
    url = _url()
    ma_algo.save(url)
    store = resolve_storage(url)
    store.delete(MANIFEST_FILE)  # what a save interrupted before its commit leaves
    with pytest.raises(UncommittedCheckpointError, match="no committed cairn_checkpoint.json"):
        cairn.Algorithm.from_checkpoint(url)
    with pytest.raises(UncommittedCheckpointError):
        cairn.get_checkpoint_info(url)
    ma_algo.save(url)  # a save there replaces the leftovers
    assert cairn.get_checkpoint_info(url)["policy_ids"] == ["p0", "p1", "p2"]


def test_replacing_a_checkpoint_on_an_object_store_leaves_no_stale_object(ma_algo):
    url = _url()
    ma_algo.save(url)
    store = resolve_storage(url)
    store.write_bytes("policies/p9/policy_state.json", b"stale")  # e.g. a policy since removed
    ma_algo.save(url)
    assert not any(name.startswith("policies/p9/") for name in store.list_files())
    assert set(store.list_files()) == {MANIFEST_FILE, *cairn.get_checkpoint_info(url)["files"],
                                       *(f"policies/{p}/{f}" for p in ("p0", "p1", "p2")
                                         for f in ("policy_state.json", "policy_state.safetensors"))}


def test_a_prefix_holding_other_objects_is_never_written_into(ma_algo):
    url = _url()
    store = resolve_storage(url)
    store.write_bytes("results/progress.csv", b"1,2,3")
    with pytest.raises(CheckpointFormatError, match="not a cairn checkpoint"):
        ma_algo.save(url)
    with pytest.raises(CheckpointFormatError, match="not a cairn checkpoint"):
        ma_algo.get_policy("p0").export_checkpoint(url)
    assert store.list_files() == ["results/progress.csv"]


def test_a_corrupted_object_is_refused_by_its_hash(ma_algo):
    url = _url()
    ma_algo.save(url)
    store = resolve_storage(url)
    name = "policies/p1/policy_state.json"
    data = bytearray(store.read_bytes(name, limit=1 << 20))
    data[10] ^= 1
    store.write_bytes(name, bytes(data))
    with pytest.raises(CheckpointCorruptedError, match="hash"):
        Policy.from_checkpoint(url, policy_ids=["p1"])
    assert list(Policy.from_checkpoint(url, policy_ids=["p0"])) == ["p0"]  # the others still load


def test_unknown_url_scheme_is_refused_with_the_library_error(ma_algo):
    with pytest.raises(UnsupportedCheckpointLocationError, match="nosuch://bucket/x"):
        cairn.Algorithm.from_checkpoint("nosuch://bucket/x")
    with pytest.raises(UnsupportedCheckpointLocationError, match="nosuch://"):
        cairn.get_checkpoint_info("nosuch://bucket/x")


@pytest.mark.skipif(importlib.util.find_spec("gcsfs") is not None, reason="gcsfs is installed here")
def test_missing_backend_names_the_extra_to_install(ma_algo):
    with pytest.raises(StorageBackendMissingError, match=r"pip install 'cairn-rl\[gcs\]'") as info:
        ma_algo.save("gs://bucket/run/c")
    assert "gs://bucket/run/c" in str(info.value) and isinstance(info.value, ImportError)


def test_storage_options_for_a_local_path_are_refused(tmp_path):
    with pytest.raises(UnsupportedCheckpointLocationError, match="takes none"):
        cairn.get_checkpoint_info(tmp_path, storage_options={"key": "x"})


_LOCAL_ONLY = """
import json, sys
sys.path.insert(0, {root!r})
import cairn
policy = cairn.Policy.from_checkpoint({path!r})
cairn.get_checkpoint_info({path!r})
policy.export_checkpoint({again!r})
print(json.dumps([m for m in ("fsspec", "s3fs", "gcsfs", "botocore", "aiobotocore") if m in sys.modules]))
"""


def test_local_checkpoints_never_import_fsspec_or_a_cloud_backend(ma_algo, tmp_path):
    import subprocess
    import sys

    from tests.conftest import ROOT

    path = tmp_path / "p0"
    ma_algo.get_policy("p0").export_checkpoint(path)
    script = _LOCAL_ONLY.format(root=str(ROOT), path=str(path), again=str(tmp_path / "again"))
    out = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, check=True)
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []


def test_export_model_to_an_object_store_uploads_the_checked_files(ma_algo):
    from cairn.export import PROGRAM_FILE, SIGNATURE_FILE, WEIGHTS_FILE, export_model

    url = _url("model")
    signature = export_model(ma_algo.get_policy("p0"), url)
    store = resolve_storage(url)
    assert {PROGRAM_FILE, SIGNATURE_FILE, WEIGHTS_FILE} <= set(store.list_files())
    assert json.loads(store.read_bytes(SIGNATURE_FILE, limit=1 << 20)) == signature
