"""The MeanStdFilter in model.onnx: BatchNormalization and Clip instead of Sub, Mul and Clip,
the same function, skipped where unsafe."""

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


def _filter_nodes(path: Path) -> list[str]:
    """The op types of the nodes reading the graph input (Shape nodes aside) and of the nodes
    reading those: the observation filter's nodes."""
    graph = onnx.load(str(path)).graph
    first = [n for n in graph.node if graph.input[0].name in n.input and n.op_type != "Shape"]
    second = [n for n in graph.node if any(out in n.input for f in first for out in f.output)]
    return [n.op_type for n in first + second]


def _normalised(policy: Any, observations: list[Any]) -> np.ndarray:
    """The policy's own normalisation: the reference the rewritten graph must reproduce."""
    return policy.process_observations(observations, update=False)


@pytest.mark.parametrize(("action_space", "extra_outputs"), [
    (gym.spaces.Discrete(3), ()), (gym.spaces.Discrete(3), ("value",)),
    (gym.spaces.Box(-1.0, 1.0, (2,)), ()),  # its graph also reads the input's shape
])
def test_filter_is_one_batch_normalization_before_the_clip(action_space: Any, extra_outputs: tuple[str, ...],
                                                            tmp_path: Path, helpers: Any) -> None:
    policy = helpers.make_policy(OBS, action_space, filtered=True)
    export_model(policy, tmp_path, onnx=18, extra_outputs=extra_outputs)
    ops = _ops(tmp_path / "model.onnx")
    assert _filter_nodes(tmp_path / "model.onnx") == ["BatchNormalization", "Clip"]
    assert not {"Sub", "Mul"} & set(ops) and ops.count("BatchNormalization") == 1
    # The weights are the policy's own: nothing is folded into them.
    names = {init.name for init in onnx.load(str(tmp_path / "model.onnx")).graph.initializer}
    assert "model.actor.0.weight" in names and not any("folded" in name for name in names)
    # Far outside the clip range too: both bounds of the clip are exercised.
    rng = np.random.default_rng(3)
    observations = list((rng.normal(size=(2000, 6)) * 40).astype(np.float32))
    assert (np.abs(_normalised(policy, observations)) >= policy.observation_filter.clip).any()
    outputs = helpers.onnx_outputs(tmp_path / "model.onnx", model_inputs(OBS, observations))
    helpers.assert_parity(policy, outputs, observations, tmp_path)


def test_dqn_filter_is_rewritten(tmp_path: Path, helpers: Any) -> None:
    policy = helpers.make_dqn_policy(OBS, gym.spaces.Discrete(3), filtered=True, dueling=True)
    export_model(policy, tmp_path, onnx=18)
    assert _filter_nodes(tmp_path / "model.onnx") == ["BatchNormalization", "Clip"]
    helpers.check_model_dir(policy, tmp_path)


def test_wide_box_policies_are_rewritten_with_parity(tmp_path: Path, helpers: Any) -> None:
    """65 features and a Box action (whose graph also reads the input's shape)."""
    wide = gym.spaces.Box(-5.0, 5.0, (65,))
    policy = helpers.make_policy(wide, gym.spaces.Box(-1.0, 1.0, (2,)), filtered=True)
    export_model(policy, tmp_path, onnx=18)
    assert _filter_nodes(tmp_path / "model.onnx") == ["BatchNormalization", "Clip"]
    assert not {"Sub", "Mul"} & set(_ops(tmp_path / "model.onnx"))
    rng = np.random.default_rng(4)
    observations = list((rng.normal(size=(500, wide.shape[0])) * 40).astype(np.float32))
    outputs = helpers.onnx_outputs(tmp_path / "model.onnx", model_inputs(wide, observations))
    helpers.assert_parity(policy, outputs, observations, tmp_path)


def test_rewrite_is_skipped_where_it_could_lose_precision(tmp_path: Path, helpers: Any) -> None:
    """A feature whose mean is far from zero in its own standard deviations keeps Sub/Mul/Clip."""
    policy = cairn.Policy(OBS, gym.spaces.Discrete(3), {"observation_filter": "MeanStdFilter"}, seed=0)
    rng = np.random.default_rng(0)
    shifted = rng.normal(size=(500, 6)).astype(np.float32)
    shifted[:, 2] += 1000.0  # mean 1000, std 1: |mean * inv_std| ~ 1000 > clip (10)
    policy.process_observations(shifted, update=True)
    export_model(policy, tmp_path, onnx=18)
    assert _filter_nodes(tmp_path / "model.onnx") == ["Sub", "Mul"]
    helpers.check_model_dir(policy, tmp_path)


def test_graphs_without_a_filter_are_unchanged(tmp_path: Path, helpers: Any) -> None:
    policy = helpers.make_policy(OBS, gym.spaces.Discrete(3), filtered=False)
    export_model(policy, tmp_path, onnx=18)
    assert _ops(tmp_path / "model.onnx")[0] == "Gemm"
    one_hot = helpers.make_policy(gym.spaces.Discrete(5), gym.spaces.Discrete(3), filtered=True)
    export_model(one_hot, tmp_path / "discrete", onnx=18)
    assert "BatchNormalization" not in _ops(tmp_path / "discrete" / "model.onnx")
    helpers.check_model_dir(one_hot, tmp_path / "discrete")


def test_discrete_policy_graph_is_the_bare_mlp_plus_clip_and_argmax(tmp_path: Path, helpers: Any) -> None:
    """The latency claim (bench/export_inference.py) rests on this node list: one observation
    costs onnxruntime 0.2-0.5 µs per node, so any node that computes nothing (Identity, Cast,
    Reshape, a Sub and Mul left apart) shows up in it."""
    cartpole = gym.spaces.Box(np.array([-4.8, -np.inf, -0.42, -np.inf], np.float32),
                              np.array([4.8, np.inf, 0.42, np.inf], np.float32))
    mlp = ["Gemm", "Tanh", "Gemm", "Tanh", "Gemm"]
    for filtered, expected in ((True, ["BatchNormalization", "Clip", *mlp, "ArgMax"]),
                               (False, [*mlp, "ArgMax"])):
        policy = helpers.make_policy(cartpole, gym.spaces.Discrete(2), filtered=filtered)
        export_model(policy, tmp_path / str(filtered), onnx=18)
        assert _ops(tmp_path / str(filtered) / "model.onnx") == expected
        helpers.check_model_dir(policy, tmp_path / str(filtered))


def test_infinite_observations_clip_as_in_the_policy(tmp_path: Path, helpers: Any) -> None:
    """BatchNormalization keeps features apart: an infinite feature clips to +-c and leaves the
    others alone (a diagonal Gemm would turn every feature into NaN: 0 * inf)."""
    policy = helpers.make_policy(OBS, gym.spaces.Discrete(3), filtered=True)
    export_model(policy, tmp_path, onnx=18)
    observations = [np.array([np.inf, -np.inf, 1.0, -2.0, 0.5, 3.0], np.float32),
                    np.array([0.1, 0.2, np.inf, 0.0, -np.inf, 1.0], np.float32)]
    action, logits = helpers.onnx_outputs(tmp_path / "model.onnx", model_inputs(OBS, observations))
    expected = policy.compute_action_inputs(_normalised(policy, observations))
    assert np.isfinite(logits).all()
    np.testing.assert_allclose(logits, expected, rtol=0, atol=1e-5)
    np.testing.assert_array_equal(action, policy.compute_actions(observations, explore=False))
