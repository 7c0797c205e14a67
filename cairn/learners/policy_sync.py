"""What travels between the driver and its learners, and when (:mod:`cairn.learners.group`).

A learner (a device copy in the driver's process, or DDP Ray actors) is lent a policy's whole
state with the policy's first update of an iteration and owns its training state until the
loan ends. After every update only the network weights come back (the driver's env runners
act with them, and off-policy algorithms act between gradient steps); the parts only learning
changes (:data:`LEARNED_PARTS`: optimizer state, the torch generator that draws SAC's noise,
``num_grad_updates``) come back when the loan ends.

A loan is not a restore: where :meth:`~cairn.policy.policy.Policy.set_state` gives the optimizer
the learning rates of the policy's config, a loan keeps the ones its optimizer state holds
(:func:`keep_learning_rates`), so that a rate written into the driver's ``param_groups`` (torch's
own way) is learnt with, as learning on the driver's policy does.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from cairn.policy.policy import Policy

__all__ = ["LEARNED_PARTS", "keep_learning_rates", "learned_parts", "with_learned_parts"]

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


def keep_learning_rates(policy: Policy, optimizer_state: Mapping[str, Any]) -> None:
    """Give ``policy``'s optimizer (built now) the learning rate of each parameter group of
    ``optimizer_state`` (a policy state's ``optimizer`` entry, taken from a built optimizer:
    those it stepped with), which :meth:`~cairn.policy.policy.Policy.set_state` replaced with the
    config's."""
    groups = policy.optimizer.param_groups
    for group, saved in zip(groups, optimizer_state["param_groups"], strict=True):
        group["lr"] = saved["lr"]
