"""A user's Policy subclass that overrides the public ``set_state(self, state)`` (no keywords,
calling ``super()``) is restored from checkpoints and synced with the learners by cairn through
that override. cairn's restores used to pass a ``check_finite=`` keyword to ``set_state`` (to
check each array for NaN once), so such an override raised TypeError on the first learner sync
and on every restore. The NaN and infinity check still runs exactly once on each path
(tests/checkpoint/test_finite_check_once.py), and an override that hands ``super()`` a new
mapping is checked as any state is."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

import cairn
from cairn.algorithms.dqn.dqn_policy import DQNPolicy
from cairn.learners.actor import LearnerActor
from cairn.policy import state_check
from tests.helpers import small_cartpole


class OverridingPolicy(cairn.Policy):
    """A user's policy whose ``set_state`` counts its calls, written as the docs show."""

    calls = 0

    def set_state(self, state: Mapping[str, Any]) -> None:
        type(self).calls += 1
        super().set_state(state)


class OverridingDQNPolicy(DQNPolicy):
    """The same on a policy with a target network (whose own ``set_state`` extends Policy's)."""

    calls = 0

    def set_state(self, state: Mapping[str, Any]) -> None:
        type(self).calls += 1
        super().set_state(state)


class CopyingPolicy(cairn.Policy):
    """An override that hands ``super()`` a mapping of its own."""

    def set_state(self, state: Mapping[str, Any]) -> None:
        super().set_state({**state})


@pytest.mark.parametrize(("kind", "policy_class"), [("ppo", OverridingPolicy), ("dqn", OverridingDQNPolicy)])
def test_an_overridden_set_state_syncs_and_restores_with_one_finite_check(
        kind: str, policy_class: type, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    checked: list[str] = []
    check = state_check._check_finite_numbers

    def counted(state: Mapping[str, Any], where: Any, **kwargs: Any) -> None:
        checked.append(str(where))
        check(state, where, **kwargs)

    monkeypatch.setattr(state_check, "_check_finite_numbers", counted)
    config = small_cartpole(kind).multi_agent(
        policies={"default_policy": cairn.PolicySpec(policy_class=policy_class)})
    algo = config.build()
    try:
        # The device learner's path on CPU (tests/learners/test_learner_loans.py does the same):
        # each iteration lends the policy to it and takes its learned parts back with set_state.
        assert algo.learner_group is not None
        algo.learner_group.device_learner = LearnerActor(algo.config, device="cpu")
        policy_class.calls = 0
        algo.train()
        algo.train()  # DQN learns from its second iteration on
        assert policy_class.calls > 0  # the learner syncs went through the override
        path = algo.save(tmp_path / "c")
        before = algo.get_policy().get_weights()
        paths = {
            "Algorithm.restore": lambda: algo.restore(path),
            "Algorithm.from_checkpoint": lambda: cairn.Algorithm.from_checkpoint(path).stop(),
            "Policy.from_checkpoint": lambda: cairn.Policy.from_checkpoint(path),
            "restore_from_path": lambda: algo.restore_from_path(path, component="policies/default_policy"),
            "Algorithm.set_state": lambda: algo.set_state(algo.get_state()),
        }
        for name, load in paths.items():
            checked.clear()
            policy_class.calls = 0
            load()
            assert policy_class.calls == 1, name
            assert len(checked) == 1, (name, checked)
        assert isinstance(algo.get_policy(), policy_class)
        assert all((algo.get_policy().get_weights()[k] == v).all() for k, v in before.items())
        checked.clear()
        policy_class.calls = 0
        algo.train()  # lends the restored policy to the learner's copy and takes it back
        assert policy_class.calls == 2
        assert checked == []  # cairn's own syncs: no check
    finally:
        algo.stop()


def test_an_override_passing_a_new_mapping_is_still_checked_for_nan(tmp_path: Path) -> None:
    algo = small_cartpole("ppo").multi_agent(
        policies={"default_policy": cairn.PolicySpec(policy_class=CopyingPolicy)}).build()
    try:
        algo.train()
        algo.save(tmp_path / "c")
        restored = cairn.Policy.from_checkpoint(tmp_path / "c")  # an algorithm's: {policy_id: policy}
        assert isinstance(restored["default_policy"], CopyingPolicy)
        state = algo.get_policy().get_state()
        name = next(iter(state["weights"]))
        state["weights"][name].reshape(-1)[0] = float("nan")
        with pytest.raises(ValueError, match="NaN"):
            algo.get_policy().set_state(state)
        with pytest.raises(ValueError, match="NaN"):
            algo.set_state({**algo.get_state(), "policies": {"default_policy": state}})
    finally:
        algo.stop()
