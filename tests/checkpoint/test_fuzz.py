"""Fuzzing the loaders: mutated manifests, state JSON and safetensors bytes of a real checkpoint
(re-hashed, so mutations reach the parsers) either load or raise a CheckpointError subclass.
Any other exception escaping Algorithm.from_checkpoint, Policy.from_checkpoint or
get_checkpoint_info is a bug in the reader.

``CAIRN_FUZZ_EXAMPLES=5000 make fuzz`` runs longer.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cairn.algorithms.algorithm import Algorithm
from cairn.checkpoint import get_checkpoint_info
from cairn.errors import CheckpointError
from cairn.policy.policy import Policy
from tests.checkpoint.attacks import MANIFEST, POLICY_DIR, base_checkpoints, rehash
from tests.checkpoint.attacks.support import fresh_dir

EXAMPLES = int(os.environ.get("CAIRN_FUZZ_EXAMPLES", "0")) or None
#: Resource settings pinned on restore: a checkpoint's config may legitimately ask for many env
#: runners or vector envs, which is not what this test is about (docs/security.md).
PINNED = {"num_env_runners": 0, "num_envs_per_env_runner": 1}

POLICY_FILES = [f"{POLICY_DIR}/{MANIFEST}", f"{POLICY_DIR}/policy_state.json",
                f"{POLICY_DIR}/policy_state.safetensors"]
ALGO_FILES = [MANIFEST, "algorithm_state.json", "algorithm_state.safetensors", *POLICY_FILES]

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=12)
    | st.sampled_from(["default_policy", "../x", "CON", "os:system", "Box", "Discrete", "1", "2"]),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(
        st.text(max_size=8) | st.sampled_from(["__array__", "__float__", "type", "shape", "n"]),
        children, max_size=4),
    max_leaves=8,
)


def _nodes(tree: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [path]
    if isinstance(tree, dict):
        for key, value in tree.items():
            out += _nodes(value, (*path, key))
    elif isinstance(tree, list):
        for index, value in enumerate(tree):
            out += _nodes(value, (*path, index))
    return out


def _mutate_json(tree: Any, data: st.DataObject) -> Any:
    paths = _nodes(tree)
    path = paths[data.draw(st.integers(0, len(paths) - 1), label="node")]
    action = data.draw(st.sampled_from(["replace", "delete", "add"]), label="action")
    if not path:
        return data.draw(json_values)
    parent = tree
    for key in path[:-1]:
        parent = parent[key]
    if action == "delete":
        del parent[path[-1]]
    elif action == "add" and isinstance(parent, dict):
        parent[data.draw(st.text(max_size=8))] = data.draw(json_values)
    else:
        parent[path[-1]] = data.draw(json_values)
    return tree


def _mutate_bytes(raw: bytes, data: st.DataObject) -> bytes:
    out = bytearray(raw)
    kind = data.draw(st.sampled_from(["flip", "truncate", "header", "insert"]), label="bytes")
    if kind == "truncate":
        return bytes(out[: data.draw(st.integers(0, len(out)))])
    if kind == "header" and len(out) > 8:
        n = int.from_bytes(out[:8], "little")
        try:
            header = _mutate_json(json.loads(out[8:8 + n]), data)
        except ValueError:
            return bytes(out[:8]) + data.draw(st.binary(max_size=64)) + bytes(out[8:])
        encoded = json.dumps(header).encode()
        return len(encoded).to_bytes(8, "little") + encoded + bytes(out[8 + n:])
    if kind == "insert":
        at = data.draw(st.integers(0, len(out)))
        return bytes(out[:at]) + data.draw(st.binary(min_size=1, max_size=16)) + bytes(out[at:])
    for _ in range(data.draw(st.integers(1, 4))):
        index = data.draw(st.integers(0, max(0, len(out) - 1)))
        if out:
            out[index] ^= data.draw(st.integers(1, 255))
    return bytes(out)


def _mutate(root: Path, files: list[str], data: st.DataObject) -> None:
    for _ in range(data.draw(st.integers(1, 2), label="mutations")):
        rel = data.draw(st.sampled_from(files), label="file")
        raw = (root / rel).read_bytes()
        try:
            tree = json.loads(raw) if rel.endswith(".json") else None
        except ValueError:
            tree = None
        if tree is not None and data.draw(st.booleans(), label="as json"):
            new = json.dumps(_mutate_json(tree, data)).encode()
        else:
            new = _mutate_bytes(raw, data)
        (root / rel).write_bytes(new)
        if data.draw(st.integers(0, 9), label="rehash") > 0:  # mostly re-hashed
            try:
                rehash(root, rel)
            except (ValueError, KeyError, TypeError, AttributeError):
                pass  # the manifest itself was mutated beyond re-hashing: fine, load it anyway


def _load_all(root: Path, loaders: list[str]) -> None:
    for loader in loaders:
        try:
            if loader == "info":
                get_checkpoint_info(root)
            elif loader == "policy":
                Policy.from_checkpoint(root)
            else:
                Algorithm.from_checkpoint(root, config_overrides=PINNED).stop()
        except CheckpointError as exc:
            assert str(exc)


_SETTINGS = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
                 database=None)


@settings(max_examples=EXAMPLES or 250, **_SETTINGS)  # type: ignore[arg-type]
@given(data=st.data())
def test_fuzz_policy_checkpoint(data: st.DataObject) -> None:
    with fresh_dir() as tmp:
        root = tmp / "ck"
        shutil.copytree(base_checkpoints() / "policy", root)
        _mutate(root, [MANIFEST, "policy_state.json", "policy_state.safetensors"], data)
        _load_all(root, ["info", "policy"])


@pytest.mark.slow
@settings(max_examples=EXAMPLES or 150, **_SETTINGS)  # type: ignore[arg-type]
@given(data=st.data())
def test_fuzz_algorithm_checkpoint(data: st.DataObject) -> None:
    with fresh_dir() as tmp:
        root = tmp / "ck"
        shutil.copytree(base_checkpoints() / "algo", root)
        _mutate(root, ALGO_FILES, data)
        _load_all(root, ["info", "policy", "algo"])
