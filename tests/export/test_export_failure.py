"""When a model cannot be exported: checkpoints are still written and say why; explicit
exports raise ExportError; exported models that disagree with the policy are refused."""

from __future__ import annotations

import dataclasses
import warnings
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch
from torch import nn

import cairn
from cairn.errors import ExportError
from cairn.export import onnx_model as onnx_model_module
from cairn.export.verify import check_against_policy
from tests.helpers import policy_checkpoint

OBS = gym.spaces.Box(-1.0, 1.0, (4,))


class BranchingModel(nn.Module):
    """Chooses its head with Python control flow on tensor data: torch.export refuses it."""

    def __init__(self) -> None:
        super().__init__()
        self.left = nn.Linear(4, 2)
        self.right = nn.Linear(4, 2)
        self.critic = nn.Linear(4, 1)

    def action_inputs(self, obs: torch.Tensor) -> torch.Tensor:
        if obs.sum() > 0:
            return self.left(obs)
        return self.right(obs)

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        return self.critic(obs).squeeze(-1)


class BranchingPolicy(cairn.Policy):
    """A policy whose model cannot be traced."""

    def make_model(self) -> nn.Module:
        return BranchingModel()


class HeadlessModel(nn.Module):
    """Has a forward but not the action_inputs/value methods exports call."""

    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Linear(4, 3)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.net(obs)


class HeadlessPolicy(cairn.Policy):
    def make_model(self) -> nn.Module:
        return HeadlessModel()

    def check_model_outputs(self) -> None:
        """Its network is not an actor-critic (``forward`` gives one tensor): the hook says what
        a policy with another network reads; this one is only exported."""


def test_unexportable_model_still_checkpoints(tmp_path: Path) -> None:
    policy = BranchingPolicy(OBS, gym.spaces.Discrete(2), seed=0)
    with pytest.warns(UserWarning, match=r"without native model files.*torch\.export could not trace"):
        checkpoint = Path(policy_checkpoint(policy, tmp_path / "ckpt", export_native=True))

    info = cairn.get_checkpoint_info(checkpoint)
    record = info["native_model"]
    assert record["status"] == "failed"
    assert "torch.export could not trace the model BranchingModel" in record["reason"]
    assert "data-dependent" in record["reason"]
    assert not (checkpoint / "model").exists()
    assert not any(name.startswith("model/") for name in info["files"])

    restored = cairn.Policy.from_checkpoint(checkpoint)
    assert type(restored).__name__ == "BranchingPolicy"
    obs = np.random.default_rng(0).uniform(-1, 1, (20, 4)).astype(np.float32)
    np.testing.assert_array_equal(restored.compute_actions(obs, explore=False),
                                  policy.compute_actions(obs, explore=False))


def test_explicit_export_raises(tmp_path: Path) -> None:
    policy = BranchingPolicy(OBS, gym.spaces.Discrete(2), seed=0)
    with pytest.raises(ExportError, match=r"torch\.export could not trace"):
        policy.export_model(tmp_path / "out")
    assert not (tmp_path / "out").exists()
    headless = HeadlessPolicy(OBS, gym.spaces.Discrete(3), seed=0)
    with pytest.raises(ExportError, match=r"no action_inputs.*value"):
        cairn.export.export_model(headless, tmp_path / "out2", onnx=18)


