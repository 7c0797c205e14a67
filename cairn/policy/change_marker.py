"""Change markers: has any part of a policy's state changed since a marker was taken?

An incremental save links an unchanged policy's files from the previous checkpoint
(:mod:`cairn.checkpoint.incremental`). Proving "unchanged" by serialising and hashing the state
costs nearly what writing it costs; a marker answers from what is cheap to read, and answers
"changed" whenever it cannot tell. It has one part per state file of a policy checkpoint:

* **arrays** (``policy_state.safetensors``, plus everything a learner touches): every tensor of
  the policy's networks and of its optimizer's state by identity and torch's version counter
  (every in-place torch operation bumps it, under ``no_grad`` and ``inference_mode`` too, and
  ``load_state_dict`` / ``set_weights`` / ``set_state`` copy in place), the networks' tensors
  also by storage address (``module.double()`` and ``param.data = x`` swap it without a version
  bump), the optimizer's parameters by identity (they are the networks', or not stored); the
  optimizer's identity, its non-tensor state and its number of ``step()`` calls (a post-step
  hook: fused optimizers write parameters and moments without bumping versions);
  ``num_grad_updates``, which every learner counts; the observation filter's state and the
  torch generator's state by value; and the count of :func:`mark_changed` calls.
* **values** (``policy_state.json``): ``global_timestep``, the numpy generator's state (which
  acting advances), the exploration state, the config, the spaces, the optimizer's
  hyperparameters and a subclass's named JSON attributes, compared by value with copies.

A marker is taken right after the state it vouches for was gathered. Comparing it later with
the live policy gives ``"same"`` (link every file), ``"values"`` (only the JSON part may differ:
rewrite it, link the arrays) or ``"changed"``. A policy whose state this module cannot see
through (see :func:`take_marker`) has no marker, and is always written.

The blind spot is a write that bypasses torch's version counter: through a numpy view of a
parameter, or ``tensor.data``, outside a learner step (which counts ``num_grad_updates``).
cairn's own numpy update declares its writes (``torch.autograd.graph.increment_version``);
code of yours that writes a policy's tensors that way calls :func:`mark_changed` afterwards.
"""

from __future__ import annotations

import copy
import operator
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import repeat
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import torch

if TYPE_CHECKING:
    from cairn.policy.policy import Policy

__all__ = ["PolicyMarker", "Verdict", "compare_marker", "mark_changed", "take_marker"]

#: ``"same"``: nothing changed; ``"values"``: only JSON values may have; ``"changed"``: anything.
Verdict = Literal["same", "values", "changed"]

#: torch exposes a tensor's version counter, and a module's own parameters, buffers and
#: submodules (without the generators and name prefixes of ``named_parameters`` and ``modules``,
#: several times slower), only as these.
_version = operator.attrgetter("_version")
_own_tensors = operator.attrgetter("_parameters", "_buffers", "_modules")
_NO_EXTRA_STATE = torch.nn.Module.get_extra_state
_dereference = weakref.ref.__call__
_params = operator.itemgetter("params")
#: Times each optimizer's ``step()`` ran since this module first looked at it.
_STEPS: weakref.WeakKeyDictionary[torch.optim.Optimizer, list[int]] = weakref.WeakKeyDictionary()
#: :func:`mark_changed` calls per policy.
_MARKS: weakref.WeakKeyDictionary[Any, int] = weakref.WeakKeyDictionary()
_PLAIN = (str, int, float, bool, type(None))


def mark_changed(policy: Policy) -> None:
    """Declare that ``policy``'s state changed in a way torch did not see (a write through a
    numpy view of a parameter or ``tensor.data``): its next incremental save writes it whole.

    >>> import gymnasium as gym
    >>> from cairn.policy.policy import Policy
    >>> policy = Policy(gym.spaces.Box(-1, 1, (4,)), gym.spaces.Discrete(2), seed=0)
    >>> policy.model.state_dict()["action_head.bias"].numpy()[:] = 0.0  # torch cannot see this
    >>> mark_changed(policy)
    """
    _MARKS[policy] = _MARKS.get(policy, 0) + 1


@dataclass(frozen=True)
class PolicyMarker:
    """What :func:`compare_marker` compares the live policy with."""

    policy: weakref.ref[Any]
    tensors: tuple[weakref.ref[torch.Tensor], ...]  #: the tensors, in :func:`_tensors`' order
    arrays: tuple[Any, ...]
    values: tuple[Any, ...]
    pending: Any  #: a restored optimizer state not loaded yet (held: its id is in ``arrays``)


def take_marker(policy: Policy, holder: Any, *, modules: Sequence[str] = (),
                values: Sequence[str] = ()) -> PolicyMarker | None:
    """A marker of ``policy``'s state now, or None when this module cannot vouch for it.

    ``holder`` is the policy's :class:`~cairn.policy.lazy_optimizer.LazyOptimizer`;
    ``modules`` names the policy's torch modules besides ``model`` whose state its
    ``get_state`` stores (DQN's ``target_model``), ``values`` its JSON attributes (DQN's
    ``last_target_update``). None when a module keeps extra state (``get_extra_state``), or the
    optimizer or a value holds something other than tensors and plain JSON data.
    """
    found = _tensors(policy, holder, modules)
    live = _values_key(policy, holder, values)
    if found is None or not _plain(live[3:]):
        return None
    return PolicyMarker(weakref.ref(policy), tuple(map(weakref.ref, found[0])),
                        _arrays_key(policy, holder, *found), live[:3] + copy.deepcopy(live[3:]),
                        holder.pending)


