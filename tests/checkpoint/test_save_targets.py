"""Where a save may write (issue 17): what a save target means and which directories it may replace.

* An existing directory that is not a cairn checkpoint and not empty is refused before anything
  is written; an empty one is written into; an existing checkpoint is replaced atomically.
* Local paths and ``file://`` URLs are local save targets; other URL schemes go through fsspec
  (tests/checkpoint/test_storage.py, test_s3.py) or are refused when fsspec knows none, and no
  directory named after a scheme (``memory:``, ``s3:``, ``file:``) ever appears.
* ``~`` is expanded, for writing and for reading.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

import cairn
from cairn.checkpoint.atomic import atomic_directory, cleanup
from cairn.checkpoint.format import MANIFEST_FILE
from cairn.checkpoint.paths import UnsupportedCheckpointLocationError, save_target
from cairn.errors import CheckpointError, CheckpointFormatError
from cairn.policy.policy import Policy
from tests.helpers import small_ppo


@pytest.fixture(scope="module")
def algo() -> Any:
    algo = small_ppo().build()
    yield algo
    algo.stop()


def _save_algorithm(algo: Any, target: Any) -> str:
    return str(algo.save(target))


def _save_policy(algo: Any, target: Any) -> str:
    algo.get_policy().export_checkpoint(target)
    return str(target)


SAVERS = pytest.mark.parametrize("save", [_save_algorithm, _save_policy], ids=["algorithm", "policy"])


def _tree(root: Path) -> dict[str, bytes | None]:
    """Every entry under ``root`` (hidden ones included), with file contents."""
    return {p.relative_to(root).as_posix(): (p.read_bytes() if p.is_file() else None)
            for p in sorted(root.rglob("*"))}


# ------------------------------------------------------------------ replacing a directory
@SAVERS
def test_save_refuses_a_directory_that_is_not_a_checkpoint(algo, tmp_path, save):
    target = tmp_path / "results"
    target.mkdir()
    (target / "x.txt").write_text("keep me")
    before = _tree(tmp_path)
    with pytest.raises(CheckpointFormatError) as info:
        save(algo, target)
    message = str(info.value)
    assert str(target) in message and "x.txt" in message
    assert MANIFEST_FILE in message and "empty" in message and "remove" in message
    assert (target / "x.txt").read_text() == "keep me"
    assert _tree(tmp_path) == before  # nothing written, no temporary sibling left behind


def test_the_refusal_comes_before_the_temporary_directory(tmp_path):
    target = tmp_path / "results"
    (target / "sub").mkdir(parents=True)
    with pytest.raises(CheckpointFormatError), atomic_directory(target):
        pytest.fail("atomic_directory yielded for a directory it must not replace")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results"]


@SAVERS
def test_the_refusal_comes_before_any_state_is_gathered(algo, tmp_path, monkeypatch, save):
    target = tmp_path / "results"
    target.mkdir()
    (target / "x.txt").write_text("keep me")

    def no_state(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("state gathered for a save that must be refused")

    monkeypatch.setattr(type(algo), "get_state", no_state)
    monkeypatch.setattr(type(algo.get_policy()), "get_state", no_state)
    with pytest.raises(CheckpointFormatError, match="not a cairn checkpoint"):
        save(algo, target)


@SAVERS
def test_save_writes_into_an_empty_existing_directory(algo, tmp_path, save):
    target = tmp_path / "empty"
    target.mkdir()
    save(algo, target)
    assert (target / MANIFEST_FILE).is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty"]


@SAVERS
def test_save_replaces_an_existing_checkpoint(algo, tmp_path, save):
    target = tmp_path / "ckpt"
    algo.save(target)
    (target / "stale.txt").write_text("from the old checkpoint")  # only a checkpoint's own files
    save(algo, target)
    assert (target / MANIFEST_FILE).is_file() and not (target / "stale.txt").exists()
    assert cairn.get_checkpoint_info(target)["checkpoint_dir"] == str(target)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt"]


def test_a_directory_filled_during_the_save_is_not_replaced(algo, tmp_path, monkeypatch):
    from cairn.checkpoint import writer

    target = tmp_path / "racy"
    target.mkdir()
    real_write = writer.write_json_file

    def fill_target_then_write(root: Path, name: str, data: Any, files: Any) -> None:
        if name == MANIFEST_FILE and root.parent == tmp_path:  # the last file of the save
            (target / "x.txt").write_text("arrived meanwhile")
        real_write(root, name, data, files)

    monkeypatch.setattr(writer, "write_json_file", fill_target_then_write)
    with pytest.raises(CheckpointFormatError, match="x.txt"):
        algo.save(target)
    assert _tree(tmp_path) == {"racy": None, "racy/x.txt": b"arrived meanwhile"}


# ------------------------------------------------------------------------------ URLs
@SAVERS
@pytest.mark.parametrize("url", ["nosuchscheme://bucket/x", "NoSuchScheme://bucket/dir/x"])
def test_save_refuses_url_schemes_fsspec_does_not_know(algo, tmp_path, monkeypatch, save, url):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UnsupportedCheckpointLocationError) as info:
        save(algo, url)
    message = str(info.value)
    assert url in message and "nosuchscheme://" in message.lower() and "local path" in message
    assert isinstance(info.value, CheckpointError)
    assert list(tmp_path.iterdir()) == []  # no "nosuchscheme:" directory


@SAVERS
@pytest.mark.parametrize("url", ["memory://save-targets/x", "MEMORY://save-targets/y"])
def test_save_to_another_url_scheme_goes_through_fsspec_not_to_a_local_directory(
        algo, tmp_path, monkeypatch, save, url):
    monkeypatch.chdir(tmp_path)
    save(algo, url)
    assert list(tmp_path.iterdir()) == []  # no "memory:" directory
    assert cairn.get_checkpoint_info(url)["checkpoint_dir"] == "memory://" + url.split("://")[1]


@SAVERS
def test_save_refuses_a_path_that_lost_the_slashes_of_its_url(algo, tmp_path, monkeypatch, save):
    monkeypatch.chdir(tmp_path)
    for mangled in (Path("s3://bucket/x"), Path("file:///abs/p")):  # Path() collapses "//"
        with pytest.raises(UnsupportedCheckpointLocationError, match="URL"):
            save(algo, mangled)
    assert list(tmp_path.iterdir()) == []


@SAVERS
def test_save_to_a_file_url_writes_the_local_path(algo, tmp_path, monkeypatch, save):
    monkeypatch.chdir(tmp_path)
    target = tmp_path / "with space" / "ckpt"
    url = target.as_uri()  # file:///.../with%20space/ckpt
    assert url.startswith("file:///")
    save(algo, url)
    assert (target / MANIFEST_FILE).is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["with space"]  # no "file:" directory
    info = cairn.get_checkpoint_info(url)
    assert info["checkpoint_dir"] == str(target)
    if save is _save_algorithm:
        restored = cairn.Algorithm.from_checkpoint(url)
        restored.stop()
    else:
        assert isinstance(Policy.from_checkpoint(url), Policy)


def test_save_returns_the_local_path_of_a_file_url(algo, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    target = tmp_path / "ckpt"
    assert algo.save(target.as_uri()) == str(target)
    assert algo.save("file://localhost" + str(target)) == str(target)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt"]


def test_a_file_url_with_a_host_is_refused(algo, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UnsupportedCheckpointLocationError, match="file:///"):
        algo.save("file://relative/ckpt")
    assert list(tmp_path.iterdir()) == []


# ---------------------------------------------------------------------------- ~ (home)
@SAVERS
def test_save_and_load_expand_the_home_directory(algo, tmp_path, monkeypatch, save):
    home, cwd = tmp_path / "home", tmp_path / "cwd"
    home.mkdir()
    cwd.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(cwd)
    returned = save(algo, "~/ckpt")
    assert (home / "ckpt" / MANIFEST_FILE).is_file()
    assert list(cwd.iterdir()) == []  # no directory literally named "~"
    if save is _save_algorithm:
        assert returned == str(home / "ckpt")
        restored = cairn.Algorithm.from_checkpoint("~/ckpt")
        restored.stop()
        assert set(Policy.from_checkpoint(Path("~/ckpt"))) == {"default_policy"}
    else:
        assert isinstance(Policy.from_checkpoint("~/ckpt"), Policy)
    assert cairn.get_checkpoint_info("~/ckpt")["checkpoint_dir"] == str(home / "ckpt")


def test_cleanup_expands_the_home_directory(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    leftover = tmp_path / f".ckpt.cairn-tmp-{2**22 + 12345}-abcd"  # a pid above pid_max: dead
    leftover.mkdir()
    assert cleanup("~") == [str(leftover)]
    assert not leftover.exists()


# -------------------------------------------------------------------------- the helper
def test_save_target_turns_every_accepted_form_into_a_local_path(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    assert save_target("~/a") == tmp_path / "a"
    assert save_target(Path("~") / "a") == tmp_path / "a"
    assert save_target("relative/a") == Path("relative/a")
    assert save_target("file:///abs/p") == Path("/abs/p")
    assert save_target("file:///abs/with%20space") == Path("/abs/with space")
    assert save_target(os.fsencode("~/b")) == tmp_path / "b"
    assert save_target("run:1/ckpt") == Path("run:1/ckpt")  # a colon alone is not a URL
    with pytest.raises(UnsupportedCheckpointLocationError, match="'ftp'"):
        save_target("ftp://host/x")
    with pytest.raises(CheckpointError, match="int"):
        save_target(3)  # type: ignore[arg-type]
