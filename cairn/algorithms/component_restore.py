"""Restoring one component of a checkpoint into a live algorithm (RLlib's ``restore_from_path``).

``algo.restore_from_path(path, component="policies/p1")`` loads policy ``p1``'s whole state
(weights, optimizer, observation filter, counters, exploration and random generators) from
the checkpoint; ``component="policies/p1/weights"`` its network parameters alone;
``component=None`` everything, exactly as ``algo.restore(path)`` (the Algorithm's
:class:`~cairn.algorithms.checkpointer.AlgorithmCheckpointer` sends that there). Only that
policy's files are read (:mod:`cairn.checkpoint.components`), and nothing else of ``algo`` changes: its other
policies, its counters, iteration, random generator and env runners keep their state. Remote
env runners get the restored weights and filter with the next ``sample()``'s broadcast.

The stored policy must be the live one's kind: the same policy class, observation and action
spaces, and network (names and shapes of the weights); anything else is refused with
:class:`~cairn.errors.CheckpointClassMismatchError` or
:class:`~cairn.errors.CheckpointFormatError` before ``algo`` changes. The live policy keeps its
own config (``lr`` and the rest).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from cairn.checkpoint import restoring
from cairn.checkpoint.components import load_component
from cairn.checkpoint.manager import resolve_checkpoint
from cairn.checkpoint.reference_scope import loading_checkpoint
from cairn.errors import CheckpointClassMismatchError, CheckpointFormatError, UnknownPolicyIdError
from cairn.policy.policy import Policy
from cairn.policy.state_check import check_policy_state, finite_checked
from cairn.registry import resolve_class
from cairn.space_json import space_from_json

__all__ = ["restore_policy_component"]


def restore_policy_component(policies: Mapping[str, Policy], path: Any, component: str, *,
                             storage_options: Mapping[str, Any] | None = None) -> None:
    """Behind :meth:`Algorithm.restore_from_path
    <cairn.algorithms.algorithm.Algorithm.restore_from_path>`: load ``component`` of the
    checkpoint ``path`` (a directory, a URL with ``storage_options``, or a
    :class:`~cairn.CheckpointManager` root, meaning its latest checkpoint) into the live
    policy of its ID among ``policies``, in place.

    Args:
        component: ``"policies/<policy_id>"`` (the policy's whole state) or
            ``"policies/<policy_id>/weights"`` (its network parameters).

    Raises:
        UnknownComponentError: the checkpoint has no such component (the message lists its
            components).
        UnknownPolicyIdError: ``policies`` has no policy of that ID.
        CheckpointClassMismatchError: the stored policy's class or spaces differ from the live
            policy's.
        CheckpointFormatError: its network (weight names or shapes) differs.
    """
    with loading_checkpoint(path, storage_options):  # references: never code from inside it
        path = resolve_checkpoint(path, storage_options=storage_options)
        ref, state = load_component(path, component, storage_options=storage_options)
        where = f"{path} (component {ref.name!r})"
        check_policy_state(state, where, base=Policy)
        if ref.policy_id not in policies:
            raise UnknownPolicyIdError(
                f"{where}: this algorithm has no policy {ref.policy_id!r} to restore it into; its "
                f"policies are {sorted(policies)}. Add it first (algo.add_policy), or build the "
                "algorithm from the checkpoint (Algorithm.from_checkpoint(path, policy_ids=[...]))."
            )
        policy = policies[ref.policy_id]
        _check_same_kind(policy, state, where)
        with restoring(where):
            if ref.part == "weights":
                policy.set_weights(state["weights"])
            else:
                with finite_checked(state):  # check_policy_state did
                    policy.set_state(state)


def _check_same_kind(policy: Policy, state: Mapping[str, Any], where: str) -> None:
    """Refuse a stored policy that is not the live ``policy``'s kind, before anything changes."""
    spec = state["spec"]
    stored = resolve_class(spec["policy_class"], Policy)
    if stored is not type(policy):
        raise CheckpointClassMismatchError(
            f"{where} holds a {stored.__name__} policy, but the live policy is a "
            f"{type(policy).__name__}: a component restores only into a policy of its own class. "
            "Use Policy.from_checkpoint on policies/<policy_id> to build the stored one."
        )
    for key, live in (("observation_space", policy.observation_space), ("action_space", policy.action_space)):
        saved = space_from_json(spec[key])
        if saved != live:
            raise CheckpointClassMismatchError(
                f"{where} was saved with {key} {saved}, but the live policy has {live}: its "
                "network does not fit. Restore it into a policy built for the same spaces."
            )
    live_shapes = {name: tuple(w.shape) for name, w in policy.get_weights().items()}
    saved_shapes = {name: tuple(np.shape(w)) for name, w in state["weights"].items()}
    if saved_shapes != live_shapes:
        differing = sorted(name for name in live_shapes.keys() | saved_shapes.keys()
                           if live_shapes.get(name) != saved_shapes.get(name))
        raise CheckpointFormatError(
            f"{where}: its network differs from the live policy's (weights {differing[:5]} differ "
            "in name or shape: another model config, e.g. 'hidden'). Restore it into a policy "
            "built with the checkpoint's model config."
        )
