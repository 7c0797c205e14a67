"""CheckpointManager on object stores (memory://, and s3:// on the test suite's moto server
through s3fs), and incremental saves under a manager."""

from __future__ import annotations

import json
import os
import socket
import time
import uuid

import cairn
from cairn.checkpoint.manager import checkpoint_name
from cairn.checkpoint.reader import load_algorithm_state
from tests.helpers import assert_trees_equal, small_ma_ppo, small_ppo


def test_memory_root_retention_best_and_a_resumed_manager():
    root = f"memory://manager-{uuid.uuid4().hex[:8]}"
    algo = small_ppo().build()
    manager = cairn.CheckpointManager(root, keep_last=1, keep_best=("score", "max"))
    for iteration, score in [(1, 3.0), (2, 9.0), (3, 1.0), (4, 2.0)]:
        algo.iteration = iteration
        manager.save(algo, {"score": score}, blocking=iteration % 2 == 0)
    manager.wait()
    assert [(c.iteration, c.metric) for c in manager.checkpoints()] == [(2, 9.0), (4, 2.0)]
    assert manager.latest() == f"{root}/checkpoint_000004" and manager.best() == f"{root}/checkpoint_000002"
    resumed = cairn.CheckpointManager(root, keep_last=1, keep_best=("score", "max"))
    assert resumed.checkpoints() == manager.checkpoints()
    restored = cairn.Algorithm.from_checkpoint(root)
    assert restored.iteration == 4
    for other in (algo, restored):
        other.stop()


def test_s3_root_saves_in_the_background_retains_and_cleans_uncommitted_prefixes(s3):
    root = s3.url("runs/ppo")
    options = s3.storage_options
    algo = small_ppo().build()
    algo.train()
    snapshot = algo.get_state()
    manager = cairn.CheckpointManager(root, keep_last=2, storage_options=options)
    future = manager.save(algo, blocking=False)
    for _ in range(2):
        algo.train()
        manager.save(algo, blocking=False)
    manager.wait()
    assert future.result() == f"{root}/checkpoint_000001"
    assert [c.iteration for c in manager.checkpoints()] == [2, 3]
    prefixes = {key.split("/")[2] for key in s3.keys("runs/ppo/")}
    assert prefixes == {"checkpoint_000002", "checkpoint_000003",
                        "checkpoint_000002.record.json", "checkpoint_000003.record.json"}

    # What a save killed mid-upload leaves: objects under a prefix with no manifest, and the
    # record written before it, which names its (dead) writer. The next manager removes both;
    # latest() never saw them. A record whose writer may still run (it renews its lease) stays.
    client = s3.server.client()
    dead = {"iteration": 4, "host": socket.gethostname(), "pid": 2 ** 22 + 12345, "renewed": time.time()}
    alive = {"iteration": 5, "host": "elsewhere", "pid": 1, "renewed": time.time()}
    for iteration, record in ((4, dead), (5, alive)):
        client.put_object(Bucket=s3.name, Key=f"runs/ppo/checkpoint_00000{iteration}/algorithm_state.json",
                          Body=b"{}")
        client.put_object(Bucket=s3.name, Key=f"runs/ppo/checkpoint_00000{iteration}.record.json",
                          Body=json.dumps(record).encode())
    assert manager.latest() == f"{root}/checkpoint_000003"
    resumed = cairn.CheckpointManager(root, keep_last=2, storage_options=options)
    assert not [key for key in s3.keys("runs/ppo/") if "checkpoint_000004" in key]
    assert len([key for key in s3.keys("runs/ppo/") if "checkpoint_000005" in key]) == 2
    restored = cairn.Algorithm.from_checkpoint(root, storage_options=options)
    assert restored.iteration == 3
    assert_trees_equal(restored.get_state(), algo.get_state())
    first = cairn.CheckpointManager(s3.url("runs/first"), storage_options=options)
    algo.set_state(snapshot)
    first.save(algo)
    assert_trees_equal(load_algorithm_state(first.latest(), storage_options=options), snapshot)
    assert resumed.latest() == f"{root}/checkpoint_000003"
    for other in (algo, restored):
        other.stop()


def test_unchanged_policies_are_linked_from_the_previous_checkpoint(tmp_path):
    """p2 (a frozen opponent no agent plays now) is unchanged: its files in each new
    checkpoint are hard links to the previous checkpoint's, and deleting that one (retention)
    leaves the new one whole."""
    algo = small_ma_ppo(2).build()
    frozen_copy = cairn.Policy.from_state(algo.get_policy("p1").get_state())
    algo.add_policy("p2", frozen_copy, policies_to_train=["p0", "p1"])
    manager = cairn.CheckpointManager(tmp_path, keep_last=1)
    algo.train()
    first = manager.save(algo)
    frozen = os.stat(os.path.join(first, "policies", "p2", "policy_state.safetensors"))
    algo.train()
    second = manager.save(algo)
    assert not os.path.exists(first)  # retention removed the previous one...
    linked = os.stat(os.path.join(second, "policies", "p2", "policy_state.safetensors"))
    learned = os.path.join(second, "policies", "p0", "policy_state.safetensors")
    assert linked.st_ino == frozen.st_ino and os.stat(learned).st_nlink == 1
    assert load_algorithm_state(second)["iteration"] == 2  # ...and the new one verifies whole
    assert second == str(tmp_path / checkpoint_name(2))
    algo.stop()


