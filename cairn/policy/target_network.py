"""Target networks: frozen copies of networks, moved towards them by a hard copy or a Polyak step.

One mechanism for every algorithm's targets. A target is :func:`frozen` (no gradients, eval mode
always: a user's ``Dropout`` does not draw in it and a ``BatchNorm`` reads the statistics it was
copied with, as SB3 keeps its targets). Two holders own targets:

- :class:`TargetNetworkPolicy`: a policy with a target copy of its whole network (DQN's and
  APPO's ``target_model``), updated by a hard copy and saved in the policy state's ``target``
  with the numbers the subclass keeps there.
- :class:`TargetParts`: a model whose parts include targets of its other parts (SAC's
  ``target_critic``, TD3's ``target_actor`` and ``target_critic``), updated by
  :func:`polyak_update` and saved with the model's weights.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar, Self, TypeVar

import numpy as np
import torch
from torch import nn

from cairn._compat.torch_internals import foreach_lerp_
from cairn.policy.policy import Policy
from cairn.policy.weights import check_weights, load_weights, weights_to_numpy

__all__ = ["TargetNetworkPolicy", "TargetParts", "frozen", "polyak_update"]

ModuleT = TypeVar("ModuleT", bound=nn.Module)


def frozen(module: ModuleT) -> ModuleT:
    """``module`` made a target: no gradients, eval mode (its holder keeps it there)."""
    module.requires_grad_(False)
    module.train(False)
    return module


def polyak_update(targets: Sequence[nn.Module], sources: Sequence[nn.Module], tau: float) -> None:
    """Each target network towards its source: parameters ``target <- (1 - tau) * target + tau *
    source``, and buffers (a user's ``BatchNorm`` running statistics) copied, as SB3 copies them
    (its ``polyak_update`` of the batch-norm statistics with ``tau=1``): a target runs in eval mode,
    where a ``BatchNorm`` normalises by these statistics, and its own passes never move them."""
    with torch.no_grad():
        foreach_lerp_([p for t in targets for p in t.parameters()],
                      [p for s in sources for p in s.parameters()], tau)
        for target, source in zip(targets, sources, strict=True):
            for kept, moved in zip(target.buffers(), source.buffers(), strict=True):
                kept.copy_(moved)


class TargetParts(nn.Module):
    """A model holding targets of some of its parts (:attr:`target_sources`), so that its weights
    tree (and so its checkpoint) has them: they stay in eval mode whatever mode the model is put
    in, start as copies (:meth:`copy_targets`) and follow by :meth:`update_targets`."""

    #: ``{target part: its source part}``, by attribute name.
    target_sources: ClassVar[Mapping[str, str]]

    def train(self, mode: bool = True) -> Self:
        """``mode`` for the model; its targets stay in eval mode."""
        super().train(mode)
        for name in self.target_sources:
            self.get_submodule(name).train(False)
        return self

    def copy_targets(self) -> None:
        """Each target a copy of its source (after the sources' initialisation)."""
        for target, source in self.target_sources.items():
            self.get_submodule(target).load_state_dict(self.get_submodule(source).state_dict())

    def update_targets(self, tau: float) -> None:
        """Polyak averaging of the targets: ``target <- (1 - tau) * target + tau * source``;
        buffers copied (:func:`polyak_update`)."""
        polyak_update([self.get_submodule(name) for name in self.target_sources],
                      [self.get_submodule(name) for name in self.target_sources.values()], tau)


class TargetNetworkPolicy(Policy):
    """A :class:`~cairn.policy.Policy` with a target network: :attr:`target_model`, a frozen copy
    of :attr:`model` that :meth:`update_target` copies the network into. Its weights and the
    numbers named in :attr:`target_numbers` are the policy state's ``target``, so a checkpoint
    resumes exactly and a policy restored alone can go on training."""

    #: A frozen copy of :attr:`model` (:func:`frozen`).
    target_model: nn.Module
    #: The numbers kept with the target weights: ``{key in state["target"]: (attribute, type)}``.
    target_numbers: ClassVar[Mapping[str, tuple[str, Callable[[Any], float]]]] = {}

    def finish_setup(self) -> None:
        # A copy of the (initialised, or still empty when restoring) network: a restore
        # overwrites both from the saved state.
        self.target_model = frozen(copy.deepcopy(self.model))

    def networks(self) -> list[nn.Module]:
        return [self.model, self.target_model]

    def update_target(self) -> None:
        """Copy the network's weights into the target network."""
        self.target_model.load_state_dict(self.model.state_dict())

    def get_state(self, *, copy: bool = True) -> dict[str, Any]:
        state = super().get_state(copy=copy)
        state["target"] = {"weights": weights_to_numpy(self.target_model, copy=copy),
                           **{key: getattr(self, name) for key, (name, _) in self.target_numbers.items()}}
        return state

    def check_state(self, state: Mapping[str, Any]) -> None:
        """:meth:`Policy.check_state`, and the target part (``state["target"]``): weights that
        fit the target network and each of :attr:`target_numbers`, so that a state refused for
        its target changes nothing (not the online weights either)."""
        super().check_state(state)
        target = state.get("target")
        if not isinstance(target, Mapping) or not isinstance(target.get("weights"), Mapping):
            raise ValueError("The policy state has no target network weights (state['target']['weights']); "
                             "it is not a state of this policy class.")
        try:
            check_weights(self.target_model, target["weights"])
        except ValueError as exc:
            raise ValueError(f"Target network: {exc}") from None
        for key in self.target_numbers:
            value = target.get(key)
            if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
                raise ValueError(f"The policy state's target[{key!r}] must be a number, got {value!r:.60}.")

    def set_state(self, state: Mapping[str, Any]) -> None:
        super().set_state(state)
        target = state["target"]
        load_weights(self.target_model, target["weights"])
        for key, (name, kind) in self.target_numbers.items():
            setattr(self, name, kind(target[key]))
