"""A Keras policy with an action mask exports as torch policies do (two inputs); the Keras
files, whose serving model has one input, are refused with the alternative."""

from __future__ import annotations

import json

import gymnasium as gym
import numpy as np
import pytest

import cairn
from cairn.errors import ExportError
from cairn.export import export_model, model_feeds
from cairn.export.keras_saved_model import export_saved_model
from cairn.export.verify import onnx_runner, sample_policy_observations

MASKED = gym.spaces.Dict({"observation": gym.spaces.Box(-1.0, 1.0, (5,)),
                          "action_mask": gym.spaces.MultiBinary(4)})


def masked_keras_policy() -> cairn.Policy:
    return cairn.Policy(MASKED, gym.spaces.Discrete(4), {"model": {"framework": "keras"}}, seed=0)


def test_a_masked_keras_policy_exports_a_torch_program_and_onnx(tmp_path):
    policy = masked_keras_policy()
    program = export_model(policy, tmp_path / "torch")  # parity checked inside
    assert program["files"] == {"torch": "model.pt2", "torch_weights": "model.safetensors"}
    assert [spec["name"] for spec in program["inputs"]] == ["obs", "action_mask"]
    pytest.importorskip("onnxruntime")
    onnx = export_model(policy, tmp_path / "onnx", onnx=18)
    assert onnx["files"] == {"onnx": "model.onnx"}
    observations = sample_policy_observations(policy, 64, seed=3)
    feeds = model_feeds(policy.observation_space, policy.action_space, observations)
    action, _ = onnx_runner(str(tmp_path / "onnx/model.onnx"))(*feeds.values())
    np.testing.assert_array_equal(action, policy.compute_actions(observations, explore=False))
    assert (feeds["action_mask"][np.arange(64), action] > 0.5).all()


def test_keras_files_of_a_masked_policy_are_refused_with_the_alternative(tmp_path):
    policy = masked_keras_policy()
    with pytest.raises(ExportError, match=r"action mask.*takes one input, obs.*Export it as ONNX"):
        export_saved_model(policy, tmp_path / "saved")
    assert not (tmp_path / "saved").exists()
    # Its checkpoints hold the torch files instead of model.keras.
    policy.export_checkpoint(tmp_path / "ckpt")
    signature = json.loads((tmp_path / "ckpt" / "model" / "signature.json").read_text())
    assert "keras" not in signature["files"] and "torch" in signature["files"]
