"""Incremental saves never carry a damaged file of the previous checkpoint forward (issue 37
item 4; docs/checkpoints.md, "Incremental saves").

A file is taken from the previous checkpoint only when the bytes taken hash as that
checkpoint's manifest records (and as the live state serialises): one flipped bit in checkpoint
1 was linked into checkpoints 2 and 3 by a check of sizes alone, each save reported success and
none loaded. Here the damaged file is found, a warning names it, the policy is written anew from
the live state, and checkpoints 2 and 3 load and equal the live policies; checkpoint 1 is left
as it is (still reported by ``cairn checkpoint verify``)."""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable
from pathlib import Path

import pytest

import cairn
from cairn.algorithms.save_restore import save_algorithm
from cairn.checkpoint import load_algorithm_state
from cairn.checkpoint.storage import local
from cairn.cli.checkpoint_verify import verify_checkpoint
from tests.helpers import assert_trees_equal, small_ma_ppo
from tests.s3_server import ACCESS_KEY, SECRET_KEY

ARRAYS = "policy_state.safetensors"
STATE = "policy_state.json"


@pytest.fixture(scope="module")
def algo():
    """p0 learns, p1 is a frozen opponent that no save changes: every file of p1 is taken from
    the previous checkpoint unless it is found damaged."""
    algo = (small_ma_ppo(2, model={"hidden": [8]}, train_batch_size=64, minibatch_size=32, num_epochs=1)
            .multi_agent(policies_to_train=["p0"]).build())
    algo.train()
    yield algo
    algo.stop()


def _flip_bit(data: bytes) -> bytes:
    """``data`` with one bit flipped near its end (a weight in an arrays file, a digit or a
    brace in a JSON file)."""
    at = len(data) - 3
    return data[:at] + bytes([data[at] ^ 0x01]) + data[at + 1:]


def _same_size_other_weights(data: bytes) -> bytes:
    """A valid safetensors file of the same size and header, its weights' bytes reversed."""
    start = 8 + int.from_bytes(data[:8], "little")
    return data[:start] + data[start:][::-1]