def test_a_record_that_cannot_be_read_at_retention_does_not_lose_the_best_checkpoint(s3, monkeypatch):
    """A record read that fails (a connection reset s3fs gave up retrying, a throttled GET)
    counted as "no metric", so retention ranked the other checkpoints without it and deleted
    the best checkpoint for good, with no error and no warning. A checkpoint whose record
    exists but cannot be read is now kept, with a warning saying why; the next save decides."""
    import aiohttp
    import pytest
    import s3fs

    from cairn.errors import StorageCleanupWarning

    original = s3fs.S3FileSystem._cat_file
    failing: list[str] = []  # the key whose next read fails, once
    failed: list[str] = []

    async def cat_file(self, path, *args, **kwargs):
        if failing and str(path).endswith(failing[0]):
            failed.append(failing.pop())
            raise aiohttp.ClientOSError(104, "Connection reset by peer")
        return await original(self, path, *args, **kwargs)

    monkeypatch.setattr(s3fs.S3FileSystem, "_cat_file", cat_file)
    monkeypatch.setattr(s3fs.S3FileSystem, "_cache", {})  # instances bind methods when made
    root = s3.url("runs/best")
    algo = small_ppo().build()
    manager = cairn.CheckpointManager(root, keep_last=1, keep_best=("score", "max"),
                                      storage_options=s3.storage_options)
    for iteration, score in [(1, 9.0), (2, 1.0)]:
        algo.iteration = iteration
        manager.save(algo, {"score": score})
    assert [(c.iteration, c.metric) for c in manager.checkpoints()] == [(1, 9.0), (2, 1.0)]
    failing.append(f"{checkpoint_name(1)}.record.json")
    algo.iteration = 3
    with pytest.warns(StorageCleanupWarning, match=f"{checkpoint_name(1)}.record.json"):
        manager.save(algo, {"score": 2.0})
    assert failed  # the fault struck during this save's retention
    assert [(c.iteration, c.metric) for c in manager.checkpoints()] == [(1, 9.0), (3, 2.0)]
    algo.iteration = 4
    manager.save(algo, {"score": 0.0})  # the record reads again: retention as the rules say
    assert [(c.iteration, c.metric) for c in manager.checkpoints()] == [(1, 9.0), (4, 0.0)]
    assert manager.best() == f"{root}/{checkpoint_name(1)}"
    algo.stop()


def test_a_failed_read_while_checking_a_committed_save_does_not_remove_it(s3, monkeypatch):
    """The check after each commit (every file its manifests list is there) took a manifest
    read that the store failed to answer for a broken checkpoint: the committed save was
    removed, and with ``save(force=True)`` the iteration's earlier checkpoint with it, the error
    blaming "something deleted or changed them". The save now raises saying it committed and
    the check could not be made, and the checkpoint stays."""
    import aiohttp
    import pytest
    import s3fs

    from cairn.errors import CheckpointStorageError

    original = s3fs.S3FileSystem._cat_file
    reads: list[str] = []
    fail_at: list[int] = []  # the read of checkpoint 2's manifest that fails, once

    async def cat_file(self, path, *args, **kwargs):
        if str(path).endswith(f"{checkpoint_name(2)}/cairn_checkpoint.json"):
            reads.append(str(path))
            if fail_at and len(reads) == fail_at[0]:
                fail_at.clear()
                raise aiohttp.ClientOSError(104, "Connection reset by peer")
        return await original(self, path, *args, **kwargs)

    monkeypatch.setattr(s3fs.S3FileSystem, "_cat_file", cat_file)
    monkeypatch.setattr(s3fs.S3FileSystem, "_cache", {})  # instances bind methods when made
    root = s3.url("runs/check")
    algo = small_ppo().build()
    manager = cairn.CheckpointManager(root, keep_last=2, storage_options=s3.storage_options)
    for iteration in (1, 2):
        algo.iteration = iteration
        manager.save(algo)
    # A replacement reads the manifest it replaces, rolls the stage forward (one read), then
    # checks the committed checkpoint: fail the check's read.
    reads.clear()
    fail_at.append(3)
    with pytest.raises(CheckpointStorageError, match="committed, but reading it back"):
        manager.save(algo, force=True)
    assert not fail_at  # the fault struck
    assert [c.iteration for c in manager.checkpoints()] == [1, 2]
    assert load_algorithm_state(manager.latest(), storage_options=s3.storage_options)["iteration"] == 2
    algo.stop()
