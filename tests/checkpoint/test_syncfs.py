"""An Algorithm checkpoint with many directories is made durable by one syncfs(2) instead of an
fsync per file and directory (cairn.checkpoint.atomic); when syncfs fails, every file and
directory is fsynced before the rename instead."""

from __future__ import annotations

from pathlib import Path

import pytest

import cairn.checkpoint.atomic as atomic
from cairn.algorithms.save_restore import save_algorithm
from tests.helpers import small_ma_ppo

pytestmark = pytest.mark.skipif(not atomic.syncs_whole_file_system(10**6), reason="no syncfs(2) here")


@pytest.fixture(scope="module")
def six_policies():
    algo = small_ma_ppo(6, model={"hidden": [4]}, train_batch_size=64, minibatch_size=32,
                        num_epochs=1).build()
    yield algo
    algo.stop()


def _files(path: str) -> set[str]:
    return {str(p.relative_to(path)) for p in Path(path).rglob("*") if p.is_file()}


def test_one_syncfs_replaces_the_fsyncs(six_policies, tmp_path, monkeypatch):
    calls: list[str] = []
    real = atomic._syncfs
    monkeypatch.setattr(atomic, "_syncfs", lambda root: calls.append("syncfs") or real(root))
    monkeypatch.setattr(atomic.os, "fsync", lambda fd: calls.append("fsync"))
    save_algorithm(six_policies, tmp_path / "c")
    assert calls.count("syncfs") == 1
    assert calls.count("fsync") <= 1  # the parent directory, after the rename


def test_when_syncfs_fails_every_file_and_directory_is_fsynced(six_policies, tmp_path, monkeypatch):
    files: list[Path] = []
    monkeypatch.setattr(atomic, "_syncfs", lambda root: False)
    monkeypatch.setattr(atomic, "_fsync_file", files.append)
    path = save_algorithm(six_policies, tmp_path / "c")
    # each fsynced inside the temporary directory, i.e. before the rename
    written = {str(f.relative_to(next(p for p in f.parents if ".cairn-tmp-" in p.name))) for f in files}
    assert written == _files(path)