def _truncated(data: bytes) -> bytes:
    return data[: len(data) // 2]


#: {case: (file of p1 damaged, how)}: each makes the file other bytes than its manifest's hash.
DAMAGES: dict[str, tuple[str, Callable[[bytes], bytes]]] = {
    "one bit of the weights": (ARRAYS, _flip_bit),
    "other weights, same size": (ARRAYS, _same_size_other_weights),
    "weights truncated": (ARRAYS, _truncated),
    "one bit of the JSON state": (STATE, _flip_bit),
}


def _damage_local(checkpoint: str, name: str, damage: Callable[[bytes], bytes]) -> None:
    """Damage ``policies/p1/<name>`` of ``checkpoint`` in place (as a disk, or a user, would)."""
    victim = Path(checkpoint) / "policies" / "p1" / name
    data = damage(victim.read_bytes())
    with open(victim, "r+b") as f:
        f.write(data)
        f.truncate()


def _assert_live(path: str, algo: cairn.Algorithm, **options) -> None:
    stored = load_algorithm_state(path, **options)["policies"]
    for pid, policy in algo.policies.items():
        assert_trees_equal(stored[pid], policy.get_state(), pid)


def _warned_about(caught: list[warnings.WarningMessage], checkpoint: str, name: str) -> bool:
    text = [str(w.message) for w in caught]
    return any(f"policies/p1/{name}" in t and checkpoint.rstrip("/") in t and "cairn checkpoint verify" in t
               for t in text)


@pytest.mark.parametrize("damage", DAMAGES)
def test_a_damaged_file_of_the_previous_checkpoint_is_reported_and_written_anew(algo, tmp_path, damage):
    name, how = DAMAGES[damage]
    first = save_algorithm(algo, tmp_path / "c1")
    _damage_local(first, name, how)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        second = save_algorithm(algo, tmp_path / "c2", previous=first)
        third = save_algorithm(algo, tmp_path / "c3", previous=second)
    for path in (second, third):
        _assert_live(path, algo)
        assert verify_checkpoint(path)[0] == []
    assert _warned_about(caught, first, name), [str(w.message) for w in caught]
    assert len(caught) == 1, [str(w.message) for w in caught]  # checkpoint 2 is sound: nothing to report
    assert os.stat(f"{second}/policies/p1/{ARRAYS}").st_ino == os.stat(f"{third}/policies/p1/{ARRAYS}").st_ino
    assert os.stat(f"{first}/policies/p0/{ARRAYS}").st_ino == os.stat(f"{second}/policies/p0/{ARRAYS}").st_ino
    problems = verify_checkpoint(first)[0]
    assert any(f"policies/p1/{name}" in problem for problem in problems), problems


@pytest.mark.parametrize("by_path", [False, True])
def test_every_damaged_policy_is_reported_and_written_anew(algo, tmp_path, monkeypatch, by_path):
    if by_path:
        monkeypatch.setattr(local, "_LINK_AT", False)
    first = save_algorithm(algo, tmp_path / "c1")
    _damage_local(first, ARRAYS, _flip_bit)
    victim = Path(first) / "policies" / "p0" / STATE
    victim.write_bytes(_flip_bit(victim.read_bytes()))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        second = save_algorithm(algo, tmp_path / "c2", previous=first)
    _assert_live(second, algo)
    assert _warned_about(caught, first, ARRAYS) and len(caught) == 2, [str(w.message) for w in caught]
    assert any(f"policies/p0/{STATE}" in str(w.message) for w in caught)


def test_linked_by_path_a_damaged_file_is_written_anew(algo, tmp_path, monkeypatch):
    monkeypatch.setattr(local, "_LINK_AT", False)  # as on Windows: linked by path
    first = save_algorithm(algo, tmp_path / "c1")
    _damage_local(first, ARRAYS, _flip_bit)
    with pytest.warns(UserWarning, match=f"p1/{ARRAYS} does not match its hash"):
        second = save_algorithm(algo, tmp_path / "c2", previous=first)
    _assert_live(second, algo)
    assert os.stat(f"{first}/policies/p0/{ARRAYS}").st_ino == os.stat(f"{second}/policies/p0/{ARRAYS}").st_ino


def test_the_bytes_linked_are_the_bytes_verified(algo, tmp_path, monkeypatch):
    """The source file is swapped for a damaged one (a rename: a new inode) just before it is
    linked: a check made on the source before linking would pass and link the damaged file; the
    check is made on what was linked."""
    first = save_algorithm(algo, tmp_path / "c1")
    victim = Path(first) / "policies" / "p1" / ARRAYS
    damaged = tmp_path / "damaged"
    damaged.write_bytes(_flip_bit(victim.read_bytes()))
    link, swapped = os.link, []

    def swap_then_link(src, dst, *args, **kwargs):
        if not swapped and str(src).endswith(f"p1/{ARRAYS}"):
            swapped.append(src)
            os.replace(damaged, victim)
        return link(src, dst, *args, **kwargs)

    monkeypatch.setattr(local.os, "link", swap_then_link)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        second = save_algorithm(algo, tmp_path / "c2", previous=first)
    monkeypatch.undo()
    assert swapped
    _assert_live(second, algo)
    assert _warned_about(caught, first, ARRAYS), [str(w.message) for w in caught]


@pytest.mark.parametrize("damage", ["one bit of the weights", "weights truncated",
                                    "one bit of the JSON state"])
def test_on_s3_a_damaged_object_of_the_previous_checkpoint_is_not_copied(algo, s3, damage, monkeypatch):
    name, how = DAMAGES[damage]
    for variable, value in (("AWS_ENDPOINT_URL", s3.server.endpoint_url), ("AWS_ACCESS_KEY_ID", ACCESS_KEY),
                            ("AWS_SECRET_ACCESS_KEY", SECRET_KEY), ("AWS_DEFAULT_REGION", "us-east-1")):
        monkeypatch.setenv(variable, value)  # so that verify_checkpoint reaches the server too
    options: dict = {}
    first = save_algorithm(algo, s3.url("run/c1"), storage_options=options)
    key = f"run/c1/policies/p1/{name}"
    client = s3.server.client()
    data = client.get_object(Bucket=s3.name, Key=key)["Body"].read()
    s3.put(key, how(data))
    s3.server.reset_requests()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        second = save_algorithm(algo, s3.url("run/c2"), storage_options=options, previous=first)
        copied = {p.split("/run/c2/", 1)[1] for m, p in s3.server.requests("COPY")}
        third = save_algorithm(algo, s3.url("run/c3"), storage_options=options, previous=second)
    for path in (second, third):
        _assert_live(path, algo, storage_options=options)
    assert _warned_about(caught, first, name), [str(w.message) for w in caught]
    assert len(caught) == 1, [str(w.message) for w in caught]
    assert not any(path.startswith("policies/p1/") for path in copied) and f"policies/p0/{ARRAYS}" in copied
    assert verify_checkpoint(third)[0] == []
    problems = verify_checkpoint(first)[0]
    assert any(f"policies/p1/{name}" in problem for problem in problems), problems


def test_on_memory_a_damaged_object_of_the_previous_checkpoint_is_not_copied(algo):
    root = "memory://cairn-incremental-damaged"
    first = save_algorithm(algo, f"{root}/c1")
    from cairn.checkpoint.storage import resolve_storage

    storage = resolve_storage(first)
    name = f"policies/p1/{ARRAYS}"
    storage.write_bytes(name, _flip_bit(storage.read_bytes(name, limit=1 << 30)))
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            second = save_algorithm(algo, f"{root}/c2", previous=first)
        _assert_live(second, algo)
        assert _warned_about(caught, first, ARRAYS), [str(w.message) for w in caught]
    finally:
        resolve_storage(root).delete_prefix()


def test_a_manager_whose_latest_checkpoint_is_damaged_saves_whole_checkpoints(algo, tmp_path):
    """The quoted run: a manager's checkpoint 1 damaged on disk, checkpoints 2 and 3 saved
    incrementally (p0 learns between saves, p1 is frozen and would be linked)."""
    manager = cairn.CheckpointManager(tmp_path / "run", keep_last=3)
    first = manager.save(algo, algo.train())
    assert isinstance(first, str)
    _damage_local(first, ARRAYS, _flip_bit)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        later = [manager.save(algo, algo.train()) for _ in range(2)]
    for path in later:
        assert isinstance(path, str) and verify_checkpoint(path)[0] == []  # loads, every check passed
    _assert_live(str(later[-1]), algo)
    assert _warned_about(caught, first, ARRAYS) and len(caught) == 1, [str(w.message) for w in caught]
    assert [c.path for c in manager.checkpoints()] == [first, *later]
    assert verify_checkpoint(first)[0] != []
