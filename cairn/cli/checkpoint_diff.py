"""``cairn checkpoint diff A B``: how two checkpoints differ: each policy's weights (L2 norm
of the difference and largest absolute change, per policy and per parameter), policies only
in one of them, config settings, counters and iteration, and the rest of the state a resume
continues from (optimizer, observation filters, random generators, env runners, ...)."""

from __future__ import annotations

import argparse
import json
from collections import Counter
from collections.abc import Mapping
from typing import Any

import numpy as np

from cairn.cli.common import json_safe

__all__ = ["add_parser", "run", "diff_checkpoints", "weight_changes", "flat_differences"]


def add_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    """Add ``diff`` to ``cairn checkpoint``'s actions."""
    p = sub.add_parser("diff", parents=[common], help="weight and config differences of two checkpoints",
                       description="Compare two checkpoints (Algorithm or Policy): per policy, the L2 norm "
                                   "of the weights' difference and the largest absolute change (in total and "
                                   "per parameter), and the settings, counters and specs that differ.")
    p.add_argument("a", metavar="A")
    p.add_argument("b", metavar="B")
    p.add_argument("--json", action="store_true", help="the differences as one JSON document")
    p.set_defaults(run=run)


def _same_array(x: np.ndarray, y: np.ndarray) -> bool:
    """Whether two arrays hold the same values (NaN where the other has NaN counts as equal)."""
    if x.shape != y.shape:
        return False
    if np.issubdtype(x.dtype, np.inexact) or np.issubdtype(y.dtype, np.inexact):
        return bool(np.array_equal(x, y, equal_nan=True))
    return bool(np.array_equal(x, y))


def weight_changes(a: Mapping[str, np.ndarray], b: Mapping[str, np.ndarray]) -> dict[str, Any]:
    """``{"l2": ..., "max_abs": ..., "params": {name: {"changed", "l2", "max_abs"} | {"change": ...}}}``
    between two ``{name: array}`` weight dicts; l2 is the norm over all shared, same-shaped
    parameters, as if they were one vector. ``changed`` says whether the values differ at all:
    a weight that became NaN (or infinite) has an l2 of NaN, which no comparison with 0 sees."""
    params: dict[str, Any] = {}
    squares, maxima = [0.0], [0.0]
    for name in sorted(set(a) | set(b)):
        if name not in b or name not in a:
            params[name] = {"change": f"only in {'A' if name in a else 'B'}"}
            continue
        x, y = np.asarray(a[name]), np.asarray(b[name])
        if x.shape != y.shape:
            params[name] = {"change": f"shape {list(x.shape)} -> {list(y.shape)}"}
            continue
        if x.dtype != y.dtype:
            params[name] = {"change": f"dtype {x.dtype} -> {y.dtype}"}
            continue
        changed = not _same_array(x, y)
        delta = y.astype(np.float64) - x.astype(np.float64)
        if not changed:
            delta = np.zeros_like(delta)  # NaN - NaN at the same place is no change
        l2 = float(np.sqrt(np.sum(delta * delta)))
        max_abs = float(np.max(np.abs(delta))) if delta.size else 0.0
        params[name] = {"changed": changed, "l2": l2, "max_abs": max_abs}
        squares.append(l2 * l2)
        maxima.append(max_abs)
    # np.max, not max(): a NaN among them makes the total NaN instead of being skipped.
    return {"l2": float(np.sqrt(np.sum(squares))), "max_abs": float(np.max(maxima)), "params": params}


def _has_structure(value: Any) -> bool:
    return isinstance(value, (Mapping, np.ndarray)) or (
        isinstance(value, (list, tuple)) and any(_has_structure(v) for v in value))


def _equal(a: Any, b: Any) -> bool:
    """``a == b`` for plain values (lists of them too), with NaN equal to NaN and a bool never
    equal to a number (``True == 1`` in Python, but the checkpoints hold different JSON)."""
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_equal(x, y) for x, y in zip(a, b))
    if isinstance(a, float) and isinstance(b, float) and a != a and b != b:
        return True
    if isinstance(a, bool) != isinstance(b, bool):
        return False
    return bool(a == b)


def _shown(value: Any) -> Any:
    """``value`` with arrays replaced by ``<array [shape] dtype>`` (for the report)."""
    if isinstance(value, np.ndarray):
        return f"<array {list(value.shape)} {value.dtype}>"
    if isinstance(value, Mapping):
        return {k: _shown(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_shown(v) for v in value]
    return value


def flat_differences(a: Any, b: Any, prefix: str = "") -> dict[str, tuple[Any, Any]]:
    """``{"dotted.key": (value in a, value in b)}`` for every leaf that differs. Lists of the
    same length that hold dicts or arrays are compared item by item (``env_runners.0.rng``);
    arrays are compared by value (NaN equal to NaN) and shown as ``<array [shape] dtype>``."""
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        out: dict[str, tuple[Any, Any]] = {}
        for key in sorted(set(a) | set(b), key=str):
            missing = "<absent>"
            out.update(flat_differences(a.get(key, missing), b.get(key, missing), f"{prefix}{key}."))
        return out
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        same = (isinstance(a, np.ndarray) and isinstance(b, np.ndarray)
                and a.dtype == b.dtype and _same_array(a, b))
        return {} if same else {prefix[:-1]: (_shown(a), _shown(b))}
    if (isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)) and len(a) == len(b)
            and (_has_structure(a) or _has_structure(b))):
        out = {}
        for index, (x, y) in enumerate(zip(a, b)):
            out.update(flat_differences(x, y, f"{prefix}{index}."))
        return out
    return {} if _equal(a, b) else {prefix[:-1]: (_shown(a), _shown(b))}


