"""What a policy's learners own, and when it travels between the driver and them.

A learner (a device copy in the driver's process, or DDP Ray actors) keeps its copy of each
policy between updates instead of receiving the whole state for every gradient step. Per
update only the network weights come back (the driver's env runners act with them, and
off-policy algorithms act between gradient steps); the parts only learning changes
(:data:`LEARNED_PARTS`: optimizer state, the torch generator that draws SAC's noise,
``num_grad_updates``) come back once per iteration, when the driver's state is read (saves,
``get_state``) and before the learners stop.

The driver's state goes to the learners again only when the driver changed what they hold:
another policy object under the ID (added, replaced), weights or a DQN target network written
on the driver (a restore, ``set_weights``, a target sync), or its optimizer restored or
re-tuned. :func:`driver_key` tells, cheaply enough to ask every gradient step.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from cairn._compat.torch_internals import version_counter

__all__ = ["LEARNED_PARTS", "driver_key", "learned_parts", "with_learned_parts"]

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


def _tensors_key(modules: list[torch.nn.Module]) -> tuple[Any, ...]:
    # Every in-place write bumps a tensor's version counter (load_weights declares its numpy
    # copies); identities and storage addresses catch a replaced tensor.
    return tuple((id(t), t.data_ptr(), version_counter(t)) for module in modules
                 for t in (*module.parameters(), *module.buffers()))


def driver_key(policy: Any) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
    """``(weights_key, optimizer_key)`` of the driver's ``policy``: equal keys mean the driver
    did not change the weights (its networks', a DQN target's included) or the optimizer
    (restored, replaced, re-tuned) since they were taken."""
    modules = [policy.model]
    target = getattr(policy, "target_model", None)
    if isinstance(target, torch.nn.Module):
        modules.append(target)
    holder = policy.optimizer_holder
    optimizer = holder.built
    optimizer_key: tuple[Any, ...] = (id(holder.pending), id(optimizer), policy.num_grad_updates)
    if optimizer is not None:
        optimizer_key += tuple(
            (id(value), version_counter(value)) for slots in optimizer.state.values()
            for value in slots.values() if isinstance(value, torch.Tensor))
        optimizer_key += tuple(repr({k: v for k, v in group.items() if k != "params"})
                               for group in optimizer.param_groups)
    return (id(policy), *_tensors_key(modules)), optimizer_key
