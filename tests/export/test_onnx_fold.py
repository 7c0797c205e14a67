"""The MeanStdFilter fold in model.onnx: fewer nodes, the same function, skipped where unsafe."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

import cairn
from cairn.export import export_model, model_inputs

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

OBS = gym.spaces.Box(-5.0, 5.0, (6,))


def _ops(path: Path) -> list[str]:
    return [node.op_type for node in onnx.load(str(path)).graph.node]


def _unfolded(policy: Any, observations: list[Any]) -> np.ndarray:
    """The policy's own normalisation: the reference the folded graph must reproduce."""
    return policy.process_observations(observations, update=False)


@pytest.mark.parametrize(("action_space", "extra_outputs"), [
    (gym.spaces.Discrete(3), ()), (gym.spaces.Discrete(3), ("value",)),
    (gym.spaces.Box(-1.0, 1.0, (2,)), ()),  # its graph also reads the input's shape
])
def test_filter_is_folded_into_every_first_layer(action_space: Any, extra_outputs: tuple[str, ...],
                                                 tmp_path: Path, helpers: Any) -> None:
    policy = helpers.make_policy(OBS, action_space, filtered=True)
    export_model(policy, tmp_path, onnx=18, extra_outputs=extra_outputs)
    ops = _ops(tmp_path / "model.onnx")
    assert ops[:2] == ["Max", "Min"] and not {"Sub", "Mul", "Clip"} & set(ops)
    names = {init.name for init in onnx.load(str(tmp_path / "model.onnx")).graph.initializer}
    folded = {name for name in names if name.endswith(".filter_folded")}
    assert len(folded) == 2 * (1 + len(extra_outputs))  # weight and bias of each first layer
    # Far outside the clip range too: both bounds of the clip are exercised.
    rng = np.random.default_rng(3)
    observations = list((rng.normal(size=(2000, 6)) * 40).astype(np.float32))
    assert (np.abs(_unfolded(policy, observations)) >= policy.observation_filter.clip).any()
    outputs = helpers.onnx_outputs(tmp_path / "model.onnx", model_inputs(OBS, observations))
    helpers.assert_parity(policy, outputs, observations, tmp_path)


def test_dqn_filter_is_folded(tmp_path: Path, helpers: Any) -> None:
    policy = helpers.make_dqn_policy(OBS, gym.spaces.Discrete(3), filtered=True, dueling=True)
    export_model(policy, tmp_path, onnx=18)
    assert _ops(tmp_path / "model.onnx")[:2] == ["Max", "Min"]
    helpers.check_model_dir(policy, tmp_path)


def test_wide_box_policies_are_folded_with_parity(tmp_path: Path, helpers: Any) -> None:
    """65 features and a Box action (whose graph also reads the input's shape)."""
    wide = gym.spaces.Box(-5.0, 5.0, (65,))
    policy = helpers.make_policy(wide, gym.spaces.Box(-1.0, 1.0, (2,)), filtered=True)
    export_model(policy, tmp_path, onnx=18)
    ops = _ops(tmp_path / "model.onnx")
    assert ops[:2] == ["Max", "Min"] and not {"Sub", "Mul", "Clip"} & set(ops)
    rng = np.random.default_rng(4)
    observations = list((rng.normal(size=(500, wide.shape[0])) * 40).astype(np.float32))
    outputs = helpers.onnx_outputs(tmp_path / "model.onnx", model_inputs(wide, observations))
    helpers.assert_parity(policy, outputs, observations, tmp_path)


def test_fold_is_skipped_where_it_could_lose_precision(tmp_path: Path, helpers: Any) -> None:
    """A feature whose mean is far from zero in its own standard deviations keeps Sub/Mul/Clip."""
    policy = cairn.Policy(OBS, gym.spaces.Discrete(3), {"observation_filter": "MeanStdFilter"}, seed=0)
    rng = np.random.default_rng(0)
    shifted = rng.normal(size=(500, 6)).astype(np.float32)
    shifted[:, 2] += 1000.0  # mean 1000, std 1: |mean * inv_std| ~ 1000 > clip (10)
    policy.process_observations(shifted, update=True)
    export_model(policy, tmp_path, onnx=18)
    assert _ops(tmp_path / "model.onnx")[:3] == ["Sub", "Mul", "Clip"]
    helpers.check_model_dir(policy, tmp_path)


def test_graphs_without_a_filter_are_unchanged(tmp_path: Path, helpers: Any) -> None:
    policy = helpers.make_policy(OBS, gym.spaces.Discrete(3), filtered=False)
    export_model(policy, tmp_path, onnx=18)
    assert _ops(tmp_path / "model.onnx")[0] == "Gemm"
    one_hot = helpers.make_policy(gym.spaces.Discrete(5), gym.spaces.Discrete(3), filtered=True)
    export_model(one_hot, tmp_path / "discrete", onnx=18)
    assert not {"Max", "Min"} & set(_ops(tmp_path / "discrete" / "model.onnx"))
    helpers.check_model_dir(one_hot, tmp_path / "discrete")
