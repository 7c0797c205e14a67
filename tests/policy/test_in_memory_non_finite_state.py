"""An in-memory policy state (a ``get_state()`` tree a user or a Ray actor hands back) holding a
NaN weight or a NaN or infinite optimizer slot (Adam's ``exp_avg_sq``) is refused by
``Algorithm.set_state``, ``Policy.set_state`` and ``Policy.from_state``, as a checkpoint's is
(tests/checkpoint/test_non_finite_state.py): a ValueError naming the policy and the array, and
nothing changed. They used to load it, and the first learning step made every weight NaN (a
NonFiniteLossError that blamed the environment). The per-iteration learner syncs skip the check
(``set_state`` inside ``state_check.finite_checked``): cairn made those states from its own
finite policies."""

from __future__ import annotations

import copy
from typing import Any

import numpy as np
import pytest

import cairn
from tests.helpers import assert_trees_equal, trained_cartpole


def _trained(kind: str) -> cairn.Algorithm:
    return trained_cartpole(kind, 1 if kind == "ppo" else 2)


def _spoiled(policy_state: dict[str, Any], part: str, value: float) -> dict[str, Any]:
    """A deep copy of ``policy_state`` with ``value`` in one entry of ``part``: "moment" (parameter
    1's exp_avg_sq), "weight" (the first weight) or "target" (the target network's first)."""
    spoiled = copy.deepcopy(policy_state)
    if part == "moment":
        spoiled["optimizer"]["state"]["1"]["exp_avg_sq"].reshape(-1)[0] = value
    else:
        tree = spoiled["target"]["weights"] if part == "target" else spoiled["weights"]
        next(iter(tree.values())).reshape(-1)[3] = value
    return spoiled


CASES = [("ppo", "moment", float("nan")), ("ppo", "moment", float("inf")), ("ppo", "weight", float("nan")),
         ("dqn", "moment", float("nan")), ("dqn", "target", float("nan"))]
NAMED = {"moment": "slot 'exp_avg_sq' of parameter 1", "weight": "the weight '",
         "target": "target network weight"}


@pytest.mark.parametrize(("kind", "part", "value"), CASES)
def test_algorithm_set_state_refuses_a_non_finite_policy_state_and_changes_nothing(kind: str, part: str,
                                                                                   value: float) -> None:
    algo = _trained(kind)
    try:
        state = algo.get_state()
        assert "1" in state["policies"]["default_policy"]["optimizer"]["state"]  # moments to spoil
        bad = {**state, "iteration": state["iteration"] + 5,
               "policies": {"default_policy": _spoiled(state["policies"]["default_policy"], part, value)}}
        with pytest.raises(ValueError) as info:
            algo.set_state(bad)
        message = str(info.value)
        assert "policy 'default_policy'" in message and NAMED[part] in message, message
        assert ("inf" if np.isinf(value) else "nan") in message
        assert_trees_equal(algo.get_state(), state)  # nothing changed
        # Under a new ID (it would be added): refused alike, no policy added.
        with pytest.raises(ValueError, match="policy 'other'"):
            algo.set_state({**state, "policies": {"other": bad["policies"]["default_policy"]}})
        assert list(algo.policies) == ["default_policy"]
        assert_trees_equal(algo.get_state(), state)
        algo.set_state(state)  # and the next calls work
        algo.train()
    finally:
        algo.stop()


@pytest.mark.parametrize(("kind", "part", "value"), CASES)
def test_policy_set_state_and_from_state_refuse_a_non_finite_state(kind: str, part: str,
                                                                   value: float) -> None:
    algo = _trained(kind)
    try:
        policy = algo.get_policy()
        state = policy.get_state()
        bad = _spoiled(state, part, value)
        with pytest.raises(ValueError, match=NAMED[part]):
            policy.set_state(bad)
        assert_trees_equal(policy.get_state(), state)
        with pytest.raises(ValueError, match=NAMED[part]):
            cairn.Policy.from_state(bad)
        with pytest.raises(ValueError, match=NAMED[part]):
            cairn.Policy.from_state(copy.deepcopy(bad), copy=False)
        policy.set_state(state)
        assert_trees_equal(cairn.Policy.from_state(state).get_state(), state)
        algo.train()
    finally:
        algo.stop()


def test_infinite_weights_stay_allowed_in_memory_as_in_checkpoints() -> None:
    """+-inf in a weight is allowed (a buffer such as an attention mask of -inf), as at restore."""
    from cairn.policy.state_check import check_finite_policy_state

    algo = _trained("ppo")
    try:
        state = algo.get_policy().get_state()
        check_finite_policy_state(_spoiled(state, "weight", float("-inf")), "The policy state")
        with pytest.raises(ValueError, match=r"The policy state: the weight '.*' holds 1 NaN value\(s\)"):
            check_finite_policy_state(_spoiled(state, "weight", float("nan")), "The policy state")
    finally:
        algo.stop()
