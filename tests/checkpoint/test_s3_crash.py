"""A process killed (SIGKILL) in the middle of uploading a checkpoint to S3 (issues 12, 25): no
partially written checkpoint is ever visible, and the previous checkpoint is intact, at another
prefix and at the same one until the replacement's stage is whole, the new one from then on.

The child process writes a checkpoint to the test's moto server through s3fs and kills itself
as soon as its N-th object upload (or server-side copy) has completed, while others are in
flight in the thread pool: for several N up to the last object before the manifest, which is
uploaded last; and, for a manager saving an iteration again (a replacement), after every
request that changes the bucket (``tests/checkpoint/s3_faults.py``).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import cairn
from cairn.checkpoint import load_algorithm_state, write_algorithm_checkpoint
from cairn.errors import UncommittedCheckpointError
from tests.checkpoint.s3_faults import TreeAlgo, killed_in_fork, loaded_value, stages
from tests.conftest import ROOT

_CHILD = """
import os, signal, sys
sys.path.insert(0, {root!r})
import s3fs
from tests.checkpoint.test_s3_crash import state_tree
from cairn.checkpoint import write_algorithm_checkpoint

calls = []
original = getattr(s3fs.S3FileSystem, {method!r})

async def transfer(self, *args, **kwargs):
    result = await original(self, *args, **kwargs)
    calls.append(args[1])
    if len(calls) == {kill_at}:
        os.kill(os.getpid(), signal.SIGKILL)
    return result

