"""Checkpoints on S3 (issue 12): a real moto S3 server on 127.0.0.1 (tests/s3_server.py),
used through s3fs as a user would, with ``storage_options`` or with the AWS environment
variables (``AWS_ENDPOINT_URL`` and credentials)."""

from __future__ import annotations

import numpy as np
import pytest

import cairn
from cairn.algorithms.save_restore import save_algorithm
from cairn.checkpoint import resolve_storage
from cairn.checkpoint.format import MANIFEST_FILE
from cairn.errors import (
    CheckpointStorageError,
    StorageNotFoundError,
    StoragePermissionError,
    UncommittedCheckpointError,
)
from cairn.policy.policy import Policy
from tests.helpers import assert_trees_equal, small_ma_ppo
from tests.s3_server import ACCESS_KEY, SECRET_KEY


@pytest.fixture(scope="module")
def ma_algo():
    algo = small_ma_ppo(4).build()
    algo.train()
    yield algo
    algo.stop()


@pytest.fixture
def aws_env(monkeypatch, s3):
    """The usual AWS variables pointing at the test server (no storage_options needed)."""
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3.server.endpoint_url)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", ACCESS_KEY)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET_KEY)
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    return s3


def test_save_restore_and_info_through_the_aws_environment(ma_algo, aws_env):
    url = aws_env.url("runs/ckpt")
    assert ma_algo.save(url) == url
    keys = aws_env.keys("runs/ckpt/")
    assert ("runs/ckpt/cairn_checkpoint.json" in keys
            and "runs/ckpt/policies/p3/policy_state.safetensors" in keys)
    info = cairn.get_checkpoint_info(url)
    assert info["type"] == "Algorithm" and info["policy_ids"] == ["p0", "p1", "p2", "p3"]
    assert info["checkpoint_dir"] == url
    restored = cairn.Algorithm.from_checkpoint(url)
    try:
        assert_trees_equal(restored.get_state()["policies"], ma_algo.get_state()["policies"])
        assert restored.counters == ma_algo.counters
    finally:
        restored.stop()


def test_save_and_restore_with_storage_options(ma_algo, s3):
    url = s3.url("with-options/c")
    save_algorithm(ma_algo, url, storage_options=s3.storage_options)
    other = small_ma_ppo(4).build()
    try:
        other.restore(url, storage_options=s3.storage_options)
        assert_trees_equal(other.get_policy("p2").get_weights(), ma_algo.get_policy("p2").get_weights())
    finally:
        other.stop()


def test_manifest_is_the_last_object_written(ma_algo, s3):
    url = s3.url("order/c")
    s3.server.reset_requests()
    save_algorithm(ma_algo, url, storage_options=s3.storage_options)
    puts = [path for method, path in s3.server.requests("PUT")]
    assert puts[-1].endswith(f"/order/c/{MANIFEST_FILE}")
    assert len(puts) == len(s3.keys("order/c/"))


def test_subset_restore_reads_only_the_objects_of_the_policies_asked_for(ma_algo, s3):
    url = s3.url("subset/c")
    save_algorithm(ma_algo, url, storage_options=s3.storage_options)
    s3.server.reset_requests()
    restored = cairn.Algorithm.from_checkpoint(url, policy_ids=["p1"], storage_options=s3.storage_options,
                                               policy_mapping_fn=lambda aid, **kw: "p1")
    restored.stop()
    read = {path.split("/subset/c/", 1)[1]
            for method, path in s3.server.requests("GET") if "/subset/c/" in path}
    assert read == {"cairn_checkpoint.json", "algorithm_state.json", "algorithm_state.safetensors",
                    "policies/p1/cairn_checkpoint.json", "policies/p1/policy_state.json",
                    "policies/p1/policy_state.safetensors"}
    assert not any("/policies/p0/" in path or "/policies/p2/" in path for _, path in s3.server.requests())
    s3.server.reset_requests()
    policies = Policy.from_checkpoint(url, policy_ids=["p3"], storage_options=s3.storage_options)
    assert list(policies) == ["p3"]
    assert {p for _, p in s3.server.requests("GET") if "/policies/" in p} == {
        f"/{s3.name}/subset/c/policies/p3/{f}" for f in
        ("cairn_checkpoint.json", "policy_state.json", "policy_state.safetensors")}


def test_policy_export_and_load_on_s3(ma_algo, s3):
    url = s3.url("exports/p0")
    ma_algo.get_policy("p0").export_checkpoint(url, storage_options=s3.storage_options)
    loaded = Policy.from_checkpoint(url, storage_options=s3.storage_options)
    obs = np.array([0.01, -0.02, 0.03, 0.0], dtype=np.float32)
    assert loaded.compute_single_action(obs, explore=False) == ma_algo.get_policy("p0").compute_single_action(
        obs, explore=False)
    assert cairn.get_checkpoint_info(url, storage_options=s3.storage_options)["type"] == "Policy"


def test_an_interrupted_save_is_refused_until_saved_again(ma_algo, s3):
    url = s3.url("interrupted/c")
    save_algorithm(ma_algo, url, storage_options=s3.storage_options)
    resolve_storage(url, storage_options=s3.storage_options).delete(MANIFEST_FILE)
    with pytest.raises(UncommittedCheckpointError, match=url):
        cairn.Algorithm.from_checkpoint(url, storage_options=s3.storage_options)


def test_missing_bucket_is_a_storage_error_naming_the_url(ma_algo, s3):
    url = "s3://cairn-no-such-bucket/c"
    with pytest.raises(StorageNotFoundError, match="bucket does not exist") as info:
        save_algorithm(ma_algo, url, storage_options=s3.storage_options)
    assert url in str(info.value)
    with pytest.raises(StorageNotFoundError, match="cairn-no-such-bucket"):
        cairn.get_checkpoint_info(url, storage_options=s3.storage_options)


def test_no_credentials_is_a_storage_error_that_says_where_they_come_from(ma_algo, s3, monkeypatch, tmp_path):
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    options = {"client_kwargs": {"endpoint_url": s3.server.endpoint_url}, "skip_instance_cache": True}
    url = s3.url("nocreds/c")
    with pytest.raises(StoragePermissionError, match="no credentials") as info:
        save_algorithm(ma_algo, url, storage_options=options)
    assert url in str(info.value) and "AWS_ACCESS_KEY_ID" in str(info.value)
    assert isinstance(info.value, CheckpointStorageError) and info.value.__cause__ is None
    with pytest.raises(StoragePermissionError):
        cairn.Algorithm.from_checkpoint(url, storage_options=options)
    assert s3.keys("nocreds/") == []
