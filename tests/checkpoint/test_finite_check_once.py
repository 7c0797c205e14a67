"""Each way a policy state enters checks it for NaN and infinity once: a checkpoint's by its
reader (``check_policy_state``), an in-memory one by ``Algorithm.set_state`` or
``Policy.set_state``/``from_state``. Restores used to run the in-memory check again on the
checkpoint's arrays (a second sum over every weight and optimizer slot); the refusals and their
messages are tests/checkpoint/test_non_finite_state.py's and
tests/policy/test_in_memory_non_finite_state.py's."""

from __future__ import annotations

from pathlib import Path

import pytest

import cairn
from cairn.policy import state_check
from tests.helpers import small_cartpole


def test_every_path_checks_a_policy_state_for_non_finite_numbers_once(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    checked: list[str] = []
    check = state_check._check_finite_numbers

    def counted(state, where, **kwargs):
        checked.append(str(where))
        return check(state, where, **kwargs)

    monkeypatch.setattr(state_check, "_check_finite_numbers", counted)
    algo = small_cartpole("ppo").build()
    try:
        algo.train()
        path = algo.save(tmp_path / "c")
        state, policy_state = algo.get_state(), algo.get_policy().get_state()
        paths = {
            "Algorithm.restore": lambda: algo.restore(path),
            "Algorithm.from_checkpoint": lambda: cairn.Algorithm.from_checkpoint(path).stop(),
            "Policy.from_checkpoint": lambda: cairn.Policy.from_checkpoint(path),
            "restore_from_path": lambda: algo.restore_from_path(path, component="policies/default_policy"),
            "Algorithm.set_state": lambda: algo.set_state(state),
            "Algorithm.set_state adding a policy": lambda: algo.set_state(
                {**state, "policies": {"other": state["policies"]["default_policy"]}}),
            "Algorithm.from_state": lambda: cairn.Algorithm.from_state(state).stop(),
            "Policy.set_state": lambda: algo.get_policy().set_state(policy_state),
            "Policy.from_state": lambda: cairn.Policy.from_state(policy_state),
        }
        for name, load in paths.items():
            checked.clear()
            load()
            assert len(checked) == 1, (name, checked)
    finally:
        algo.stop()
