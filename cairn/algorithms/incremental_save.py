"""Incremental saves of an Algorithm: which policies the next save takes from the previous
checkpoint without gathering, serialising or hashing their state (docs/checkpoints.md,
"Incremental saves").

An algorithm remembers, for the last few checkpoints it wrote, what it wrote there for each
policy: the change marker taken with the policy's state (:mod:`cairn.policy.change_marker`)
and the entries of the policy's manifest. A save with ``previous=`` one of them first reads that
checkpoint's root manifest, which must still list each policy's manifest exactly as written,
then asks each policy's marker whether it changed since:

* ``"same"``: a :class:`~cairn.checkpoint.incremental.LinkedPolicy` stands for its state (every
  file linked, or copied server-side; ``get_state`` is not called);
* ``"values"`` (a frozen opponent that acted: its random generator and timestep moved, its
  weights, optimizer and filter did not): a :class:`~cairn.checkpoint.incremental.LinkedArrays`
  of its JSON tree (the JSON file and manifest rewritten, the arrays file linked);
* otherwise its state, written (or found unchanged by hashing, as for a checkpoint this process
  did not write).

Only policies whose state a marker covers take part (:func:`marker_parts`); others, and
policies with native model files, are always gathered.
"""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from cairn.checkpoint.format import POLICY_ARRAYS_FILE
from cairn.checkpoint.incremental import LinkedArrays, LinkedPolicy, checkpoint_key, policy_manifest_entries
from cairn.checkpoint.storage import Storage, resolve_storage
from cairn.checkpoint.writer_files import split_state
from cairn.errors import CairnError
from cairn.policy.change_marker import PolicyMarker, compare_marker, take_marker
from cairn.policy.policy import Policy

if TYPE_CHECKING:
    from cairn.algorithms.algorithm import Algorithm

__all__ = ["IncrementalSave", "marker_parts", "plan_incremental_save"]

#: How many of its latest checkpoints an algorithm remembers (a manager saves against its latest).
_REMEMBERED = 4
_LOCK = threading.Lock()


@dataclass(frozen=True)
class _Written:
    """What a save wrote for one policy: the marker taken with its state, its manifest's entry
    in the root manifest, and the files its manifest lists."""

    marker: PolicyMarker
    entry: Mapping[str, Any]
    files: Mapping[str, Mapping[str, Any]]


#: algorithm -> {checkpoint key: {policy ID: _Written}}, most recently used last.
_LEDGERS: weakref.WeakKeyDictionary[Any, dict[str, dict[str, _Written]]] = weakref.WeakKeyDictionary()


#: The layout of the state trees markers cover (docs/checkpoint-format.md, "Policy state"):
#: a state with another key than these is never taken unread (it would not be compared).
_LAYOUT = {"spec": None, "weights": None, "optimizer": None, "observation_filter": None,
           "counters": {"global_timestep", "num_grad_updates"}, "exploration": None,
           "rng": {"torch", "numpy"}}
_DQN_LAYOUT = {**_LAYOUT, "target": {"weights", "last_update_timestep"}}


def covered(state: Mapping[str, Any], policy: Policy) -> bool:
    """Whether ``state`` (``policy.get_state()``) has exactly the keys its marker compares."""
    from cairn.algorithms.dqn.dqn_policy import DQNPolicy

    layout = _DQN_LAYOUT if isinstance(policy, DQNPolicy) else _LAYOUT
    return set(state) == set(layout) and all(
        keys is None or (isinstance(state[key], Mapping) and set(state[key]) == keys)
        for key, keys in layout.items())


def marker_parts(policy: Policy) -> dict[str, tuple[str, ...]] | None:
    """The extra torch modules and JSON attributes of ``policy``'s state, for
    :func:`~cairn.policy.change_marker.take_marker`; None for a policy whose state tree a marker
    does not cover (a ``get_state`` or ``spec`` this module does not know)."""
    from cairn.algorithms.dqn.dqn_policy import DQNPolicy  # below this module's importers

    if type(policy).spec is not Policy.spec:
        return None
    get_state = type(policy).get_state
    if get_state is Policy.get_state:
        return {"modules": (), "values": ()}
    if get_state is DQNPolicy.get_state:  # adds the target network and its update timestep
        return {"modules": ("target_model",), "values": ("last_target_update",)}
    return None


