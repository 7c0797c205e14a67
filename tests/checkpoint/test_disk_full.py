"""A save that runs out of disk space (ENOSPC, simulated) fails with an OSError naming the path
and the cause; the previous checkpoint survives and no temporary directory is left behind."""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Any

import pytest

from cairn.checkpoint import atomic as atomic_module
from cairn.checkpoint import writer_files as writer_module
from cairn.checkpoint.reader import load_algorithm_state, load_policy_state
from cairn.policy.policy import Policy
from tests.checkpoint.attacks import base_checkpoints, copy_base
from tests.checkpoint.test_crash_safety import _fingerprint


@pytest.fixture(scope="module")
def policy() -> Any:
    return Policy.from_checkpoint(base_checkpoints() / "algo2")["default_policy"]


def _fail_after(monkeypatch: pytest.MonkeyPatch, obj: Any, name: str, calls: int) -> None:
    original = getattr(obj, name)
    count = [0]

    def failing(*args: Any, **kwargs: Any) -> Any:
        count[0] += 1
        if count[0] > calls:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return original(*args, **kwargs)

    monkeypatch.setattr(obj, name, failing)


class _FullDisk:
    """Files the writer opens hold ``free`` bytes in all, then writes fail with ENOSPC."""

    def __init__(self, free: int) -> None:
        self.free = free

    def open(self, path: Any, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
        f = open(path, mode, *args, **kwargs)
        disk = self
        real_write = f.write

        class Proxy:
            def __getattr__(self, name: str) -> Any:
                return getattr(f, name)

            def write(self, data: Any) -> int:
                size = memoryview(data).nbytes
                if size > disk.free:
                    real_write(bytes(memoryview(data).cast("B")[: disk.free]))
                    disk.free = 0
                    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
                disk.free -= size
                return int(real_write(data))

        return Proxy()


def _disk_full_after(monkeypatch: pytest.MonkeyPatch, free: int) -> None:
    monkeypatch.setattr(writer_module, "open", _FullDisk(free).open, raising=False)


def _failed_export_message(policy: Any, target: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """Export over ``target`` with the failure already patched in; check the error names the
    disk-full cause and the path, and return its message."""
    with pytest.raises(OSError) as info:
        policy.export_checkpoint(target)
    monkeypatch.undo()
    assert info.value.errno == errno.ENOSPC
    message = str(info.value)
    assert str(target) in message and "No space left on device" in message, message
    return message


@pytest.mark.parametrize("free", [0, 100, 3000, 20000])
def test_disk_full_while_writing(free: int, policy: Any, tmp_path: Path,
                                 monkeypatch: pytest.MonkeyPatch) -> None:
    target = copy_base("policy", tmp_path / "checkpoint")
    before = _fingerprint(load_policy_state(target))
    _disk_full_after(monkeypatch, free)
    _failed_export_message(policy, target, monkeypatch)
    assert _fingerprint(load_policy_state(target)) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint"], "a temporary directory was left"


@pytest.mark.parametrize("where", ["fsync", "mkdir", "rename"])
@pytest.mark.parametrize("after", [0, 2])
def test_disk_full_keeps_previous_checkpoint(where: str, after: int, policy: Any, tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    target = copy_base("policy", tmp_path / "checkpoint")
    before = _fingerprint(load_policy_state(target))
    target_obj, name = {"fsync": (os, "fsync"),
                        "mkdir": (Path, "mkdir"), "rename": (atomic_module, "_exchange")}[where]
    _fail_after(monkeypatch, target_obj, name, after if where != "rename" else 0)
    message = _failed_export_message(policy, target, monkeypatch)
    assert "unchanged" in message
    assert _fingerprint(load_policy_state(target)) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint"], "a temporary directory was left"


def test_disk_full_on_first_save_leaves_nothing(policy: Any, tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    _disk_full_after(monkeypatch, 1000)
    with pytest.raises(OSError, match="No space left"):
        policy.export_checkpoint(tmp_path / "checkpoint")
    assert list(tmp_path.iterdir()) == []


def test_algorithm_save_disk_full(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from cairn.algorithms.algorithm import Algorithm

    algo = Algorithm.from_checkpoint(base_checkpoints() / "algo2")
    try:
        target = copy_base("algo", tmp_path / "checkpoint")
        before = _fingerprint(load_algorithm_state(target))
        _disk_full_after(monkeypatch, 30000)
        with pytest.raises(OSError, match="No space left") as info:
            algo.save(target)
        assert info.value.errno == errno.ENOSPC
        monkeypatch.undo()
        assert _fingerprint(load_algorithm_state(target)) == before
        assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint"]
        algo.save(target)  # with space again, the save goes through
        assert _fingerprint(load_algorithm_state(target)) != before
    finally:
        algo.stop()
