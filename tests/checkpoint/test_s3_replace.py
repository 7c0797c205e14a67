"""Replacing a checkpoint on S3 (issue 25, item 3): a save that fails while it uploads leaves
the previous checkpoint at the URL whole and loadable; readers see the old checkpoint or the
new one, never a mix; a failure in the commit step says that the previous one is gone.

Failures are injected into s3fs's upload (``_put_file``) and server-side copy (``_cp_file``)
coroutines, as a connection reset that s3fs has given up retrying: the bytes travel to the
test's moto server until then, as they would to S3.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import warnings

import numpy as np
import pytest

import cairn
from cairn.checkpoint import (
    load_algorithm_state,
    load_policy_state,
    resolve_storage,
    write_algorithm_checkpoint,
)
from cairn.errors import CheckpointStorageError, StorageCleanupWarning, UncommittedCheckpointError
from tests.checkpoint.s3_faults import TreeAlgo, fail_request, loaded_value, stages, state_tree
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


#: The changing requests of a replacement of a checkpoint of 6 files (the root manifest, the
#: algorithm state's 2 files, one policy's 3): 5 uploads to the stage, its manifest, 5 copies
#: over the old files, the new manifest, then the stage's manifest deleted and the rest of it.
REPLACEMENT_REQUESTS = 14


def test_a_replacement_makes_the_requests_every_failure_point_below_covers(s3, monkeypatch):
    options = s3.storage_options
    url = write_algorithm_checkpoint(s3.url("run/same"), state_tree(1.0), storage_options=options)
    log = fail_request(monkeypatch, None)
    write_algorithm_checkpoint(url, state_tree(2.0), storage_options=options)
    assert [name for name, _ in log] == (["_put_file"] * 6 + ["_cp_file"] * 5 + ["_pipe_file"]
                                         + ["_rm_file", "_rm"]), log


@pytest.mark.parametrize("fail_at", range(1, REPLACEMENT_REQUESTS + 1))
def test_a_failed_request_anywhere_in_a_replacement_leaves_one_checkpoint_whole(s3, monkeypatch, fail_at):
    """Issue 36, item 4: a failed CopyObject (or any other request) once deleted the stage that
    held the only whole copy of the new checkpoint, after the old manifest was gone. Now the
    URL loads the old checkpoint or the new one, whole and verified, after a failure at every
    request, and the error says which; a committed stage is completed by the next manager
    started on the root, and the next save replaces the checkpoint."""
    options = s3.storage_options
    url = write_algorithm_checkpoint(s3.url("run/same"), state_tree(1.0), storage_options=options)
    log = fail_request(monkeypatch, fail_at)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            write_algorithm_checkpoint(url, state_tree(2.0), storage_options=options)
            error = None
        except CheckpointStorageError as exc:
            error = str(exc)
    monkeypatch.undo()
    cleanup = [str(w.message) for w in caught if issubclass(w.category, StorageCleanupWarning)]
    assert len(log) >= fail_at
    value = loaded_value(url, options)
    staged = stages(s3, "run/")
    if fail_at <= 6:  # the stage never became whole: the old checkpoint is, and the error says so
        assert value == 1.0 and staged == [] and f"previous checkpoint at {url} is intact" in error
    elif fail_at <= 12:  # the stage is whole; loads read it until it is completed
        assert value == 2.0 and "Nothing is lost: the new checkpoint is whole" in error
        assert "run/.same.cairn-tmp-" in staged[0]
        assert load_policy_state(f"{url}/policies/p0", storage_options=options)["counters"] == {
            "global_timestep": 2}
        cairn.CheckpointManager(s3.url("run"), storage_options=options)  # completes it
        assert stages(s3, "run/") == [] and loaded_value(url, options) == 2.0
    else:  # committed at the prefix; only the clean-up failed: a warning, not an error
        assert value == 2.0 and error is None and len(cleanup) == 1, cleanup
        assert f"The checkpoint at {url} is saved and loads" in cleanup[0]
        # the stage's manifest deleted or not, read back: what the warning says
        committed = [key for key in staged if key.count("/") == 2 and key.endswith("/cairn_checkpoint.json")]
        assert ("still committed" in cleanup[0]) == bool(committed), (cleanup, staged)
    write_algorithm_checkpoint(url, state_tree(3.0), storage_options=options)
    assert loaded_value(url, options) == 3.0 and stages(s3, "run/") == []


def test_a_failed_copy_on_a_memory_store_keeps_the_new_checkpoint(monkeypatch):
    """The issue's reproduction: one failed server-side copy on memory:// left no manifest and
    the load raised StorageNotFoundError."""
    from fsspec.implementations.memory import MemoryFileSystem

    url = f"memory://cairn-replace-{os.getpid()}/run/ckpt"
    write_algorithm_checkpoint(url, state_tree(1.0))
    original, calls = MemoryFileSystem.cp_file, []

    def cp_file(self, path1, path2, **kwargs):
        calls.append(path2)
        if len(calls) == 1:
            raise OSError(503, "Service Unavailable (injected into CopyObject)")
        return original(self, path1, path2, **kwargs)

    monkeypatch.setattr(MemoryFileSystem, "cp_file", cp_file)
    with pytest.raises(CheckpointStorageError) as info:
        write_algorithm_checkpoint(url, state_tree(2.0))
    monkeypatch.undo()
    assert loaded_value(url, {}) == 2.0  # main: UncommittedCheckpointError, the stage deleted
    assert "Nothing is lost: the new checkpoint is whole" in str(info.value)
    write_algorithm_checkpoint(url, state_tree(3.0))  # rolls the stage forward, then replaces
    assert loaded_value(url, {}) == 3.0
    MemoryFileSystem().rm(f"/cairn-replace-{os.getpid()}", recursive=True)


def test_the_next_save_rolls_a_committed_stage_forward_before_its_own(s3, monkeypatch):
    """A committed stage holds the newest checkpoint: the next save completes it first, so that
    a failure of that save's own upload leaves the staged checkpoint, not the older one."""
    options = s3.storage_options
    url = write_algorithm_checkpoint(s3.url("run/same"), state_tree(1.0), storage_options=options)
    fail_request(monkeypatch, 7)  # the first copy: the stage of 2.0 stays committed
    with pytest.raises(CheckpointStorageError, match="Nothing is lost"):
        write_algorithm_checkpoint(url, state_tree(2.0), storage_options=options)
    monkeypatch.undo()
    log = fail_request(monkeypatch, 5 + 1 + 2 + 1)  # after the roll forward: its first upload
    with pytest.raises(CheckpointStorageError, match="is intact"):
        write_algorithm_checkpoint(url, state_tree(3.0), storage_options=options)
    monkeypatch.undo()
    assert [name for name, _ in log[:6]] == ["_cp_file"] * 5 + ["_pipe_file"], log
    assert loaded_value(url, options) == 2.0 and stages(s3, "run/") == []


