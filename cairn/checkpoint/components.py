"""Components of an Algorithm checkpoint: the parts that can be read (and restored) on their own.

The names follow RLlib's new stack (``Checkpointable.restore_from_path(path, component=...)``):

* ``"policies/<policy_id>"``: that policy's whole state (weights, optimizer, observation
  filter, counters, exploration and random generators), the Policy checkpoint under
  ``policies/<policy_id>/``;
* ``"policies/<policy_id>/weights"``: its network parameters alone (the same files are read:
  the weights share ``policy_state.safetensors`` with the optimizer state).

Reading a component reads the root manifest, the policy's manifest (verified against the root
manifest) and that policy's state files, nothing else (docs/checkpoint-format.md, section 6:
the rule for ``policy_ids=[...]``). The layers above decide what a component means for a live
object (:mod:`cairn.algorithms.component_restore`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from cairn.checkpoint.format import POLICIES_DIR
from cairn.checkpoint.paths import CheckpointLike
from cairn.checkpoint.reader import get_checkpoint_info, load_policy_states
from cairn.checkpoint.storage import StorageOptions
from cairn.errors import CheckpointFormatError, UnknownComponentError

__all__ = ["POLICY_PARTS", "ComponentRef", "checkpoint_components", "component_info", "load_component",
           "parse_component"]

#: The parts of a policy that a component may name besides the whole policy.
POLICY_PARTS = ("weights",)


@dataclass(frozen=True)
class ComponentRef:
    """A parsed component name."""

    #: The component as given: ``"policies/p0"`` or ``"policies/p0/weights"``.
    name: str
    #: The policy it belongs to.
    policy_id: str
    #: None for the whole policy, else one of :data:`POLICY_PARTS`.
    part: str | None


def checkpoint_components(policy_ids: Sequence[str]) -> list[str]:
    """Every component name of an Algorithm checkpoint with these policy IDs.

    >>> checkpoint_components(["p0"])
    ['policies/p0', 'policies/p0/weights']
    """
    names = []
    for pid in policy_ids:
        names.append(f"{POLICIES_DIR}/{pid}")
        names.extend(f"{POLICIES_DIR}/{pid}/{part}" for part in POLICY_PARTS)
    return names


def parse_component(component: Any, policy_ids: Sequence[str], where: Any) -> ComponentRef:
    """The component ``component`` names in a checkpoint (``where``) with ``policy_ids``, or
    :class:`~cairn.errors.UnknownComponentError` listing the components it has.

    >>> parse_component("policies/p0/weights", ["p0"], "ckpt")
    ComponentRef(name='policies/p0/weights', policy_id='p0', part='weights')
    """
    parts = component.split("/") if isinstance(component, str) else []
    if (len(parts) in (2, 3) and parts[0] == POLICIES_DIR and parts[1] in policy_ids
            and (len(parts) == 2 or parts[2] in POLICY_PARTS)):
        return ComponentRef(component, parts[1], parts[2] if len(parts) == 3 else None)
    raise UnknownComponentError(
        f"{where} has no component {component!r:.100}; its components are "
        f"{checkpoint_components(policy_ids)}. Pass one of those as component=..., or "
        "component=None for the whole checkpoint."
    )


def _algorithm_policy_ids(checkpoint: CheckpointLike, storage_options: StorageOptions) -> list[str]:
    info = get_checkpoint_info(checkpoint, storage_options=storage_options)
    if info["type"] != "Algorithm":
        raise CheckpointFormatError(
            f"{checkpoint} is a {info['type']} checkpoint; components (policies/<policy_id>) are "
            "parts of Algorithm checkpoints. Load a Policy checkpoint whole "
            "(Policy.from_checkpoint, or policy.set_state)."
        )
    return list(info["policy_ids"])


def load_component(checkpoint: CheckpointLike, component: str, *,
                   storage_options: StorageOptions = None) -> tuple[ComponentRef, dict[str, Any]]:
    """The component ``component`` of the Algorithm checkpoint ``checkpoint`` (a path or a URL,
    ``storage_options`` for its file system): its parsed name and the verified, migrated state
    tree of its policy, read from that policy's files alone.

    Raises :class:`~cairn.errors.UnknownComponentError` (listing the checkpoint's components)
    for a name the checkpoint lacks, before any state file is read.
    """
    ref = parse_component(component, _algorithm_policy_ids(checkpoint, storage_options), checkpoint)
    states = load_policy_states(checkpoint, policy_ids=[ref.policy_id], storage_options=storage_options)
    return ref, states[ref.policy_id]


def component_info(checkpoint: CheckpointLike, component: str, *,
                   storage_options: StorageOptions = None) -> dict[str, Any]:
    """What one component of an Algorithm checkpoint holds, as JSON data.

    ``"policies/<pid>"``: the policy checkpoint's manifest summary
    (:func:`~cairn.checkpoint.get_checkpoint_info` of ``policies/<pid>``; no state is read).
    ``"policies/<pid>/weights"``: ``{"component", "policy_id", "class", "num_parameters",
    "weights": {name: {"shape", "dtype"}}}`` (reads that policy's state files).
    """
    ref = parse_component(component, _algorithm_policy_ids(checkpoint, storage_options), checkpoint)
    if ref.part is None:
        location = f"{str(checkpoint).rstrip('/')}/{POLICIES_DIR}/{ref.policy_id}"
        info = get_checkpoint_info(location, storage_options=storage_options)
        return {"component": ref.name, "policy_id": ref.policy_id, **info}
    _, state = load_component(checkpoint, component, storage_options=storage_options)
    weights: Mapping[str, Any] = state.get("weights") or {}
    return {
        "component": ref.name, "policy_id": ref.policy_id,
        "class": state.get("spec", {}).get("policy_class"),
        "num_parameters": int(sum(getattr(w, "size", 0) for w in weights.values())),
        "weights": {name: {"shape": list(getattr(w, "shape", ())), "dtype": str(getattr(w, "dtype", "?"))}
                    for name, w in weights.items()},
    }
