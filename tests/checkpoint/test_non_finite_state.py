"""A checkpoint whose optimizer state holds NaN or inf (Adam's ``exp_avg_sq``), or whose weights
hold NaN, is refused at restore, naming the policy, the array and the fix. cairn never applies a
step that stores one, but an older version did: restored, the NaN moment made the weights NaN at
the first step and surfaced as a NonFiniteLossError that blamed the environment; NaN weights as
a PolicyOutputError that blamed training (docs/fault-tolerance.md)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

import cairn
from cairn.errors import CheckpointFormatError
from tests.helpers import small_cartpole, trained_cartpole


def _spoil_moment(algo: cairn.Algorithm, value: float) -> None:
    optimizer = algo.get_policy().optimizer
    params = [p for group in optimizer.param_groups for p in group["params"]]
    with torch.no_grad():
        optimizer.state[params[1]]["exp_avg_sq"][0] = value  # as an old version could have saved


@pytest.mark.parametrize("kind", ["ppo", "dqn"])
@pytest.mark.parametrize("value", [float("nan"), float("inf")])
def test_a_non_finite_optimizer_moment_is_refused_at_restore(kind: str, value: float, tmp_path: Path) -> None:
    algo = trained_cartpole(kind, 3)
    try:
        good = algo.save(tmp_path / "good")
        _spoil_moment(algo, value)
        bad = algo.save(tmp_path / "bad")
    finally:
        algo.stop()
    restored = small_cartpole(kind).build()
    try:
        before = restored.get_policy().get_weights()
        with pytest.raises(CheckpointFormatError) as info:
            restored.restore(bad)
        message = str(info.value)
        assert "'default_policy'" in message and "'exp_avg_sq' of parameter 1" in message
        assert ("nan" if np.isnan(value) else "inf") in message
        assert "restore a checkpoint saved before" in message
        after = restored.get_policy().get_weights()  # refused before anything changed
        assert all(np.array_equal(before[k], after[k]) for k in before)
        restored.restore(good)  # and the next restore works
        restored.train()
    finally:
        restored.stop()
    with pytest.raises(CheckpointFormatError, match="exp_avg_sq"):
        cairn.Algorithm.from_checkpoint(bad)
    with pytest.raises(CheckpointFormatError, match="exp_avg_sq"):
        cairn.Policy.from_checkpoint(bad)


@pytest.mark.parametrize("target", [False, True])
def test_a_nan_weight_is_refused_at_restore(target: bool, tmp_path: Path) -> None:
    algo = trained_cartpole("dqn", 3)
    try:
        policy = algo.get_policy()
        model = policy.target_model if target else policy.model
        param = next(iter(model.parameters()))
        with torch.no_grad():
            param.view(-1)[3] = float("nan")
        bad = algo.save(tmp_path / "bad")
    finally:
        algo.stop()
    with pytest.raises(CheckpointFormatError) as info:
        cairn.Algorithm.from_checkpoint(bad)
    message = str(info.value)
    assert "'default_policy'" in message and f"{'target network ' if target else ''}weight" in message
    assert "NaN" in message and "at index" in message


def test_infinite_weights_and_finite_states_restore() -> None:
    """+-inf in weights is kept (a buffer such as an attention mask holds -inf); a finite state
    restores as before (the fast check is a sum, which overflows for huge finite numbers)."""
    from cairn.policy.state_check import _first_bad

    assert _first_bad(np.array([-np.inf, 1.0], np.float32), nan_only=True) is None
    assert _first_bad(np.array([3e38, 3e38, -3e38, -3e38], np.float32), nan_only=False) is None
    found = _first_bad(np.array([3e38, 3e38, -3e38, np.inf], np.float32), nan_only=False)
    assert found == (1, "inf at index (3,)")
    assert _first_bad(np.array([np.inf, -np.inf], np.float32), nan_only=True) is None  # a sum of NaN, no NaN
    assert _first_bad(np.arange(4), nan_only=False) is None  # integers (a step count) hold no NaN