@pytest.mark.parametrize("fail_at", range(1, REPLACEMENT_REQUESTS + 2))
@pytest.mark.filterwarnings("ignore::cairn.errors.StorageCleanupWarning")  # the last two: checked above
def test_a_manager_saving_an_iteration_again_keeps_a_loadable_checkpoint(s3, monkeypatch, fail_at):
    """Issue 37, item 3: ``save(force=True)`` of an iteration already saved replaces that
    checkpoint (its record is written first: one request more); a failure at any request left
    nothing loadable (``latest() = None``). Now the latest checkpoint loads, old or new, and a
    manager started on the root completes a committed stage. Its record's metric is that of the
    checkpoint that loads: a replacement that failed leaves the old one's."""
    options = s3.storage_options
    manager = cairn.CheckpointManager(s3.url("runs/tree"), keep_last=1, keep_best=("score", "max"),
                                      storage_options=options)
    manager.save(TreeAlgo(1.0), {"score": 1.0})
    fail_request(monkeypatch, fail_at)
    with contextlib.suppress(CheckpointStorageError):
        manager.save(TreeAlgo(2.0), {"score": 2.0}, force=True)
    monkeypatch.undo()
    assert manager.latest() == s3.url("runs/tree/checkpoint_000001")
    value = loaded_value(manager.latest(), options)
    assert value in (1.0, 2.0) and [c.metric for c in manager.checkpoints()] == [value]
    reopened = cairn.CheckpointManager(s3.url("runs/tree"), keep_last=1, keep_best=("score", "max"),
                                       storage_options=options)
    value = loaded_value(reopened.latest(), options)
    assert stages(s3, "runs/") == [] and value in (1.0, 2.0)
    assert [c.metric for c in reopened.checkpoints()] == [value]


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
    options = s3.storage_options
    state = {"algorithm_class": "PPO", "iteration": 1, "policy_ids": [], "policies": {},
             "x": np.zeros(3)}
    write_algorithm_checkpoint(s3.url(), state, storage_options=options)
    assert not resolve_storage(s3.url(), storage_options=options).has_parent
    _cut_uploads_after(monkeypatch, 0)
    with pytest.raises(CheckpointStorageError, match="not committed.*previous checkpoint there was removed"):
        write_algorithm_checkpoint(s3.url(), state, storage_options=options)
    monkeypatch.undo()
    with pytest.raises(UncommittedCheckpointError):  # what the error says
        load_algorithm_state(s3.url(), storage_options=options)


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