setattr(s3fs.S3FileSystem, {method!r}, transfer)
write_algorithm_checkpoint({url!r}, state_tree(2.0), storage_options={options!r})
print("not killed", calls)
"""

#: 3 policies x 3 files + the 2 algorithm state files + the root manifest
FILES = 12


def state_tree(value: float) -> dict:
    """A small algorithm state tree whose every array holds ``value``."""
    policy = {"spec": {"policy_class": "Policy"}, "weights": {"w": np.full((64, 64), value, np.float32)},
              "counters": {"global_timestep": int(value)}}
    return {"algorithm_class": "PPO", "iteration": int(value), "policy_ids": ["p0", "p1", "p2"],
            "rng": {"x": np.full(8, value)}, "policies": {pid: policy for pid in ("p0", "p1", "p2")}}


def _values(state: dict) -> set[float]:
    arrays = [state["rng"]["x"], *(p["weights"]["w"] for p in state["policies"].values())]
    return {float(v) for array in arrays for v in np.unique(array)}


def _killed_save(url: str, options: dict, kill_at: int, temp: Path, method: str = "_put_file") -> None:
    """Save ``state_tree(2.0)`` to ``url`` in a child process killed by SIGKILL as soon as its
    ``kill_at``-th ``method`` (s3fs's upload coroutine, or ``_cp_file``, its server-side copy)
    has completed. The child's temporary files go under ``temp`` (``TMPDIR``), a folder the
    test owns: the killed save's local staging folder (``cairn-upload-*``), which it cannot
    remove, was left in the system's temporary folder by every run."""
    script = _CHILD.format(root=str(ROOT), url=url, options=options, kill_at=kill_at, method=method)
    done = subprocess.run([sys.executable, "-c", script], env={**os.environ, "TMPDIR": str(temp)},
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == -9, done.stdout + done.stderr  # SIGKILL, at the chosen upload
    assert [p.name[:len("cairn-upload-")] for p in temp.iterdir()] == ["cairn-upload-"]


@pytest.mark.parametrize("kill_at", [2, FILES - 1])
def test_a_save_killed_mid_upload_is_never_visible_and_the_previous_is_intact(s3, kill_at, tmp_path):
    options = s3.storage_options
    previous = write_algorithm_checkpoint(s3.url("run/c1"), state_tree(1.0), storage_options=options)
    _killed_save(s3.url("run/c2"), options, kill_at, tmp_path)
    assert s3.keys("run/c2/") and "run/c2/cairn_checkpoint.json" not in s3.keys("run/c2/")
    with pytest.raises(UncommittedCheckpointError):
        load_algorithm_state(s3.url("run/c2"), storage_options=options)
    assert _values(load_algorithm_state(previous, storage_options=options)) == {1.0}
    # the next save there replaces the leftovers
    write_algorithm_checkpoint(s3.url("run/c2"), state_tree(3.0), storage_options=options)
    assert _values(load_algorithm_state(s3.url("run/c2"), storage_options=options)) == {3.0}


def _beside(s3, key: str) -> list[str]:
    parent = key.rsplit("/", 1)[0] + "/"
    return [k for k in s3.keys(parent) if not k.startswith(key + "/")]


def test_a_replacement_killed_mid_upload_leaves_the_previous_checkpoint_whole(s3, tmp_path):
    """The new files go to a temporary prefix beside the checkpoint until all are uploaded
    (issue 25): a save killed meanwhile changed nothing of the old checkpoint, and the next
    save there removes what it left."""
    options = s3.storage_options
    url = write_algorithm_checkpoint(s3.url("run/same"), state_tree(1.0), storage_options=options)
    _killed_save(url, options, 5, tmp_path)
    assert _values(load_algorithm_state(url, storage_options=options)) == {1.0}
    assert _beside(s3, "run/same") and all(".same.cairn-tmp-" in k for k in _beside(s3, "run/same"))
    write_algorithm_checkpoint(url, state_tree(3.0), storage_options=options)
    assert _values(load_algorithm_state(url, storage_options=options)) == {3.0}
    assert _beside(s3, "run/same") == []


def test_a_replacement_killed_in_its_commit_step_loads_the_new_checkpoint(s3, tmp_path):
    """Killed while the staged files are copied over the old ones: the stage holds the new
    checkpoint whole (its manifest was uploaded before the first copy), loads read it, and the
    next save there completes it before it replaces it."""
    options = s3.storage_options
    url = write_algorithm_checkpoint(s3.url("run/same"), state_tree(1.0), storage_options=options)
    _killed_save(url, options, 3, tmp_path, method="_cp_file")
    assert _values(load_algorithm_state(url, storage_options=options)) == {2.0}
    write_algorithm_checkpoint(url, state_tree(3.0), storage_options=options)
    assert _values(load_algorithm_state(url, storage_options=options)) == {3.0}
    assert _beside(s3, "run/same") == []


@pytest.mark.parametrize("kill_at", range(1, 16))
def test_a_manager_killed_anywhere_in_saving_an_iteration_again_keeps_it_loadable(s3, kill_at, tmp_path):
    """Issue 36 item 4 and issue 37 item 3: a process killed after any of the 15 requests that
    change the bucket in ``manager.save(force=True)`` of an iteration already saved (its
    record, 5 uploads to the stage and its manifest, 5 copies over the old files and the new
    manifest, the stage's deletion) left nothing loadable at 23 of 53 kill points. Now the
    checkpoint loads whole and verified: the old one until the stage is whole, the new one
    from then on; a manager started on the root completes a committed stage (never deleting
    it) without going back, and the next save replaces the checkpoint."""
    options = s3.storage_options
    root = s3.url("runs/tree")
    cairn.CheckpointManager(root, keep_last=1, storage_options=options).save(TreeAlgo(1.0))
    url = f"{root}/checkpoint_000001"

    def save_again() -> None:
        manager = cairn.CheckpointManager(root, keep_last=1, storage_options=options)
        manager.save(TreeAlgo(2.0), force=True)

    status = killed_in_fork(save_again, kill_at, tmp_path)
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL, status
    # the killed save's local staging folder, if it had made one, is in the test's own folder
    assert len([p for p in tmp_path.iterdir() if p.name.startswith("cairn-upload-")]) <= 1
    expected = 1.0 if kill_at <= 6 else 2.0  # the stage's manifest is the 7th request
    assert loaded_value(url, options) == expected
    manager = cairn.CheckpointManager(root, keep_last=1, storage_options=options)
    assert stages(s3, "runs/") == [] and manager.latest() == url
    assert loaded_value(url, options) == expected
    manager.save(TreeAlgo(3.0), force=True)
    assert loaded_value(url, options) == 3.0 and stages(s3, "runs/") == []
