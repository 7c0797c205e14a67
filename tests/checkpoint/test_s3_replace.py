"""Replacing a checkpoint on S3 (issue 25, item 3): a save that fails while it uploads leaves
the previous checkpoint at the URL whole and loadable; readers see the old checkpoint or the
new one, never a mix; a failure in the commit step says that the previous one is gone.

Failures are injected into s3fs's upload (``_put_file``) and server-side copy (``_cp_file``)
coroutines, as a connection reset that s3fs has given up retrying: the bytes travel to the
test's moto server until then, as they would to S3.
"""

from __future__ import annotations

import asyncio
import functools

import numpy as np
import pytest

import cairn
from cairn.checkpoint import load_algorithm_state, resolve_storage
from cairn.errors import CheckpointStorageError, UncommittedCheckpointError
from tests.helpers import assert_trees_equal, small_ppo


def _reset() -> Exception:
    import aiohttp

    return aiohttp.ClientOSError(104, "Connection reset by peer")


def _patch(monkeypatch: pytest.MonkeyPatch, method: str, make) -> None:
    """Replace the s3fs coroutine ``method`` with ``make(original)``; instances bind it when
    they are made (their sync ``put_file`` and ``copy``), so the cached ones are dropped."""
    import s3fs

    monkeypatch.setattr(s3fs.S3FileSystem, method, make(getattr(s3fs.S3FileSystem, method)))
    monkeypatch.setattr(s3fs.S3FileSystem, "_cache", {})  # restored, with its instances, on undo


def _cut_uploads_after(monkeypatch: pytest.MonkeyPatch, count: int) -> list[str]:
    """Uploads succeed ``count`` times, then the connection is reset; returns the keys uploaded."""
    started: list[str] = []
    done: list[str] = []

    def make(original):
        async def put_file(self, lpath, rpath, *args, **kwargs):
            started.append(rpath)  # counted when they start: uploads run concurrently
            if len(started) > count:
                raise _reset()
            await original(self, lpath, rpath, *args, **kwargs)
            done.append(rpath)
        return put_file

    _patch(monkeypatch, "_put_file", make)
    return done


@pytest.fixture
def algo():
    algo = small_ppo().build()
    algo.train()
    yield algo
    algo.stop()


def _siblings(s3, key: str) -> list[str]:
    """Every key beside ``key``'s prefix and not inside it (temporary prefixes left over)."""
    parent = key.rsplit("/", 1)[0] + "/"
    return [k for k in s3.keys(parent) if not k.startswith(key + "/")]


def test_a_background_save_cut_mid_upload_leaves_the_previous_checkpoint_whole(algo, s3, monkeypatch):
    options = s3.storage_options
    url = algo.save(s3.url("run/ckpt"), storage_options=options)
    before = algo.get_state()
    algo.train()
    uploaded = _cut_uploads_after(monkeypatch, 3)
    error = algo.save(url, blocking=False, storage_options=options).exception()
    assert isinstance(error, CheckpointStorageError) and len(uploaded) == 3  # cut mid-way
    monkeypatch.undo()
    restored = cairn.Algorithm.from_checkpoint(url, storage_options=options)
    try:
        assert restored.iteration == 1
        assert_trees_equal(restored.get_state(), before)
    finally:
        restored.stop()
    message = str(error)
    assert f"previous checkpoint at {url} is intact" in message and "Connection reset" in message
    assert _siblings(s3, "run/ckpt") == []  # the temporary prefix was removed
    assert algo.save(url, storage_options=options) == url  # the next save replaces it
    assert load_algorithm_state(url, storage_options=options)["iteration"] == 2


