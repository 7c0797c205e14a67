"""What travels between the driver and its learners, and when (:mod:`cairn.learners.group`).

A learner (a device copy in the driver's process, or DDP Ray actors) is lent a policy's whole
state with the policy's first update of an iteration and owns its training state until the
loan ends. After every update only the network weights come back (the driver's env runners
act with them, and off-policy algorithms act between gradient steps); the parts only learning
changes (:data:`LEARNED_PARTS`: optimizer state, the torch generator that draws SAC's noise,
``num_grad_updates``) come back when the loan ends.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["LEARNED_PARTS", "learned_parts", "with_learned_parts"]

#: The parts of ``Policy.get_state()`` only learning changes, as (key, sub-key or None).
LEARNED_PARTS = (("optimizer", None), ("rng", "torch"), ("counters", "num_grad_updates"))


def learned_parts(state: Mapping[str, Any]) -> dict[str, Any]:
    """The :data:`LEARNED_PARTS` of a policy state, keyed ``"key"`` or ``"key/sub"``."""
    return {key if sub is None else f"{key}/{sub}": state[key] if sub is None else state[key][sub]
            for key, sub in LEARNED_PARTS}


def with_learned_parts(state: Mapping[str, Any], parts: Mapping[str, Any]) -> dict[str, Any]:
    """``state`` (a policy state) with its learned parts replaced by ``parts``."""
    merged = dict(state)
    for key, sub in LEARNED_PARTS:
        if sub is None:
            merged[key] = parts[key]
        else:
            merged[key] = {**state[key], sub: parts[f"{key}/{sub}"]}
    return merged