def test_checkpoint_without_onnx_packages_keeps_torch_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, helpers: Any
) -> None:
    monkeypatch.setattr(onnx_model_module, "ONNX_PACKAGES", ("onnx", "no_such_package_for_cairn"))
    policy = helpers.make_policy(OBS, gym.spaces.Discrete(2), filtered=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # missing optional packages: no warning
        checkpoint = Path(policy_checkpoint(policy, tmp_path / "ckpt", export_native=True))
    record = cairn.get_checkpoint_info(checkpoint)["native_model"]
    assert record == {"status": "ok", "formats": ["torch"], "opset": None,
                      "skipped": {"onnx": "not installed: no_such_package_for_cairn"}}
    assert sorted(p.name for p in (checkpoint / "model").iterdir()) == [
        "model.pt2", "model.safetensors", "signature.json"]
    helpers.check_model_dir(policy, checkpoint / "model")


def test_unfaithful_models_are_refused(helpers: Any) -> None:
    """The check every export runs catches a model that computes other actions."""
    policy = helpers.make_policy(OBS, gym.spaces.MultiDiscrete([3, 2]), filtered=True)

    def faithful(obs: np.ndarray) -> list[np.ndarray]:
        processed = torch.from_numpy(policy.process_observations(obs, update=False))
        with torch.no_grad():
            inputs = policy.model.action_inputs(processed)
            value = policy.model.value(processed)
        return [policy.compute_actions(obs, explore=False), inputs.numpy(), value.numpy()]

    check_against_policy(policy, faithful, "reference")

    def wrong_action(obs: np.ndarray) -> list[np.ndarray]:
        action, inputs, value = faithful(obs)
        return [(action + 1) % 2, inputs, value]

    def wrong_value(obs: np.ndarray) -> list[np.ndarray]:
        action, inputs, value = faithful(obs)
        return [action, inputs, value + 1e-3]

    def wrong_dtype(obs: np.ndarray) -> list[np.ndarray]:
        action, inputs, value = faithful(obs)
        return [action.astype(np.int32), inputs, value]

    with pytest.raises(ExportError, match="chose different actions"):
        check_against_policy(policy, wrong_action, "model")
    with pytest.raises(ExportError, match=r"output 2 \(value\) differs"):
        check_against_policy(policy, wrong_value, "model")
    with pytest.raises(ExportError, match="dtype int32"):
        check_against_policy(policy, wrong_dtype, "model")


def test_the_check_tolerance_is_the_documented_one() -> None:
    """Box actions and the other float outputs must agree within ``1e-5 + 1e-5 * |expected|``
    (docs/export.md): an error just inside passes, one just outside is refused, and the error
    message states the bound it applied."""
    policy = cairn.Policy(OBS, gym.spaces.Box(-np.inf, np.inf, (2,)), seed=0)
    with torch.no_grad():  # actions of magnitude ~100: the relative part of the bound matters
        policy.model.action_head.bias[:2] = torch.tensor([300.0, -200.0])

    def faithful(obs: np.ndarray) -> list[np.ndarray]:
        processed = torch.from_numpy(policy.process_observations(obs, update=False))
        with torch.no_grad():
            inputs = policy.model.action_inputs(processed).numpy()
            value = policy.model.value(processed).numpy()
        return [policy.compute_actions(obs, explore=False), inputs[:, :2], inputs[:, 2:], value]

    def off_by(scale: float) -> Any:
        def run(obs: np.ndarray) -> list[np.ndarray]:
            action, *others = faithful(obs)
            bound = 1e-5 + 1e-5 * np.abs(action)
            return [(action + scale * bound).astype(action.dtype), *others]
        return run

    check_against_policy(policy, off_by(0.5), "model")
    with pytest.raises(ExportError, match=r"output 0 \(action\) differs .* \(tolerance: "
                                          r"\|got - expected\| <= 1e-05 \+ 1e-05 \* \|expected\|\)"):
        check_against_policy(policy, off_by(2.0), "model")


def test_a_tie_in_one_sub_action_excuses_that_sub_action_only(helpers: Any) -> None:
    """A MultiDiscrete action may differ where that sub-action's two best logits tie (another
    runtime's rounding can swap them), but a tie in one sub-action does not excuse another
    sub-action that differs: the check once let such a model through, on every row."""
    policy = helpers.make_policy(OBS, gym.spaces.MultiDiscrete([3, 2]), filtered=False)
    with torch.no_grad():  # the first sub-action's logits are all 0: tied on every row
        policy.model.action_head.weight[:3] = 0.0
        policy.model.action_head.bias[:3] = 0.0

    def faithful(obs: np.ndarray) -> list[np.ndarray]:
        processed = torch.from_numpy(policy.process_observations(obs, update=False))
        with torch.no_grad():
            inputs = policy.model.action_inputs(processed)
            value = policy.model.value(processed)
        return [policy.compute_actions(obs, explore=False), inputs.numpy(), value.numpy()]

    def other_tied_choice(obs: np.ndarray) -> list[np.ndarray]:
        action, inputs, value = faithful(obs)
        action[:, 0] = (action[:, 0] + 1) % 3  # another of the tied first sub-actions
        return [action, inputs, value]

    def wrong_second(obs: np.ndarray) -> list[np.ndarray]:
        action, inputs, value = faithful(obs)
        action[:, 1] = 1 - action[:, 1]  # the second sub-action has no tie
        return [action, inputs, value]

    check_against_policy(policy, faithful, "reference")
    check_against_policy(policy, other_tied_choice, "model")
    with pytest.raises(ExportError, match="chose different actions than the policy for 64 of 64"):
        check_against_policy(policy, wrong_second, "model")


class UnfaithfulPolicy(cairn.Policy):
    """A policy whose export check fails: its graph's reference says other actions."""

    def export_graph(self) -> Any:
        graph = super().export_graph()
        reference = graph.reference

        def other_actions(observations: Any, *more: np.ndarray) -> list[np.ndarray]:
            action, *rest = reference(observations, *more)
            return [1 - action, *rest]

        return dataclasses.replace(graph, reference=other_actions)


def test_a_failed_export_keeps_the_earlier_export_in_the_directory(tmp_path: Path, helpers: Any) -> None:
    """An export into a directory that holds an earlier one and fails its check leaves the
    earlier files as they were (signature.json and the model it describes), in each format."""
    policy = helpers.make_policy(OBS, gym.spaces.Discrete(2), filtered=True)
    policy.export_model(tmp_path)
    policy.export_model(tmp_path, onnx=18)
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    assert sorted(before) == ["model.onnx", "model.pt2", "model.safetensors", "signature.json"]
    unfaithful = UnfaithfulPolicy(OBS, gym.spaces.Discrete(2), seed=1)
    for onnx in (None, 18):
        with pytest.raises(ExportError, match="chose different actions"):
            unfaithful.export_model(tmp_path, onnx=onnx)
        assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before
    helpers.check_model_dir(policy, tmp_path)


def test_a_tie_excuses_only_another_of_the_tied_best_actions(helpers: Any) -> None:
    """Where the two best logits tie, the model may choose the other of them (rounding), but not
    an action well below them, nor one outside the action space."""
    policy = helpers.make_policy(OBS, gym.spaces.Discrete(3, start=4), filtered=False)
    with torch.no_grad():  # logits: a, a, a - 10 on every row
        head = policy.model.action_head
        head.weight[1:] = head.weight[0]
        head.bias[1] = head.bias[0]
        head.bias[2] = head.bias[0] - 10.0

    def faithful(obs: np.ndarray) -> list[np.ndarray]:
        processed = torch.from_numpy(policy.process_observations(obs, update=False))
        with torch.no_grad():
            inputs = policy.model.action_inputs(processed)
            value = policy.model.value(processed)
        return [policy.compute_actions(obs, explore=False), inputs.numpy(), value.numpy()]

    def choosing(action: int) -> Any:
        def run(obs: np.ndarray) -> list[np.ndarray]:
            reference, inputs, value = faithful(obs)
            return [np.full_like(reference, action), inputs, value]
        return run

    assert set(faithful(helpers.sample(OBS, 64, seed=0))[0]) == {4}
    check_against_policy(policy, choosing(5), "model")  # the other of the two tied best
    for action in (6, 7, 3):  # the worst action; actions outside the space
        with pytest.raises(ExportError, match="chose different actions than the policy for 64 of 64"):
            check_against_policy(policy, choosing(action), "model")


@pytest.mark.parametrize("level", [1000.0, -1000.0])
def test_the_tie_margin_scales_with_the_scores_as_the_float_tolerance_does(
        helpers: Any, level: float) -> None:
    """Logits (or Q-values) near 1000 round about 1000 times more than near 1 in another
    runtime (their float tolerance is 0.01 there): two best ones 0.003 apart may swap in a
    correct export. The tie margin was an absolute 1e-4, so such an export was refused as
    unfaithful; it is now relative as the tolerance is. An action 1.0 below the best at that
    level is still not excused."""
    policy = helpers.make_policy(OBS, gym.spaces.Discrete(3, start=4), filtered=False)
    with torch.no_grad():  # logits: a + level, a + level + 0.003, a + level - 1 on every row
        head = policy.model.action_head
        head.weight[1:] = head.weight[0]
        head.bias[0] = level
        head.bias[1] = level + 0.003
        head.bias[2] = level - 1.0

    def faithful(obs: np.ndarray) -> list[np.ndarray]:
        processed = torch.from_numpy(policy.process_observations(obs, update=False))
        with torch.no_grad():
            inputs = policy.model.action_inputs(processed)
            value = policy.model.value(processed)
        return [policy.compute_actions(obs, explore=False), inputs.numpy(), value.numpy()]

    def choosing(action: int) -> Any:
        def run(obs: np.ndarray) -> list[np.ndarray]:
            reference, inputs, value = faithful(obs)
            return [np.full_like(reference, action), inputs, value]
        return run

    assert set(faithful(helpers.sample(OBS, 64, seed=0))[0]) == {5}
    check_against_policy(policy, choosing(4), "model")  # 0.003 below the best, at 1000
    with pytest.raises(ExportError, match="chose different actions than the policy for 64 of 64"):
        check_against_policy(policy, choosing(6), "model")  # 1.0 below the best
