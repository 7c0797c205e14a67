"""A policy's optimizer, built on first use, with a restored state waiting for it.

Constructing a torch optimizer imports ``torch._dynamo`` (about a second), which a policy
restored only to act never needs. So a restored optimizer state is checked against the
network when it is restored, kept as a pending state tree, and loaded when the optimizer is
first built; saving a policy whose optimizer was never built writes the pending tree back.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch

from cairn.policy.optimizer_state import (
    check_optimizer_tree,
    copy_optimizer_tree,
    optimizer_state_from_tree,
    optimizer_state_to_tree,
)

__all__ = ["LazyOptimizer"]


class LazyOptimizer:
    """Holds a policy's optimizer once built, and until then any restored state for it.

    The policy passes its ``make_optimizer`` and configured learning rate to each call that
    may build, so that this holder keeps no reference back to the policy.
    """

    def __init__(self) -> None:
        self.built: torch.optim.Optimizer | None = None
        self.pending: Mapping[str, Any] | None = None

    def get(self, make_optimizer: Callable[[], torch.optim.Optimizer], *, lr: float) -> torch.optim.Optimizer:
        """The optimizer, built with ``make_optimizer`` and any pending state on first use."""
        if self.built is None:
            optimizer = make_optimizer()
            pending, self.pending = self.pending, None
            if pending is not None:  # owned by the policy: its arrays become the state
                optimizer_state_from_tree(optimizer, pending, copy=False)
            self.built = optimizer
            self.set_learning_rate(lr)  # the config's lr wins (it may be overridden)
        return self.built

    def set(self, optimizer: torch.optim.Optimizer) -> None:
        """Use ``optimizer`` from now on, dropping any pending state."""
        self.built, self.pending = optimizer, None

    def set_learning_rate(self, lr: float) -> None:
        """Set a built optimizer's learning rate (one built later takes it from ``get``)."""
        if self.built is not None:
            for group in self.built.param_groups:
                group["lr"] = lr

    def state_tree(
        self, make_optimizer: Callable[[], torch.optim.Optimizer], *, lr: float, copy: bool
    ) -> dict[str, Any]:
        """The optimizer's state tree, without building an optimizer that was never used."""
        pending = self.pending
        if self.built is None and pending is not None:
            return copy_optimizer_tree(pending) if copy else dict(pending)
        return optimizer_state_to_tree(self.get(make_optimizer, lr=lr), copy=copy)

    def restore(self, tree: Mapping[str, Any], params: Sequence[torch.Tensor], *, adopt: bool) -> None:
        """Restore a state tree over ``params`` (checked now, loaded when built).

        ``adopt=True``: the tree's arrays are the policy's own (``from_state(copy=False)``)
        and become the optimizer's storage; otherwise they are copied. A built optimizer gets
        the saved learning rate: the policy then sets its configured one.
        """
        if self.built is None:
            check_optimizer_tree(tree, params, num_groups=1)
            self.pending = tree if adopt else copy_optimizer_tree(tree)
        else:
            optimizer_state_from_tree(self.built, tree, copy=not adopt)
