"""Algorithm.export_policy_checkpoint and export_policy_model (RLlib's names): one policy on
its own, loaded back without the algorithm."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

import cairn
from cairn.errors import UnknownPolicyIdError
from cairn.export import model_inputs

OBSERVATIONS = [np.array([0.01, -0.02, 0.03, 0.04], dtype=np.float32),
                np.array([-0.1, 0.2, -0.05, 0.3], dtype=np.float32)]


def test_export_policy_checkpoint_loads_as_a_policy(ma_algo, tmp_path):
    ma_algo.train()
    ma_algo.export_policy_checkpoint(tmp_path / "p1", policy_id="p1")
    policy = cairn.Policy.from_checkpoint(tmp_path / "p1")
    assert cairn.get_checkpoint_info(tmp_path / "p1")["type"] == "Policy"
    original = ma_algo.get_policy("p1")
    assert all(np.array_equal(v, original.get_weights()[k]) for k, v in policy.get_weights().items())
    np.testing.assert_array_equal(policy.compute_actions(OBSERVATIONS, explore=False),
                                  original.compute_actions(OBSERVATIONS, explore=False))
    assert not (tmp_path / "p1" / "model").exists()  # as the config says (no native files)


def test_export_policy_checkpoint_defaults_to_default_policy(ppo_algo, tmp_path):
    ppo_algo.export_policy_checkpoint(tmp_path / "c", export_native_model_files=True)
    assert (tmp_path / "c" / "model" / "model.pt2").is_file()
    assert cairn.Policy.from_checkpoint(tmp_path / "c").observation_space.shape == (4,)


def test_export_policy_model_writes_a_torch_program(ppo_algo, tmp_path):
    ppo_algo.export_policy_model(tmp_path / "m")
    signature = json.loads((tmp_path / "m" / "signature.json").read_text())
    assert signature["files"]["torch"] == "model.pt2" and signature["opset"] is None
    module = torch.export.load(str(tmp_path / "m" / "model.pt2")).module()
    policy = ppo_algo.get_policy()
    obs = torch.from_numpy(model_inputs(policy.observation_space, OBSERVATIONS))
    with torch.inference_mode():
        action = module(obs)[0].numpy()
    np.testing.assert_array_equal(action, policy.compute_actions(OBSERVATIONS, explore=False))


def test_export_policy_model_writes_onnx(ma_algo, tmp_path):
    onnxruntime = pytest.importorskip("onnxruntime")
    pytest.importorskip("onnxscript")
    ma_algo.export_policy_model(tmp_path / "m", policy_id="p2", onnx=18, extra_outputs=["value"])
    signature = json.loads((tmp_path / "m" / "signature.json").read_text())
    assert signature["opset"] == 18 and signature["outputs"][-1]["name"] == "value"
    session = onnxruntime.InferenceSession(str(tmp_path / "m" / "model.onnx"),
                                           providers=["CPUExecutionProvider"])
    policy = ma_algo.get_policy("p2")
    action, *_, value = session.run(None, {"obs": model_inputs(policy.observation_space, OBSERVATIONS)})
    np.testing.assert_array_equal(action, policy.compute_actions(OBSERVATIONS, explore=False))
    expected_value = policy.export_graph().with_outputs(["value"]).reference(OBSERVATIONS)[-1]
    np.testing.assert_allclose(value, expected_value, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("export", ["export_policy_checkpoint", "export_policy_model"])
def test_unknown_policy_id_is_named_with_the_known_ones(ma_algo, tmp_path, export):
    with pytest.raises(UnknownPolicyIdError, match=r"no policy 'p9'; its policies are \['p0', 'p1', 'p2'\]"):
        getattr(ma_algo, export)(tmp_path / "x", policy_id="p9")
    assert not (tmp_path / "x").exists()
