"""A policy's training state: what it keeps beside its network to go on learning exactly.

:class:`PolicyTrainingState` owns the optimizer, the observation filter's statistics, the two
random generators and the counters, with one ``get_state`` / ``set_state`` for their part of the
policy's state tree (docs/checkpoint-format.md, section 5); the policy adds ``spec``, ``weights``
and ``exploration``. ``policy.generator``, ``np_random``, ``global_timestep`` and
``num_grad_updates`` are this state's (:class:`TrainingStateField`).

The optimizer is built on first use: constructing a torch optimizer imports ``torch._dynamo``
(about a second), which a policy restored only to act never needs. A restored optimizer state is
checked against the network at once and loaded when the optimizer is built; saving before then
writes it back. The policy passes its ``make_optimizer`` and learning rate to each call that may
build, so that this state keeps no reference back to the policy.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Generic, Protocol, TypeVar

import numpy as np
import torch

from cairn.policy.filters import MeanStdFilter, NoFilter
from cairn.policy.optimizer_state import (
    check_optimizer_tree,
    copy_optimizer_tree,
    optimizer_state_from_tree,
    optimizer_state_to_tree,
)
from cairn.rng import make_rng, policy_sampling_rng

__all__ = ["PolicyTrainingState", "TrainingStateField", "seeded_generators", "seeded_generators_state"]

MakeOptimizer = Callable[[], torch.optim.Optimizer]
T = TypeVar("T")


def seeded_generators(seed: int | None) -> tuple[torch.Generator, np.random.Generator]:
    """A new policy's torch and numpy generators, seeded by ``seed`` (None: fresh entropy)."""
    generator = torch.Generator()
    if seed is None:
        generator.seed()
    else:
        generator.manual_seed(int(seed) % (2**63))
    return generator, policy_sampling_rng(None if seed is None else int(seed) % (2**63))


def seeded_generators_state(seed: int | None) -> dict[str, Any]:
    """The ``rng`` entry of a policy state (:meth:`PolicyTrainingState.get_state`) of generators
    seeded by ``seed`` as a new policy's are: to give a copy of a policy generators of its own."""
    generator, np_random = seeded_generators(seed)
    return {"torch": generator.get_state().numpy().copy(), "numpy": np_random.bit_generator.state}


