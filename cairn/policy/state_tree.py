"""A policy's state tree: what :meth:`~cairn.policy.policy.Policy.get_state` writes and
:meth:`~cairn.policy.policy.Policy.set_state` reads besides the network and the optimizer.

The layout is the one docs/checkpoint-format.md (section 5) specifies and
:func:`cairn.policy.state_check.check_policy_state` checks: ``spec``, ``weights``,
``optimizer``, ``observation_filter``, ``counters``, ``exploration`` and ``rng``. The policy
module gathers the weights and optimizer trees itself (it owns the lazy optimizer); this
module lays out and restores the rest, and seeds the two random generators whose state
``rng`` holds.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

import numpy as np
import torch

from cairn.policy.filters import MeanStdFilter, NoFilter
from cairn.policy.spec import PolicySpec
from cairn.rng import make_rng

__all__ = ["PolicyTrainingState", "make_generators", "policy_state_tree", "restore_policy_state_tree"]


class PolicyTrainingState(Protocol):
    """What this module lays out and restores of a :class:`~cairn.policy.policy.Policy` (which
    imports it): the spec, filter, counters, exploration and the two generators."""

    global_timestep: int
    num_grad_updates: int
    generator: torch.Generator
    np_random: np.random.Generator

    @property
    def spec(self) -> PolicySpec: ...
    @property
    def observation_filter(self) -> NoFilter | MeanStdFilter: ...

    def get_exploration_state(self) -> dict[str, Any]: ...

    def set_exploration_state(self, state: Mapping[str, Any]) -> None: ...


def make_generators(seed: int | None) -> tuple[torch.Generator, np.random.Generator]:
    """The policy's torch generator and numpy generator, from ``seed`` (None: fresh entropy).

    torch's generator initialises weights; numpy's samples actions in the sampling loop.
    """
    generator = torch.Generator()
    if seed is None:
        generator.seed()
    else:
        generator.manual_seed(int(seed) % (2**63))
    np_random = np.random.default_rng(None if seed is None else [int(seed) % (2**63), 7])
    return generator, np_random


def policy_state_tree(
    policy: PolicyTrainingState, *, weights: dict[str, np.ndarray], optimizer: dict[str, Any]
) -> dict[str, Any]:
    """The state tree of ``policy``, given its ``weights`` and ``optimizer`` trees."""
    return {
        "spec": policy.spec.to_dict(),
        "weights": weights,
        "optimizer": optimizer,
        "observation_filter": policy.observation_filter.get_state(),
        "counters": {
            "global_timestep": policy.global_timestep,
            "num_grad_updates": policy.num_grad_updates,
        },
        "exploration": policy.get_exploration_state(),
        "rng": {
            "torch": policy.generator.get_state().numpy().copy(),
            "numpy": policy.np_random.bit_generator.state,
        },
    }


def restore_policy_state_tree(policy: PolicyTrainingState, state: Mapping[str, Any]) -> None:
    """Restore everything in ``state`` but its weights and optimizer into ``policy``."""
    filter_state = state["observation_filter"]
    if filter_state.get("name") != policy.observation_filter.name:
        raise ValueError(
            f"State has observation filter {filter_state.get('name')!r}, this policy uses "
            f"{policy.observation_filter.name!r}."
        )
    policy.observation_filter.set_state(filter_state)
    counters = state["counters"]
    policy.global_timestep = int(counters["global_timestep"])
    policy.num_grad_updates = int(counters["num_grad_updates"])
    policy.set_exploration_state(state.get("exploration") or {})
    rng = np.asarray(state["rng"]["torch"], dtype=np.uint8)
    policy.generator.set_state(torch.from_numpy(rng.copy()))
    policy.np_random = make_rng(state["rng"]["numpy"])
