"""One storage interface, one implementation per medium (issue 26, item 1): the same contract
holds for a local directory and an object store (memory://), and the writer, reader and
manager never ask which medium they have."""

from __future__ import annotations

import ast
import json
import secrets
import socket
from pathlib import Path

import pytest

from cairn.checkpoint import resolve_storage, write_policy_checkpoint
from cairn.checkpoint.format import MANIFEST_FILE
from cairn.checkpoint.manager_records import abandoned, owner
from cairn.checkpoint.manager_store import open_store
from cairn.checkpoint.manifest import read_manifest
from cairn.checkpoint.storage import Storage
from cairn.errors import CheckpointFormatError, CheckpointNotFoundError
from tests.conftest import ROOT
from tests.helpers import small_ma_ppo

DEAD_PID = 2**22 + 12345  # above Linux's pid_max: no such process


def _root(kind: str, tmp_path: Path) -> Storage:
    if kind == "local":
        return resolve_storage(tmp_path / "root")
    return resolve_storage(f"memory://cairn-backends-{secrets.token_hex(4)}/root")


def _state() -> dict:
    algo = small_ma_ppo(1).build()
    try:
        return algo.get_policy("p0").get_state()
    finally:
        algo.stop()


@pytest.fixture(scope="module")
def policy_state() -> dict:
    return _state()


@pytest.mark.parametrize("kind", ["local", "object"])
def test_each_medium_writes_reads_lists_and_deletes_a_checkpoint(kind, tmp_path, policy_state):
    root = _root(kind, tmp_path)
    ckpt = root.child("checkpoint_000001")
    ckpt.check_writable()  # nothing there yet
    write_policy_checkpoint(ckpt, policy_state)
    assert root.is_committed("checkpoint_000001") and ckpt.is_committed()
    assert root.list_entries() == ["checkpoint_000001"]
    with ckpt.open_reader() as handle:
        assert read_manifest(handle, expected_type="Policy")["type"] == "Policy"
    root.write_record("checkpoint_000001.metric.json", b"{}")
    assert root.read_bytes("checkpoint_000001.metric.json", limit=10) == b"{}"
    root.remove_checkpoint("checkpoint_000001")
    assert not root.is_committed("checkpoint_000001")
    assert root.list_entries() == ["checkpoint_000001.metric.json"]
    with pytest.raises(CheckpointNotFoundError):
        ckpt.open_reader().read_file(MANIFEST_FILE, "a manifest", expected_size=None, limit=1 << 20)


@pytest.mark.parametrize("kind", ["local", "object"])
def test_each_medium_refuses_to_write_over_what_is_not_a_checkpoint(kind, tmp_path):
    target = _root(kind, tmp_path).child("results")
    target.write_bytes("progress.csv", b"a,b\n")
    with pytest.raises(CheckpointFormatError, match="progress.csv"):
        target.check_writable()


@pytest.mark.parametrize("kind", ["local", "object"])
def test_a_manager_root_removes_what_killed_saves_left(kind, tmp_path, policy_state):
    root = _root(kind, tmp_path)
    write_policy_checkpoint(root.child("checkpoint_000002"), policy_state)
    dead = f".checkpoint_000002.cairn-tmp-{DEAD_PID}-abcd"
    root.write_bytes(f"{dead}/{MANIFEST_FILE}", b"{}")
    root.write_bytes("checkpoint_000003/policy_state.json", b"{}")  # never committed, its writer dead
    root.write_bytes("checkpoint_000003.metric.json",
                     json.dumps({"host": socket.gethostname(), "pid": DEAD_PID, "renewed": 0.0}).encode())
    root.write_bytes("checkpoint_000004/policy_state.json", b"{}")  # a save in progress elsewhere
    root.write_bytes("checkpoint_000004.metric.json", json.dumps(owner()).encode())
    store = open_store(root.url)
    store.clean_stale({"checkpoint_000002"}, is_checkpoint=lambda name: name.startswith("checkpoint_"),
                      record_suffix=".metric.json", abandoned=abandoned)
    kept = ["checkpoint_000002", "checkpoint_000004", "checkpoint_000004.metric.json"]
    assert sorted(store.list_names()) == kept


def test_incremental_reuse_is_the_mediums_and_never_crosses_media(tmp_path):
    local, other = resolve_storage(tmp_path / "a"), resolve_storage(tmp_path / "b")
    url = f"memory://cairn-backends-{secrets.token_hex(4)}"
    objects, sibling = resolve_storage(f"{url}/a"), resolve_storage(f"{url}/b")
    assert local.can_reuse_from(other) and not local.can_reuse_from(objects)
    assert objects.can_reuse_from(sibling) and not objects.can_reuse_from(local)
    assert not objects.can_reuse_from(objects)  # uncommitted while it is rewritten


@pytest.mark.parametrize("module", ["writer.py", "writer_files.py", "reader.py", "manifest.py",
                                    "incremental.py", "manager.py", "manager_store.py"])
def test_the_writer_reader_and_manager_never_ask_which_medium(module):
    tree = ast.parse((ROOT / "cairn" / "checkpoint" / module).read_text())
    names = {node.id for node in ast.walk(tree) if isinstance(node, ast.Name)}
    names |= {node.attr for node in ast.walk(tree) if isinstance(node, ast.Attribute)}
    assert not names & {"LocalStorage", "ObjectStorage", "ObjectStoreDir", "is_object_store", "is_local"}



@pytest.mark.parametrize("kind", ["local", "object"])
def test_loose_files_written_locally_become_the_locations_files(kind, tmp_path):
    """Storage.loose_files (exported models): what is written into the directory it yields
    is at the location afterwards, files of the same names replaced, other files kept."""
    storage = _root(kind, tmp_path).child("export")
    storage.write_bytes("keep.txt", b"old")
    storage.write_bytes("model.onnx", b"old")
    with storage.loose_files() as directory:
        (directory / "model.onnx").write_bytes(b"new")
        (directory / "sub").mkdir()
        (directory / "sub" / "signature.json").write_bytes(b"{}")
    assert sorted(storage.list_files()) == ["keep.txt", "model.onnx", "sub/signature.json"]
    assert storage.read_bytes("model.onnx", limit=10) == b"new"
    assert storage.read_bytes("keep.txt", limit=10) == b"old"