class PolicyTrainingState:
    """The optimizer, observation filter, generators and counters of one policy.

    ``observation_filter`` is the filter the policy's acting path applies (the same object);
    ``seed`` seeds both generators (None: fresh entropy): torch's initialises weights and draws
    SAC's and TD3's noise, numpy's samples actions in the sampling loop.
    """

    def __init__(self, observation_filter: NoFilter | MeanStdFilter, *, seed: int | None) -> None:
        self.observation_filter = observation_filter
        self.generator, self.np_random = seeded_generators(seed)
        #: Env steps acted with this policy, and optimizer steps taken on it.
        self.global_timestep = 0
        self.num_grad_updates = 0
        #: The optimizer once built, and until then any restored state waiting for it.
        self.built_optimizer: torch.optim.Optimizer | None = None
        self.pending_optimizer_state: Mapping[str, Any] | None = None

    # ------------------------------------------------------------------------------ optimizer
    def optimizer(self, make_optimizer: MakeOptimizer, *, lr: float) -> torch.optim.Optimizer:
        """The optimizer, built with ``make_optimizer`` and any pending state on first use."""
        if self.built_optimizer is None:
            optimizer = make_optimizer()
            pending, self.pending_optimizer_state = self.pending_optimizer_state, None
            if pending is not None:  # owned by the policy: its arrays become the state
                optimizer_state_from_tree(optimizer, pending, copy=False)
            self.built_optimizer = optimizer
            self.set_learning_rate(lr)  # the config's lr wins (it may be overridden)
        return self.built_optimizer

    def set_optimizer(self, optimizer: torch.optim.Optimizer) -> None:
        """Use ``optimizer`` from now on, dropping any pending state."""
        self.built_optimizer, self.pending_optimizer_state = optimizer, None

    def set_learning_rate(self, lr: float) -> None:
        """Set a built optimizer's learning rate (one built later takes it from :meth:`optimizer`)."""
        if self.built_optimizer is not None:
            for group in self.built_optimizer.param_groups:
                group["lr"] = lr

    # ---------------------------------------------------------------------------------- state
    def get_state(self, make_optimizer: MakeOptimizer, *, lr: float, copy: bool,
                  exploration: dict[str, Any]) -> dict[str, Any]:
        """The state tree's ``optimizer``, ``observation_filter``, ``counters``, ``exploration``
        (the policy's, given) and ``rng`` entries, in that order; ``copy=False`` may give views
        of the live optimizer arrays. An optimizer never built is not built for it."""
        pending = self.pending_optimizer_state
        if self.built_optimizer is None and pending is not None:
            optimizer = copy_optimizer_tree(pending) if copy else dict(pending)
        else:
            optimizer = optimizer_state_to_tree(self.optimizer(make_optimizer, lr=lr), copy=copy)
        return {
            "optimizer": optimizer,
            "observation_filter": self.observation_filter.get_state(),
            "counters": {"global_timestep": self.global_timestep, "num_grad_updates": self.num_grad_updates},
            "exploration": exploration,
            "rng": {"torch": self.generator.get_state().numpy().copy(),
                    "numpy": self.np_random.bit_generator.state},
        }

    def check_state(self, state: Mapping[str, Any], params: Sequence[torch.Tensor]) -> None:
        """Raise ValueError when ``state`` cannot be restored here (an optimizer tree that does
        not fit ``params``, a filter of another kind), so that a policy checks it before it
        changes anything (weights included) and a refused state leaves it as it was."""
        if self.built_optimizer is None:
            check_optimizer_tree(state["optimizer"], params, num_groups=1)
        else:
            own = [p for group in self.built_optimizer.param_groups for p in group["params"]]
            check_optimizer_tree(state["optimizer"], own, num_groups=len(self.built_optimizer.param_groups))
        filter_name = state["observation_filter"].get("name")
        if filter_name != self.observation_filter.name:
            raise ValueError(f"State has observation filter {filter_name!r}, this policy uses "
                             f"{self.observation_filter.name!r}.")
        self.observation_filter.check_state(state["observation_filter"])

    def set_state(self, state: Mapping[str, Any], params: Sequence[torch.Tensor], *, adopt: bool) -> None:
        """Restore :meth:`get_state`'s entries but ``exploration`` (the policy's own).

        The optimizer state is checked against ``params`` (the network's, in order) now and
        loaded when the optimizer is built; ``adopt=True``: its arrays are the policy's own
        (``from_state(copy=False)``) and become the optimizer's storage, otherwise they are
        copied. A built optimizer gets the saved learning rate: the policy then sets its
        configured one. A filter of another kind than this policy's is a ValueError.
        """
        self.check_state(state, params)
        tree = state["optimizer"]
        if self.built_optimizer is None:
            self.pending_optimizer_state = tree if adopt else copy_optimizer_tree(tree)
        else:
            optimizer_state_from_tree(self.built_optimizer, tree, copy=not adopt)
        filter_state = state["observation_filter"]
        self.observation_filter.set_state(filter_state)
        counters = state["counters"]
        self.global_timestep = int(counters["global_timestep"])
        self.num_grad_updates = int(counters["num_grad_updates"])
        self.generator.set_state(torch.from_numpy(np.asarray(state["rng"]["torch"], dtype=np.uint8).copy()))
        self.np_random = make_rng(state["rng"]["numpy"])


class _HasTrainingState(Protocol):
    training: PolicyTrainingState


class TrainingStateField(Generic[T]):
    """A policy attribute whose value its :class:`PolicyTrainingState` keeps: ``policy.x`` reads
    and writes ``policy.training.x`` (``policy.num_grad_updates += 1`` counts in the one owner)."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, policy: _HasTrainingState | None, owner: type | None = None) -> T:
        if policy is None:  # read on the class (help(), inspect): the field itself
            return self  # type: ignore[return-value]
        return getattr(policy.training, self.name)  # type: ignore[no-any-return]

    def __set__(self, policy: _HasTrainingState, value: T) -> None:
        setattr(policy.training, self.name, value)
