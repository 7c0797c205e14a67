"""Faults around the commit of a save to S3 say what the URL holds (issue 37, item 5).

Three faults misreported on main: (a) a failed DELETE of the old manifest (a save over a
checkpoint at a bucket's root uncommits it first) said the old checkpoint was removed, though
it was intact; (b) a manifest PUT that S3 executed but whose answer was lost said "not
committed", though it was; (c) a failure deleting stale objects after the commit raised, though
the save had committed. Each test injects the fault into one s3fs request against the moto
server (``tests/checkpoint/s3_faults.py``: before the request reaches the server, or after the
server executed it), then checks the error or warning and what the URL then loads.
"""

from __future__ import annotations

import re
import warnings

import pytest

import cairn
from cairn.checkpoint import load_algorithm_state, load_policy_state, write_algorithm_checkpoint
from cairn.checkpoint.format import MANIFEST_FILE
from cairn.errors import CheckpointStorageError, StorageCleanupWarning, UncommittedCheckpointError
from tests.checkpoint.s3_faults import TreeAlgo, fail_one, fail_request, loaded_value, stages, state_tree


def _save(url: str, value: float, options: dict, policies: tuple[str, ...] = ("p0",)) -> list[str]:
    """Save ``state_tree(value)`` to ``url`` (it must succeed); the StorageCleanupWarnings it gave."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert write_algorithm_checkpoint(url, state_tree(value, policies), storage_options=options) == url
    return [str(w.message) for w in caught if issubclass(w.category, StorageCleanupWarning)]


@pytest.mark.parametrize("executed", [False, True], ids=["refused", "answer-lost"])
def test_a_failed_delete_of_the_old_manifest_says_the_old_checkpoint_is_intact(s3, monkeypatch, executed):
    """(a) A bucket's root is rewritten in place: the old manifest is deleted first. When that
    DELETE fails, nothing was changed (main said "was removed before the failure"); when S3
    executed it and only its answer was lost, the save goes on and commits."""
    options, url = s3.storage_options, s3.url()
    _save(url, 1.0, options)
    failed = fail_one(monkeypatch, "_rm_file", re.escape(MANIFEST_FILE), executed=executed)
    if executed:
        _save(url, 2.0, options)
        monkeypatch.undo()
        assert failed and loaded_value(url, options) == 2.0
        return
    with pytest.raises(CheckpointStorageError) as info:
        write_algorithm_checkpoint(url, state_tree(2.0), storage_options=options)
    monkeypatch.undo()
    message = str(info.value)
    assert failed == [f"{s3.name}/{MANIFEST_FILE}"]
    assert f"the previous checkpoint at {url} is intact and loads" in message, message
    assert "removed" not in message and "Connection reset" in message
    assert loaded_value(url, options) == 1.0  # what the message says
    _save(url, 3.0, options)
    assert loaded_value(url, options) == 3.0


@pytest.mark.parametrize("where", ["bucket-root", "new-prefix", "replacement", "manager"])
def test_a_manifest_put_executed_but_unanswered_is_a_committed_save(s3, monkeypatch, where):
    """(b) The manifest's PUT reached S3 and was executed, but its answer was lost. The save
    committed, so it returns normally (main raised, at a bucket's root saying "the new one is not
    committed"), read back to be sure; a replacement's stage that got its manifest is rolled
    forward instead of deleted."""
    options = s3.storage_options
    if where == "manager":
        manager = cairn.CheckpointManager(s3.url("runs"), storage_options=options)
        failed = fail_one(monkeypatch, "_put_file", f"checkpoint_000001/{re.escape(MANIFEST_FILE)}",
                          executed=True)
        url = manager.save(TreeAlgo(2.0))
        monkeypatch.undo()
        assert failed and url == manager.latest() == s3.url("runs/checkpoint_000001")
        assert loaded_value(url, options) == 2.0
        return
    url = {"bucket-root": s3.url(), "new-prefix": s3.url("run/new"), "replacement": s3.url("run/ckpt")}[where]
    if where != "new-prefix":
        _save(url, 1.0, options)
    # the root manifest (a policy's manifest is uploaded with the other files); a replacement
    # uploads it to its stage first
    root = {"bucket-root": re.escape(s3.name), "new-prefix": "run/new",
            "replacement": r"\.ckpt\.cairn-tmp-[^/]+"}[where]
    failed = fail_one(monkeypatch, "_put_file", f"{root}/{re.escape(MANIFEST_FILE)}", executed=True)
    assert _save(url, 2.0, options) == []
    monkeypatch.undo()
    assert len(failed) == 1
    if where == "replacement":
        assert ".ckpt.cairn-tmp-" in failed[0]  # the stage's manifest: the stage was whole
    assert loaded_value(url, options) == 2.0 and stages(s3, "run/") == []


@pytest.mark.parametrize("where", ["bucket-root", "new-prefix"])
def test_a_manifest_put_that_failed_says_not_committed(s3, monkeypatch, where):
    """The manifest's PUT failed before S3 executed it: the save says it is not committed and
    that the URL refuses loads, which it does; the next save there commits."""
    options = s3.storage_options
    url = s3.url() if where == "bucket-root" else s3.url("run/new")
    if where == "bucket-root":
        _save(url, 1.0, options)
    root = re.escape(s3.name) if where == "bucket-root" else "run/new"
    fail_one(monkeypatch, "_put_file", f"{root}/{re.escape(MANIFEST_FILE)}")
    with pytest.raises(CheckpointStorageError) as info:
        write_algorithm_checkpoint(url, state_tree(2.0), storage_options=options)
    monkeypatch.undo()
    message = str(info.value)
    assert "It is not committed" in message and "UncommittedCheckpointError" in message, message
    assert ("previous checkpoint" in message) == (where == "bucket-root")
    with pytest.raises(UncommittedCheckpointError):
        load_algorithm_state(url, storage_options=options)
    _save(url, 3.0, options)
    assert loaded_value(url, options) == 3.0


@pytest.mark.parametrize("where", ["interrupted-save", "bucket-root", "stage-beside", "own-stage"])
def test_a_failed_cleanup_after_the_commit_is_a_warning_naming_what_is_left(s3, monkeypatch, where):
    """(c) After the manifest is committed, the save deletes what the new checkpoint does not
    use: an interrupted save's objects in the prefix, the old checkpoint's at a bucket's root,
    the upload of a killed replacement beside the prefix, or its own stage once rolled forward.
    When that fails, the save committed and returns (main raised for the first three, and said
    nothing of the fourth): a StorageCleanupWarning names what is left and that it is harmless,
    the URL loads the new checkpoint, and the next save deletes what was left."""
    options = s3.storage_options
    url = s3.url() if where == "bucket-root" else s3.url("run/ckpt")
    if where == "interrupted-save":
        stale = "run/ckpt/policies/gone/policy_state.json"
        s3.put(stale, b"{}")
    elif where == "bucket-root":
        stale = "policies/gone/policy_state.json"
        _save(url, 1.0, options, policies=("p0", "gone"))
    elif where == "stage-beside":
        stale = "run/.ckpt.cairn-tmp-4242-0badf00d/algorithm_state.json"
        _save(url, 1.0, options)
        s3.put(stale, b"{}")
    else:
        stale = ".ckpt.cairn-tmp-"  # the replacement's own stage, its manifest deleted first
        _save(url, 1.0, options)
    failed = fail_one(monkeypatch, "_rm", re.escape("algorithm_state.json") if where == "own-stage"
                      else re.escape(stale))
    left = _save(url, 2.0, options)
    monkeypatch.undo()
    assert len(failed) >= 1 and len(left) == 1, left
    message = left[0]
    assert f"The checkpoint at {url} is saved and loads" in message, message
    if where == "own-stage":
        stale = next(key for key in s3.keys("run/") if ".ckpt.cairn-tmp-" in key)
        assert stale.split("/")[1] in message  # the stage's URL
    elif where == "stage-beside":
        assert s3.url("run/.ckpt.cairn-tmp-4242-0badf00d") in message
    else:
        assert repr(stale.removeprefix("run/ckpt/")) in message
    assert "harmless" in message and f"the next save to {url}" in message.lower(), message
    assert stale in s3.keys() and loaded_value(url, options) == 2.0  # what the warning says
    if where == "bucket-root":  # the old checkpoint's policy, its manifest left: it loads alone
        assert "'policies/gone' under" in message and "still load on their own" in message
        assert load_policy_state(f"{url}/policies/gone", storage_options=options)["counters"] == {
            "global_timestep": 1}
    assert _save(url, 3.0, options) == []
    assert stale not in s3.keys() and stages(s3, "run/") == [] and loaded_value(url, options) == 3.0


def test_a_save_that_cannot_complete_an_earlier_replacement_says_where_the_checkpoint_is(s3, monkeypatch):
    """A save first completes an earlier save's committed stage; when that fails, the error
    says that this save changed nothing and that loads read the stage, which they do."""
    options = s3.storage_options
    url = write_algorithm_checkpoint(s3.url("run/same"), state_tree(1.0), storage_options=options)
    fail_request(monkeypatch, 7)  # the first copy over the prefix: the stage of 2.0 stays committed
    with pytest.raises(CheckpointStorageError, match="Nothing is lost"):
        write_algorithm_checkpoint(url, state_tree(2.0), storage_options=options)
    monkeypatch.undo()
    (stage,) = {key.split("/")[1] for key in stages(s3, "run/")}
    fail_request(monkeypatch, 1)  # the next save's first request: a copy of that roll forward
    with pytest.raises(CheckpointStorageError) as info:
        write_algorithm_checkpoint(url, state_tree(3.0), storage_options=options)
    monkeypatch.undo()
    message = str(info.value)
    assert "This save changed nothing" in message and s3.url(f"run/{stage}") in message, message
    assert loaded_value(url, options) == 2.0  # read from the stage, as the error says


@pytest.mark.parametrize("request_name, key_end, left", [
    ("_rm_file", f"checkpoint_000001/{re.escape(MANIFEST_FILE)}", "whole"),  # the manifest stays
    ("_rm", r"checkpoint_000001/algorithm_state\.json", "uncommitted"),  # the manifest went, not the files
])
def test_a_retention_that_cannot_delete_an_old_checkpoint_never_fails_the_committed_save(
        s3, monkeypatch, request_name, key_end, left):
    """A manager's retention runs after the save committed: a failure deleting the checkpoint it
    no longer keeps is a StorageCleanupWarning saying what that checkpoint is now (main raised
    from ``save()``, or from its Future, although the new checkpoint was committed)."""
    options = s3.storage_options
    first = cairn.CheckpointManager(s3.url("runs"), storage_options=options).save(TreeAlgo(1.0))
    second = TreeAlgo(2.0)
    second.iteration = 2
    failed = fail_one(monkeypatch, request_name, key_end)
    # Made after fail_one: s3fs binds its requests when a file system instance is made.
    manager = cairn.CheckpointManager(s3.url("runs"), keep_last=1, storage_options=options)
    with pytest.warns(StorageCleanupWarning) as caught:
        url = manager.save(second)
    monkeypatch.undo()
    message = str(caught[0].message)
    assert failed and url == manager.latest() == s3.url("runs/checkpoint_000002")
    assert loaded_value(url, options) == 2.0
    assert f"The save to {url} committed and loads, but retention could not delete {first}" in message
    if left == "whole":
        assert "is still whole and loads" in message and loaded_value(first, options) == 1.0
    else:
        assert "is no longer committed" in message
        with pytest.raises(UncommittedCheckpointError):
            load_algorithm_state(first, storage_options=options)
    third = TreeAlgo(3.0)
    third.iteration = 3
    manager.save(third)  # the next retention (or a manager's start) finishes the job
    assert [c.iteration for c in manager.checkpoints()] == [3]
