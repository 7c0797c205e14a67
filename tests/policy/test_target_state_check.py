"""A policy with a target network (DQN, APPO) refuses a state whose target part does not fit
before anything changes: set_state used to load the online weights, the filter and the
optimizer first and then raise on the target's shapes, leaving a half-restored policy."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import pytest

from cairn.algorithms.dqn.dqn_policy import DQNPolicy
from cairn.algorithms.impala.appo_policy import APPOPolicy
from cairn.policy.policy import Policy

OBS, ACT = gym.spaces.Box(-1.0, 1.0, (3,), np.float32), gym.spaces.Discrete(2)


def _pair(cls: type[Policy]) -> tuple[Policy, Policy]:
    config = {"model": {"hidden": [8]}}
    return cls(OBS, ACT, config, seed=0), cls(OBS, ACT, config, seed=1)


def _broken_targets(state: dict[str, Any]) -> list[dict[str, Any]]:
    weights = state["target"]["weights"]
    name = next(iter(weights))
    wrong_shape = {**weights, name: np.zeros((*weights[name].shape, 2), np.float32)}
    missing = {k: v for k, v in weights.items() if k != name}
    no_target = {k: v for k, v in state.items() if k != "target"}
    no_counter = {**state, "target": {"weights": weights}}
    return [{**state, "target": {**state["target"], "weights": wrong_shape}},
            {**state, "target": {**state["target"], "weights": missing}}, no_target, no_counter]


def _everything(policy: Policy) -> dict[str, Any]:
    state = policy.get_state()
    return {"weights": state["weights"], "target": state["target"]["weights"],
            "counters": state["counters"], "filter": state["observation_filter"]}


def _assert_same(a: dict[str, Any], b: dict[str, Any]) -> None:
    for part in ("weights", "target"):
        assert a[part].keys() == b[part].keys()
        for name in a[part]:
            np.testing.assert_array_equal(a[part][name], b[part][name])
    assert a["counters"] == b["counters"]


@pytest.mark.parametrize("cls", [DQNPolicy, APPOPolicy])
def test_a_state_with_a_broken_target_is_refused_before_anything_changes(cls):
    policy, other = _pair(cls)
    other.global_timestep = 123
    good = other.get_state()
    before = _everything(policy)
    for broken in _broken_targets(good):
        with pytest.raises((ValueError, KeyError, TypeError)):
            policy.check_state(broken)
        with pytest.raises((ValueError, KeyError, TypeError)):
            policy.set_state(broken)
        _assert_same(_everything(policy), before)  # nothing changed: not the online weights either
    policy.set_state(good)  # and a valid state still restores
    _assert_same(_everything(policy), _everything(other))
