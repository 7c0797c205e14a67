"""Managers that share a root (issue 37 item 2): a second process opening a CheckpointManager
on a root that a writer is saving to takes nothing from under it, and a save whose files are
gone fails and says so, keeping the checkpoint before it.

The two-process tests run a writer process that pauses in the middle of a save (between its
uploads on S3; with the checkpoint written but not yet renamed into place on local disk) and,
while it waits, a second process that opens a manager on the same root. The writer then goes
on; the root must hold checkpoints that load, with their metrics.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

import cairn
from cairn.checkpoint.manager import checkpoint_name
from cairn.checkpoint.reader import load_algorithm_state
from cairn.errors import CheckpointError
from tests.conftest import ROOT
from tests.helpers import small_ppo

_WRITER = """
import contextlib, json, os, sys, time
sys.path.insert(0, {root!r})
import s3fs
import cairn
from cairn.checkpoint.storage.local import LocalStorage
from tests.helpers import small_ppo

signals = {signals!r}
armed = [False]

def pause():
    if not armed[0]:
        return
    armed[0] = False
    open(os.path.join(signals, "paused"), "w").close()
    while not os.path.exists(os.path.join(signals, "go")):
        time.sleep(0.02)

original_put = s3fs.S3FileSystem._put_file
uploads = [0]

async def put_file(self, *args, **kwargs):  # S3: pause after the first upload of the save
    result = await original_put(self, *args, **kwargs)
    uploads[0] += 1
    pause()
    return result

s3fs.S3FileSystem._put_file = put_file
original_writing = LocalStorage.writing

@contextlib.contextmanager
def writing(self):  # local disk: pause once the files are written, before the rename
    with original_writing(self) as target:
        yield target
        pause()

LocalStorage.writing = writing
algo = small_ppo().build()
manager = cairn.CheckpointManager({url!r}, keep_last=1, keep_best=("score", "max"),
                                  storage_options={options!r})
for iteration, score in {scores!r}:
    algo.iteration = iteration
    armed[0] = iteration == {pause_at!r}
    try:
        saved = manager.save(algo, {{"score": score}})
    except cairn.errors.CairnError as exc:
        print("FAILED", iteration, type(exc).__name__, exc, flush=True)
    else:
        print("SAVED", iteration, saved, flush=True)
algo.stop()
"""

_OBSERVER = """
import sys
sys.path.insert(0, {root!r})
import cairn
manager = cairn.CheckpointManager({url!r}, keep_last=1, keep_best=("score", "max"),
                                  storage_options={options!r})
