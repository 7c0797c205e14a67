"""Every key of a checkpoint's config and policy spec is tried as a reference to code, and none
makes cairn import or call it (docs/security.md, "References").

The walk puts each payload at every key of the stored algorithm config, the algorithm state's
own keys and the policy spec (nested dicts included, plus the optional ``model`` keys a base
checkpoint lacks, such as ``keras_model``), both as a plain string and as a stored callable
(``{"__callable__": ...}``), re-hashes the file, and loads. A load may succeed (the key is data)
or raise a ``CheckpointError``; it must never import the payload's standard-library module,
call the payload function, or use the foreign class.
"""

from __future__ import annotations

import builtins
import code
import os
import sys
import webbrowser
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cairn.algorithms.algorithm import Algorithm
from cairn.errors import CheckpointError
from cairn.policy.custom_model import CUSTOM_MODEL_KEYS
from cairn.policy.keras_config import FRAMEWORK_MODEL_KEYS
from cairn.policy.mlp_actor_critic import DEFAULT_MODEL_CONFIG
from cairn.policy.policy import Policy
from tests.checkpoint.attacks import POLICY_DIR, base_checkpoints, copy_base, edit_json, read_json

ASTATE = "algorithm_state.json"
PSTATE = f"{POLICY_DIR}/policy_state.json"
PAYLOAD_MODULE = "tests.checkpoint.attacks.payload"

#: Standard-library references from the security probe (issue 25): each would print, replace a
#: file descriptor, open a console or a browser, or import a module with side effects.
STDLIB_PAYLOADS = ("builtins:print", "os:dup2", "code:interact", "webbrowser:open",
                   "antigravity:x", "this:x")
#: A non-standard-library class that is no Algorithm or Policy and writes the canary when used.
FOREIGN_CLASS = f"{PAYLOAD_MODULE}:EvilNotPolicy"
#: Modules whose mere import is a side effect (the Zen of Python; a browser tab).
IMPORT_SIDE_EFFECTS = ("this", "antigravity")

#: Where a checkpoint names code today; the walk must reach each of them (the table in
#: docs/security.md lists the same places).
REFERENCE_KEYS = {
    (ASTATE, ("algorithm_class",)),
    (ASTATE, ("config", "algo_class")),
    (ASTATE, ("config", "env")),
    (ASTATE, ("config", "policy_mapping_fn")),
    (ASTATE, ("config", "model", "keras_model")),
    (ASTATE, ("config", "policies", "default_policy", "policy_class")),
    (ASTATE, ("config", "policies", "default_policy", "config", "model", "keras_model")),
    (PSTATE, ("spec", "policy_class")),
    (PSTATE, ("spec", "config", "model", "keras_model")),
    (ASTATE, ("config", "callbacks_class")),
    (ASTATE, ("config", "model", "custom_model")),
    (ASTATE, ("config", "model", "custom_q_model")),
    (ASTATE, ("config", "policies", "default_policy", "config", "model", "custom_model")),
    (PSTATE, ("spec", "config", "model", "custom_model")),
    (PSTATE, ("spec", "config", "model", "custom_q_model")),
}


def _paths(tree: Any, prefix: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    if not isinstance(tree, dict) or "__array__" in tree or "__callable__" in tree:
        return
    keys = list(tree)
    if prefix and prefix[-1] == "model":  # optional model keys a default config does not store
        optional = (*DEFAULT_MODEL_CONFIG, *FRAMEWORK_MODEL_KEYS, *CUSTOM_MODEL_KEYS)
        keys += [k for k in optional if k not in tree]
    if prefix and prefix[-1] == "config" and "model" not in tree:
        keys.append("model")
    for key in keys:
        yield (*prefix, key)
        child = tree.get(key)
        yield from _paths(child if isinstance(child, dict) or key not in ("config", "model") else {},
                          (*prefix, key))


def walked_keys() -> list[tuple[str, tuple[str, ...]]]:
    """Every key of the stored config and state trees, the optional model keys added."""
    root = base_checkpoints() / "algo"
    algo_state = read_json(root / ASTATE)
    policy_state = {"spec": read_json(root / PSTATE)["spec"]}
    keys = [(ASTATE, p) for p in _paths(algo_state) if p[0] in ("algorithm_class", "config")]
    keys += [(ASTATE, p) for p in _paths({"config": {"model": {}}}) if (ASTATE, p) not in keys]
    keys += [(PSTATE, p) for p in _paths(policy_state)]
    return sorted(set(keys))


def _put(path: tuple[str, ...], value: Any) -> Any:
    def edit(data: Any) -> None:
        node = data
        for key in path[:-1]:
            if not isinstance(node.get(key), dict):
                node[key] = {}
            node = node[key]
        node[path[-1]] = value
        if path[-1] == "keras_model":  # a Keras builder is only looked up for a Keras model
            node["framework"] = "keras"
    return edit


class Spies:
    """Records calls that cairn's code makes of the standard-library payload functions,
    instead of running them."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls: list[str] = []
        for owner, name in ((builtins, "print"), (os, "dup2"), (code, "interact"), (webbrowser, "open")):
            monkeypatch.setattr(owner, name, self._spy(f"{owner.__name__}:{name}"))

    def _spy(self, name: str) -> Any:
        real = getattr(sys.modules[name.partition(":")[0]], name.partition(":")[2])

        def spy(*args: Any, **kwargs: Any) -> Any:
            caller = sys._getframe(1).f_globals.get("__name__", "")
            if caller.split(".")[0] != "cairn":
                return real(*args, **kwargs)  # pytest's own capture calls os.dup2
            self.calls.append(f"{name} from {caller}")
            return None
        return spy


@pytest.fixture
def spies(monkeypatch: pytest.MonkeyPatch) -> Spies:
    return Spies(monkeypatch)


def test_walk_reaches_every_reference_key() -> None:
    assert REFERENCE_KEYS <= set(walked_keys())


@pytest.mark.parametrize("where", walked_keys(), ids=lambda w: f"{w[0].split('/')[0]}:{'.'.join(w[1])}")
def test_no_key_makes_a_checkpoint_run_code(where: tuple[str, tuple[str, ...]], tmp_path: Path,
                                           spies: Spies, monkeypatch: pytest.MonkeyPatch) -> None:
    canary = tmp_path / "canary"
    monkeypatch.setenv("CAIRN_CANARY", str(canary))
    for name in IMPORT_SIDE_EFFECTS:
        monkeypatch.delitem(sys.modules, name, raising=False)
    rel, path = where
    loaders = [lambda root: Algorithm.from_checkpoint(root).stop()]
    if rel == PSTATE:
        loaders.append(Policy.from_checkpoint)
    for reference in (*STDLIB_PAYLOADS, FOREIGN_CLASS):
        for value in (reference, {"__callable__": reference, "name": "payload"}):
            root = copy_base("algo", tmp_path / f"checkpoint-{len(list(tmp_path.iterdir()))}")
            edit_json(root, rel, _put(path, value))
            for load in loaders:
                try:
                    load(root)
                except CheckpointError:
                    pass
                imported = [m for m in IMPORT_SIDE_EFFECTS if m in sys.modules]
                assert not imported, f"{value!r} at {path}: imported {imported}"
                assert not spies.calls, f"{value!r} at {path}: called {spies.calls}"
                assert not canary.exists(), f"{value!r} at {path}: {canary.read_text()}"
