"""Box actions stay inside float64 bounds that float32 cannot hold, in the policy and in every export.

A ``Box(-0.1, 0.1, dtype=float64)`` has bounds no float32 equals: a network's float32 action
clipped to ``float32(0.1) = 0.10000000149...`` and then cast to float64 lies outside the space.
The policy's actions (greedy and sampled) and the exported models' actions must lie inside
it, and the exports must still give exactly the policy's actions.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch

import cairn
from cairn.algorithms.sac.sac_policy import SACPolicy
from cairn.algorithms.td3.td3_policy import TD3Policy
from cairn.export import model_inputs

OBS = gym.spaces.Box(-1.0, 1.0, (3,))
# 0.1, -0.3 and 0.7 have no float32 twin; the third component's bounds are float32-exact.
ACTIONS = gym.spaces.Box(np.array([-0.1, -0.3, -1.0]), np.array([0.1, 0.7, 1.0]), dtype=np.float64)


def _saturated(policy: cairn.Policy) -> cairn.Policy:
    """Weights scaled up so that the actions reach (and pass) the bounds."""
    with torch.no_grad():
        for parameter in policy.model.parameters():
            parameter.mul_(50.0)
    return policy


POLICIES = {
    "ppo": lambda: _saturated(cairn.Policy(OBS, ACTIONS, {"model": {"hidden": [8]}}, seed=0)),
    "sac": lambda: _saturated(SACPolicy(OBS, ACTIONS, {"model": {"hidden": [8]}}, seed=0)),
    "td3": lambda: _saturated(TD3Policy(OBS, ACTIONS, {"model": {"hidden": [8]}}, seed=0)),
}


def _observations(n: int) -> list[Any]:
    space = gym.spaces.Box(-1.0, 1.0, (3,), seed=3)
    return [space.sample() for _ in range(n)]


def _inside(actions: np.ndarray) -> bool:
    return bool(np.all(actions >= ACTIONS.low) and np.all(actions <= ACTIONS.high))


@pytest.mark.parametrize("name", list(POLICIES))
def test_policy_actions_stay_inside_float64_bounds(name: str) -> None:
    policy = POLICIES[name]()
    observations = _observations(200)
    greedy = policy.compute_actions(observations, explore=False)
    assert greedy.dtype == np.float64
    # The bounds are reached within float32 rounding (the case is real), and never passed.
    assert np.isclose(greedy[:, 0].max(), 0.1, rtol=0, atol=1e-7)
    assert np.isclose(greedy[:, 0].min(), -0.1, rtol=0, atol=1e-7)
    assert _inside(greedy)
    assert all(ACTIONS.contains(a) for a in greedy)
    assert _inside(policy.compute_actions(observations, explore=True))


@pytest.mark.parametrize("onnx", [None, 18])
@pytest.mark.parametrize("name", list(POLICIES))
def test_exported_actions_stay_inside_float64_bounds(name: str, onnx: int | None, tmp_path: Path) -> None:
    if onnx is not None:
        pytest.importorskip("onnxruntime")
    policy = POLICIES[name]()
    policy.export_model(tmp_path, onnx=onnx)  # checked against the policy on write
    observations = _observations(200)
    obs = model_inputs(policy.observation_space, observations)
    if onnx is None:
        program = torch.export.load(str(tmp_path / "model.pt2")).module()
        with torch.inference_mode():
            action = program(torch.from_numpy(obs))[0].numpy()
    else:
        import onnxruntime

        session = onnxruntime.InferenceSession(str(tmp_path / "model.onnx"),
                                               providers=["CPUExecutionProvider"])
        action = session.run(None, {"obs": obs})[0]
    assert action.dtype == np.float64
    assert _inside(action)
    np.testing.assert_allclose(action, policy.compute_actions(observations, explore=False), rtol=0, atol=1e-6)


def test_float32_bounds_round_inwards_and_keep_exact_ones() -> None:
    from cairn.policy.distributions import float32_bounds

    space = gym.spaces.Box(np.array([-0.1, -1.0, -np.inf, -1e300]), np.array([0.1, 1.0, np.inf, 1e300]),
                           dtype=np.float64)
    low, high = float32_bounds(space)
    assert low.dtype == high.dtype == np.float32
    assert np.all(low.astype(np.float64) >= space.low) and np.all(high.astype(np.float64) <= space.high)
    # One float32 step inside a bound float32 cannot hold; exact and infinite bounds kept.
    assert high[0] == np.nextafter(np.float32(0.1), np.float32(0)) and low[0] == -high[0]
    assert (low[1], high[1], low[2], high[2]) == (-1.0, 1.0, -np.inf, np.inf)
    assert (low[3], high[3]) == (-np.finfo(np.float32).max, np.finfo(np.float32).max)
    float32_space = gym.spaces.Box(-0.1, 0.1, (2,), np.float32)  # float32 bounds: as they are
    assert np.array_equal(float32_bounds(float32_space)[1], float32_space.high)


@pytest.mark.parametrize("policy_class", [cairn.Policy, SACPolicy, TD3Policy])
def test_a_box_entry_that_holds_no_float32_is_refused(policy_class: Any) -> None:
    """A float64 entry whose bounds hold no float32 number ([0.1, 0.1]: a fixed dimension) has
    bounds that cross once rounded inwards; clipped to them, every action was 0.099999994, out
    of the space, with no error. The policy is refused, naming the entry and the fix."""
    obs = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
    for low, high in ((0.1, 0.1), (0.1, 0.1 + 1e-12)):
        space = gym.spaces.Box(np.array([[-1.0, low]]), np.array([[1.0, high]]), dtype=np.float64)
        with pytest.raises(cairn.errors.ConfigError, match=r"entry \(0, 1\) .*holds no float32 number"):
            policy_class(obs, space, seed=0)
    # Bounds float32 holds exactly, equal or not, are fine.
    for low, high in ((0.0, 0.0), (0.25, 0.25), (0.1, 0.2)):
        space = gym.spaces.Box(np.array([-1.0, low]), np.array([1.0, high]), dtype=np.float64)
        policy = policy_class(obs, space, seed=0)
        actions = policy.compute_actions(np.zeros((4, 3), np.float32), explore=True)
        assert all(space.contains(a) for a in actions)