print("OBSERVED", manager.latest(), flush=True)
"""


def _run_with_observer(url: str, options: dict | None, scores: list[tuple[int, float]], pause_at: int,
                       signals: Path) -> str:
    """Run the writer, which saves ``scores`` and pauses in the save of ``pause_at``; while it
    waits, open a manager on ``url`` in a second process; return the writer's output."""
    signals.mkdir()
    script = _WRITER.format(root=str(ROOT), signals=str(signals), url=url, options=options,
                            scores=scores, pause_at=pause_at)
    writer = subprocess.Popen([sys.executable, "-c", script], cwd=ROOT, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while not (signals / "paused").exists():
            assert writer.poll() is None, writer.communicate()
            assert time.monotonic() < deadline, "the writer never paused"
            time.sleep(0.05)
        observer = subprocess.run(
            [sys.executable, "-c", _OBSERVER.format(root=str(ROOT), url=url, options=options)],
            cwd=ROOT, capture_output=True, text=True, timeout=120)
        assert observer.returncode == 0, observer.stderr
        (signals / "go").touch()
        out, err = writer.communicate(timeout=120)
    finally:
        if writer.poll() is None:
            writer.kill()
            writer.wait()
    assert writer.returncode == 0, err
    return out


@pytest.mark.slow
def test_a_second_manager_on_an_s3_root_leaves_an_upload_in_progress_alone(s3, tmp_path):
    options = s3.storage_options
    root = s3.url("shared")
    out = _run_with_observer(root, options, [(1, 1.0), (2, 2.0)], pause_at=2, signals=tmp_path / "s")
    assert "SAVED 2" in out, out
    manager = cairn.CheckpointManager(root, keep_last=1, keep_best=("score", "max"), storage_options=options)
    assert [(c.iteration, c.metric) for c in manager.checkpoints()] == [(2, 2.0)]
    # the latest checkpoint loads: on main the observer deleted its objects mid-upload, the
    # writer committed a manifest without them, and retention then deleted checkpoint 1
    assert load_algorithm_state(manager.latest(), storage_options=options)["iteration"] == 2


@pytest.mark.slow
def test_a_second_manager_on_a_local_root_keeps_the_record_of_a_save_in_progress(tmp_path):
    root = tmp_path / "shared"
    out = _run_with_observer(str(root), None, [(1, 1.0), (2, 5.0), (3, 0.0)], pause_at=2,
                             signals=tmp_path / "s")
    assert "SAVED 3" in out, out
    manager = cairn.CheckpointManager(root, keep_last=1, keep_best=("score", "max"))
    # checkpoint 2 (the best) kept its metric and so survived retention; on main the observer
    # deleted its record while it was written, and keep_best then deleted it
    assert [(c.iteration, c.metric) for c in manager.checkpoints()] == [(2, 5.0), (3, 0.0)]
    assert manager.best() == str(root / checkpoint_name(2))
    assert load_algorithm_state(manager.best())["iteration"] == 2


# ------------------------------------------------------------ a save that finds its files gone
@pytest.fixture
def algo():
    algo = small_ppo().build()
    yield algo
    algo.stop()


def _save_at(manager: cairn.CheckpointManager, algo: cairn.Algorithm, iteration: int, **kwargs):
    algo.iteration = iteration  # a public counter; saving needs no training
    return manager.save(algo, {"score": float(iteration)}, **kwargs)


@pytest.mark.parametrize("blocking", [True, False])
def test_a_local_save_whose_files_vanish_fails_and_keeps_the_previous(algo, tmp_path, monkeypatch, blocking):
    from cairn.checkpoint.storage.local import LocalStorage

    manager = cairn.CheckpointManager(tmp_path, keep_last=1)
    first = _save_at(manager, algo, 1)
    original = LocalStorage.writing

    def writing(self):  # another process deletes a file of the checkpoint before its commit
        import contextlib

        @contextlib.contextmanager
        def wrapped():
            with original(self) as target:
                yield target
                os.unlink(target.directory / "algorithm_state.safetensors")
        return wrapped()

    monkeypatch.setattr(LocalStorage, "writing", writing)
    with pytest.raises(CheckpointError, match=r"algorithm_state.safetensors is missing.*latest\(\) is"):
        saved = _save_at(manager, algo, 2, blocking=blocking)
        if not blocking:
            saved.result()
    monkeypatch.undo()
    assert manager.latest() == first  # the broken checkpoint was removed, the previous kept
    assert sorted(os.listdir(tmp_path)) == [checkpoint_name(1), checkpoint_name(1) + ".record.json"]
    assert load_algorithm_state(first)["iteration"] == 1
    assert _save_at(manager, algo, 3) == str(tmp_path / checkpoint_name(3))  # and saving goes on


def test_an_s3_save_whose_files_vanish_fails_and_keeps_the_previous(algo, s3, monkeypatch):
    import s3fs

    options, client = s3.storage_options, s3.server.client()
    original = s3fs.S3FileSystem._put_file

    async def put_file(self, lpath, rpath, *args, **kwargs):
        if rpath.endswith(f"{checkpoint_name(2)}/cairn_checkpoint.json"):  # deleted before the commit
            client.delete_object(Bucket=s3.name, Key=f"run/{checkpoint_name(2)}/algorithm_state.json")
        return await original(self, lpath, rpath, *args, **kwargs)

    # before the manager: s3fs binds the sync methods of an instance when it is made
    monkeypatch.setattr(s3fs.S3FileSystem, "_put_file", put_file)
    manager = cairn.CheckpointManager(s3.url("run"), keep_last=1, storage_options=options)
    first = _save_at(manager, algo, 1)
    with pytest.raises(CheckpointError, match="algorithm_state.json is missing"):
        _save_at(manager, algo, 2)
    monkeypatch.undo()
    assert manager.latest() == first
    assert not s3.keys(f"run/{checkpoint_name(2)}")
    assert load_algorithm_state(first, storage_options=options)["iteration"] == 1


def test_records_name_their_writer_and_end_committed(algo, tmp_path):
    manager = cairn.CheckpointManager(tmp_path, keep_last=None)
    _save_at(manager, algo, 1)
    record = json.loads((tmp_path / (checkpoint_name(1) + ".record.json")).read_text())
    assert record["pid"] == os.getpid() and record["committed"] is True and record["metric"] is None
    # a deletion cut short leaves the record of a committed checkpoint: abandoned at once
    (tmp_path / checkpoint_name(1) / "cairn_checkpoint.json").unlink()
    cairn.CheckpointManager(tmp_path)
    assert not (tmp_path / (checkpoint_name(1) + ".record.json")).exists()


def test_a_second_manager_leaves_a_replacement_in_progress_alone(s3, monkeypatch):
    """``save(force=True)`` of an iteration already saved replaces that checkpoint through a
    stage beside it (docs/storage.md); a manager opened on the root while the stage is being
    uploaded (no manifest yet) deleted it on main, as a killed save's leftover, and the writer
    then copied what was left of it over the old checkpoint: a mix that does not load. The
    stage is covered by the checkpoint's record, which its writer renews: it is left alone, the
    replacement commits, and a stage whose writer is gone is still removed."""
    import asyncio

    import s3fs

    from tests.checkpoint.s3_faults import TreeAlgo, loaded_value, stages

    options, root = s3.storage_options, s3.url("runs/tree")
    manager = cairn.CheckpointManager(root, keep_last=1, storage_options=options)
    first = manager.save(TreeAlgo(1.0))
    original, opened = s3fs.S3FileSystem._put_file, []

    async def put_file(self, lpath, rpath, *args, **kwargs):
        result = await original(self, lpath, rpath, *args, **kwargs)
        if ".cairn-tmp-" in rpath and not opened:  # the stage's first upload is done
            opened.append(await asyncio.get_running_loop().run_in_executor(
                None, lambda: cairn.CheckpointManager(root, keep_last=1, storage_options=options)))
        return result

    monkeypatch.setattr(s3fs.S3FileSystem, "_put_file", put_file)
    monkeypatch.setattr(s3fs.S3FileSystem, "_cache", {})  # instances bind methods when made
    assert manager.save(TreeAlgo(2.0), force=True) == first
    monkeypatch.undo()
    assert opened and opened[0].latest() == first
    assert loaded_value(first, options) == 2.0 and stages(s3, "runs/") == []
    # a stage whose writer is gone (its record says committed: no save of it runs) still goes
    s3.put(f"runs/tree/.{checkpoint_name(1)}.cairn-tmp-4242-0badf00d/algorithm_state.json", b"{}")
    cairn.CheckpointManager(root, keep_last=1, storage_options=options)
    assert stages(s3, "runs/") == [] and loaded_value(first, options) == 2.0


def test_a_replacement_rolled_forward_meanwhile_by_another_manager_still_commits(s3, monkeypatch):
    """Two roll forwards of one committed stage at once: the writer's, and that of a manager
    opened on the root just then (which completes a committed stage it finds, deleting it).
    The writer's copies then find the stage's files gone; the prefix holds the new checkpoint,
    so the save succeeded and says so (it raised CheckpointNotFoundError before)."""
    from cairn.checkpoint.storage.objects import ObjectStorage
    from tests.checkpoint.s3_faults import TreeAlgo, loaded_value, stages

    options, root = s3.storage_options, s3.url("runs/tree")
    manager = cairn.CheckpointManager(root, keep_last=1, storage_options=options)
    first = manager.save(TreeAlgo(1.0))
    original, opened = ObjectStorage.copy_files, []

    def copy_files(self, pairs):
        rolling = any(".cairn-tmp-" in source.url for source, _, _ in pairs)  # from a stage
        if rolling and not opened:  # the writer's roll forward is about to copy: a manager starts
            opened.append(None)
            opened.append(cairn.CheckpointManager(root, keep_last=1, storage_options=options))
        return original(self, pairs)

    monkeypatch.setattr(ObjectStorage, "copy_files", copy_files)
    assert manager.save(TreeAlgo(2.0), force=True) == first
    monkeypatch.undo()
    assert len(opened) == 2 and opened[1].latest() == first
    assert loaded_value(first, options) == 2.0 and stages(s3, "runs/") == []