def compare_marker(policy: Policy, holder: Any, marker: PolicyMarker, *,
                   modules: Sequence[str] = (), values: Sequence[str] = ()) -> Verdict:
    """Whether ``policy`` may have changed since ``marker`` (taken of it by :func:`take_marker`
    with the same ``modules`` and ``values``)."""
    if marker.policy() is not policy:
        return "changed"
    found = _tensors(policy, holder, modules)
    if found is None or len(found[0]) != len(marker.tensors) or not all(
            map(operator.is_, map(_dereference, marker.tensors), found[0])):
        return "changed"  # another tensor (replaced, or re-created by a restore), or another layout
    if _arrays_key(policy, holder, *found) != marker.arrays:
        return "changed"
    live = _values_key(policy, holder, values)
    if any(a is not b for a, b in zip(live[:3], marker.values[:3])):  # the class and spaces
        return "changed"
    try:
        same = live[3:] == marker.values[3:]
    except Exception:  # e.g. a value whose == is not a bool
        return "changed"
    return "same" if same else "values"


def _tensors(policy: Policy, holder: Any,
             modules: Sequence[str]) -> tuple[list[torch.Tensor], list[Any]] | None:
    """Every tensor of the policy's state (its modules' parameters and buffers, then its
    optimizer's state tensors and parameters), and a list of how many of them are the modules'
    followed by the optimizer state's other values with their names. None when a module keeps
    extra state a marker cannot see, or the optimizer a value that is neither a tensor nor
    plain JSON data. (Called for each of hundreds of policies per save, so written for speed:
    no comprehension, no generator; values(), not state[param]: hashing a tensor runs Python.)"""
    found: list[Any] = []
    stack: list[Any] = [policy.model, *(getattr(policy, name) for name in modules)]
    while stack:  # every submodule (a shared one twice: the same each time)
        module = stack.pop()
        if module is None:
            continue
        if type(module).get_extra_state is not _NO_EXTRA_STATE:
            return None
        parameters, buffers, children = _own_tensors(module)
        found += parameters.values()
        found += buffers.values()
        stack += children.values()
    if any(map(operator.is_, found, repeat(None))):
        found = [tensor for tensor in found if tensor is not None]  # registered as None
    scalars: list[Any] = [len(found)]  # where the modules' tensors end
    optimizer = holder.built
    if optimizer is None:
        return found, scalars
    values: list[Any] = []
    for slots in optimizer.state.values():
        values += slots.values()
    if all(map(isinstance, values, repeat(torch.Tensor))):
        found += values
    else:
        for slots in optimizer.state.values():
            for name, value in slots.items():
                if isinstance(value, torch.Tensor):
                    found.append(value)
                elif isinstance(value, _PLAIN):
                    scalars += (name, value)
                else:
                    return None
    for group in optimizer.param_groups:  # last: only their identities are compared
        found += group["params"]
    return found, scalars


def _arrays_key(policy: Policy, holder: Any, tensors: list[torch.Tensor],
                scalars: list[Any]) -> tuple[Any, ...]:
    """Everything of the arrays part but the tensors' identities (module docstring)."""
    optimizer = holder.built
    key: list[Any] = [policy.num_grad_updates, _MARKS.get(policy, 0), *scalars]
    if optimizer is None:
        key.append(id(holder.pending))  # replaced whole when restored; the marker holds it
    else:
        key += (id(optimizer), _step_count(optimizer))
        # The optimizer's parameters are the model's (compared there) or not stored at all.
        tensors = tensors[:len(tensors) - sum(map(len, map(_params, optimizer.param_groups)))]
    key += map(_version, tensors)
    # Storage addresses of the modules' tensors: ``module.double()`` and ``param.data = x``
    # swap a parameter's storage without bumping its version (nothing swaps an optimizer's).
    key += map(torch.Tensor.data_ptr, tensors[:scalars[0]])
    for value in policy.observation_filter.get_state(copy=False).values():
        key.append((value.dtype.str, value.shape, value.tobytes()) if isinstance(value, np.ndarray)
                   else value)
    key.append(policy.generator.get_state().numpy().tobytes())
    return tuple(key)


def _step_count(optimizer: torch.optim.Optimizer) -> int:
    count = _STEPS.get(optimizer)
    if count is None:
        count = _STEPS[optimizer] = [0]

        def counted(*_: Any, count: list[int] = count) -> None:
            count[0] += 1

        optimizer.register_step_post_hook(counted)
    return count[0]


def _values_key(policy: Policy, holder: Any, values: Sequence[str]) -> tuple[Any, ...]:
    optimizer = holder.built
    groups = None if optimizer is None else [
        {k: v for k, v in group.items() if k != "params"} for group in optimizer.param_groups]
    return (type(policy), policy.observation_space, policy.action_space, policy.config,
            policy.global_timestep, policy.np_random.bit_generator.state,
            policy.get_exploration_state(), groups, *(getattr(policy, name) for name in values))


def _plain(value: Any) -> bool:
    """Plain JSON data (what == compares exactly, and no array hides in)."""
    if isinstance(value, _PLAIN):
        return True
    if isinstance(value, (list, tuple)):
        return all(_plain(v) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and _plain(v) for k, v in value.items())
    return False