#: Parts of an Algorithm state compared as settings or weights; the rest is "state".
_NOT_STATE = ("config", "iteration", "counters", "policies", "policy_ids", "algorithm_class")


def _read(checkpoint: str) -> tuple[str, dict[str, Any], dict[str, Any], dict[str, Any]]:
    """(type, {policy_id: policy state}, the settings to compare, the rest of the state)."""
    from cairn.checkpoint import get_checkpoint_info, load_algorithm_state, load_policy_state

    kind = get_checkpoint_info(checkpoint)["type"]
    if kind == "Algorithm":
        state = load_algorithm_state(checkpoint)
        settings = {"config": state.get("config"), "iteration": state.get("iteration"),
                    "counters": state.get("counters")}
        return kind, state["policies"], settings, {k: v for k, v in state.items() if k not in _NOT_STATE}
    state = load_policy_state(checkpoint)
    return kind, {"policy": state}, {"spec": state.get("spec")}, {}


def diff_checkpoints(a: str, b: str) -> dict[str, Any]:
    """The differences of checkpoints ``a`` and ``b``: ``policies`` (``{policy_id:
    weight_changes}``), ``only_in_a``, ``only_in_b`` (policy IDs), ``settings``
    (``{key: [a, b]}``: config, iteration, counters, policy specs) and ``state`` (the same form,
    for everything else a resume continues from: each policy's optimizer, observation filter,
    exploration, counters and generators, and the algorithm's generators, env runners, recent
    episodes and components). A Policy checkpoint's policy is called ``"policy"``."""
    kind_a, policies_a, settings_a, state_a = _read(a)
    kind_b, policies_b, settings_b, state_b = _read(b)
    settings = flat_differences(settings_a, settings_b)
    if kind_a != kind_b:
        settings["type"] = (kind_a, kind_b)
    if kind_a != kind_b and len(policies_a) == 1 and len(policies_b) == 1:  # compare the one policy each has
        policies_a = {"policy": next(iter(policies_a.values()))}
        policies_b = {"policy": next(iter(policies_b.values()))}
    shared = [pid for pid in policies_a if pid in policies_b]
    for pid in shared:
        for key, values in flat_differences(policies_a[pid].get("spec"), policies_b[pid].get("spec")).items():
            settings[f"policies.{pid}.spec.{key}"] = values
    state = flat_differences(state_a, state_b) if kind_a == kind_b else {}
    for pid in shared:
        rest_a, rest_b = ({k: v for k, v in policy.items() if k not in ("spec", "weights")}
                          for policy in (policies_a[pid], policies_b[pid]))
        for key, values in flat_differences(rest_a, rest_b).items():
            state[f"policies.{pid}.{key}"] = values
    return {
        "policies": {pid: weight_changes(policies_a[pid]["weights"], policies_b[pid]["weights"])
                     for pid in shared},
        "only_in_a": [pid for pid in policies_a if pid not in policies_b],
        "only_in_b": [pid for pid in policies_b if pid not in policies_a],
        "settings": {key: list(values) for key, values in settings.items()},
        "state": {key: list(values) for key, values in state.items()},
    }


def _state_part(key: str) -> str:
    """The part of the state a differing key belongs to: ``policies.<id>.optimizer``, ``rng``."""
    parts = key.split(".")
    return ".".join(parts[:3] if parts[0] == "policies" else parts[:1])


def run(args: argparse.Namespace) -> int:
    """Run ``cairn checkpoint diff``."""
    from cairn.cli.run_checkpoints import refuse_run_directory

    for checkpoint in (args.a, args.b):
        refuse_run_directory(checkpoint, "cairn checkpoint diff")
    diff = diff_checkpoints(args.a, args.b)
    if args.json:
        print(json.dumps(json_safe(diff), indent=2))
        return 0
    changed = [pid for pid, change in diff["policies"].items()
               if any(p.get("changed", True) for p in change["params"].values())]
    print(f"weights ({len(changed)} of {len(diff['policies'])} shared policies changed):")
    for pid, change in diff["policies"].items():
        print(f"  {pid}: L2 {change['l2']:.6g}, max abs {change['max_abs']:.6g}")
        for name, param in change["params"].items():
            if "change" in param:
                print(f"    {name}: {param['change']}")
            elif param["changed"]:
                print(f"    {name}: L2 {param['l2']:.6g}, max abs {param['max_abs']:.6g}")
    for side in ("a", "b"):
        if diff[f"only_in_{side}"]:
            print(f"policies only in {side.upper()}: {', '.join(diff[f'only_in_{side}'])}")
    if diff["settings"]:
        print(f"settings ({len(diff['settings'])} differ):")
        for key, (x, y) in diff["settings"].items():
            print(f"  {key}: {json.dumps(json_safe(x))} -> {json.dumps(json_safe(y))}")
    else:
        print("settings: no differences")
    if diff["state"]:  # many values (generators, env states, optimizer moments): counted per part
        counts = Counter(_state_part(key) for key in diff["state"])
        print(f"state ({len(diff['state'])} values differ; --json lists them):")
        for part, count in counts.items():
            print(f"  {part}: {count} value{'s differ' if count > 1 else ' differs'}")
    else:
        print("state: no differences")
    if (not changed and not diff["settings"] and not diff["state"] and not diff["only_in_a"]
            and not diff["only_in_b"]):
        print("no differences")
    return 0