def test_readers_load_the_old_checkpoint_until_every_new_byte_is_uploaded(algo, s3, monkeypatch):
    """A reader in the middle of the upload loads the old checkpoint whole; the old one's
    objects are touched only after the last new byte is in the store."""
    options = s3.storage_options
    url = algo.save(s3.url("run/ckpt"), storage_options=options)
    before = load_algorithm_state(url, storage_options=options)
    algo.train()
    seen: list[object] = []

    def make(original):
        async def put_file(self, lpath, rpath, *args, **kwargs):
            await original(self, lpath, rpath, *args, **kwargs)
            if not seen:  # the first upload is done: read the URL meanwhile, in another thread
                seen.append(None)
                read = functools.partial(load_algorithm_state, url, storage_options=options)
                try:
                    seen[0] = await asyncio.get_running_loop().run_in_executor(None, read)
                except Exception as exc:  # the test reports what the reader got
                    seen[0] = exc
        return put_file

    _patch(monkeypatch, "_put_file", make)
    s3.server.reset_requests()
    algo.save(url, storage_options=options)
    log = s3.server.requests()
    monkeypatch.undo()
    assert isinstance(seen[0], dict), seen[0]
    assert_trees_equal(seen[0], before)
    prefix = f"/{s3.name}/run/ckpt/"
    aside = [i for i, (method, path) in enumerate(log) if method == "PUT" and prefix not in path]
    changed = [i for i, (method, path) in enumerate(log)
               if method in ("PUT", "COPY", "DELETE", "POST") and prefix in path]
    assert aside and changed and max(aside) < min(changed), log
    assert load_algorithm_state(url, storage_options=options)["iteration"] == 2
    assert _siblings(s3, "run/ckpt") == []


def test_a_failure_in_the_commit_step_says_the_previous_checkpoint_is_gone(algo, s3, monkeypatch):
    options = s3.storage_options
    url = algo.save(s3.url("run/ckpt"), storage_options=options)
    algo.train()

    async def cp_file(self, path1, path2, *args, **kwargs):
        raise _reset()

    _patch(monkeypatch, "_cp_file", lambda original: cp_file)
    with pytest.raises(CheckpointStorageError) as info:
        algo.save(url, storage_options=options)
    monkeypatch.undo()
    assert f"previous checkpoint at {url} was removed before the failure" in str(info.value)
    with pytest.raises(UncommittedCheckpointError):
        load_algorithm_state(url, storage_options=options)
    assert _siblings(s3, "run/ckpt") == []
    algo.save(url, storage_options=options)
    assert load_algorithm_state(url, storage_options=options)["iteration"] == 2


def test_the_next_save_removes_what_a_killed_replacement_left_beside_the_checkpoint(algo, s3):
    """A save killed while it uploads leaves its temporary prefix (test_s3_crash.py kills one);
    the next save to that URL removes it, and leaves other prefixes alone."""
    options = s3.storage_options
    url = algo.save(s3.url("run/ckpt"), storage_options=options)
    for key in ("run/.ckpt.cairn-tmp-4242-0badf00d/algorithm_state.json",
                "run/.ckpt.cairn-tmp-4242-0badf00d/policies/default_policy/policy_state.json",
                "run/.ckpt2.cairn-tmp-1-00000000/x", "run/ckpt2/x"):
        s3.put(key, b"{}")
    assert algo.save(url, storage_options=options) == url
    assert _siblings(s3, "run/ckpt") == ["run/.ckpt2.cairn-tmp-1-00000000/x", "run/ckpt2/x"]


def test_a_replacement_at_a_bucket_root_says_what_it_cannot_guarantee(s3, monkeypatch):
    """A checkpoint that is a whole bucket has no prefix beside it to upload to: it is
    rewritten in place, and a failure says that the previous checkpoint is gone."""
    from cairn.checkpoint import write_algorithm_checkpoint

    options = s3.storage_options
    state = {"algorithm_class": "PPO", "iteration": 1, "policy_ids": [], "policies": {},
             "x": np.zeros(3)}
    write_algorithm_checkpoint(s3.url(), state, storage_options=options)
    assert not resolve_storage(s3.url(), storage_options=options).has_parent
    _cut_uploads_after(monkeypatch, 0)
    with pytest.raises(CheckpointStorageError, match="was removed before the failure"):
        write_algorithm_checkpoint(s3.url(), state, storage_options=options)


def test_a_manager_removes_the_temporary_prefixes_of_killed_replacements_under_its_root(algo, s3):
    """``manager.save(force=True)`` of an iteration already saved replaces that checkpoint;
    killed while uploading, it leaves a temporary prefix under the root, which the next
    manager on the root removes (as it removes uncommitted checkpoints)."""
    options = s3.storage_options
    manager = cairn.CheckpointManager(s3.url("runs/ppo"), storage_options=options)
    manager.save(algo)
    s3.put("runs/ppo/.checkpoint_000001.cairn-tmp-4242-0badf00d/algorithm_state.json", b"{}")
    cairn.CheckpointManager(s3.url("runs/ppo"), storage_options=options)
    assert not [key for key in s3.keys("runs/ppo/") if "cairn-tmp" in key]
    assert manager.latest() == s3.url("runs/ppo/checkpoint_000001")