@dataclass
class IncrementalSave:
    """One save's plan: what stands for some policies' states (``given``), and the markers to
    remember once the checkpoint is committed (:meth:`remember`)."""

    algo: Any
    #: The previous checkpoint, resolved in the caller's thread: fsspec file systems are made
    #: per thread, and files are copied server-side only between locations of one of them.
    previous: Storage | None = None
    given: dict[str, Any] = field(default_factory=dict)
    #: Policies whose markers say they changed: written without hashing them to compare.
    changed: set[str] = field(default_factory=set)
    markers: dict[str, PolicyMarker] = field(default_factory=dict)

    def take_markers(self, states: Mapping[str, Any], native: Collection[str]) -> None:
        """Take the markers of the policies whose ``states`` were just gathered (call it right
        after ``get_state``)."""
        for pid, policy in self.algo.policies.items():
            if pid in self.markers or pid in native:
                continue
            parts = marker_parts(policy)
            if parts is None or not covered(states[pid], policy):
                continue
            marker = take_marker(policy, policy.optimizer_holder, **parts)
            if marker is not None:
                self.markers[pid] = marker

    def remember(self, location: str, written: Mapping[str, Any], *,
                 storage_options: Mapping[str, Any] | None) -> None:
        """Remember what the committed checkpoint at ``location`` holds for each policy."""
        records = {pid: _Written(marker, written[pid]["entry"], written[pid]["files"])
                   for pid, marker in self.markers.items() if pid in written}
        key = checkpoint_key(location, storage_options=storage_options)
        with _LOCK:
            ledger = _LEDGERS.setdefault(self.algo, {})
            ledger.pop(key, None)
            ledger[key] = records
            while len(ledger) > _REMEMBERED:
                del ledger[next(iter(ledger))]


def plan_incremental_save(algo: Algorithm, previous: str | os.PathLike[str] | None, target: Storage, *,
                          storage_options: Mapping[str, Any] | None, native: Collection[str],
                          markers: bool = True) -> IncrementalSave:
    """The plan of a save of ``algo`` to ``target`` with ``previous``: the policies that did not
    change since this algorithm wrote ``previous`` (module docstring). ``native``: the policies
    that get native model files (always gathered); ``markers=False``: none is taken unread (the
    writer may still find files unchanged by hashing)."""
    plan = IncrementalSave(algo)
    if previous is None:
        return plan
    plan.previous = resolve_storage(previous, storage_options=storage_options)  # refused as the writer would
    try:
        key = checkpoint_key(plan.previous)
    except (CairnError, OSError, ValueError):
        return plan  # not a location this module can name: the writer decides by hashing
    if not markers:
        return plan
    with _LOCK:
        records = _LEDGERS.get(algo, {}).pop(key, None)
        if records is not None:
            _LEDGERS[algo][key] = records  # most recently used last
    if not records:
        return plan
    entries = policy_manifest_entries(plan.previous, target, storage_options=storage_options)
    for pid, policy in algo.policies.items():
        written, parts = records.get(pid), marker_parts(policy)
        if written is None or parts is None or pid in native or entries.get(pid) != dict(written.entry):
            continue
        verdict = compare_marker(policy, policy.optimizer_holder, written.marker, **parts)
        if verdict == "changed":
            plan.changed.add(pid)
        elif verdict == "same":
            plan.given[pid] = LinkedPolicy(written.entry, written.files)
            plan.markers[pid] = written.marker
        elif verdict == "values" and POLICY_ARRAYS_FILE in written.files:
            state = policy.get_state(copy=False)
            tree = split_state(state)[0]  # new containers: a snapshot
            marker = take_marker(policy, policy.optimizer_holder, **parts)
            if marker is not None and covered(state, policy):
                plan.given[pid] = LinkedArrays(tree, written.entry, written.files[POLICY_ARRAYS_FILE])
                plan.markers[pid] = marker
            else:
                plan.changed.add(pid)
    return plan
