"""Exported CNN and Dict-observation policies act like the policy, in torch and onnxruntime.

The model's input is the raw observation as float32 (pixels in 0..255: the model scales them
itself) for a Box, and the flattened observation for a Dict (docs/export.md).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch

import cairn
from cairn.algorithms.dqn.dqn_policy import DQNPolicy

pytest.importorskip("onnxruntime")

FRAMES = gym.spaces.Box(0, 255, (4, 36, 36), np.uint8)  # the Nature CNN's smallest comfortable input
DICT = gym.spaces.Dict({"camera": gym.spaces.Box(0, 255, (12, 12, 3), np.uint8),
                        "speed": gym.spaces.Box(-1.0, 1.0, (2,), np.float32), "gear": gym.spaces.Discrete(3)})
SMALL = {"hidden": [16], "conv_filters": [[4, 4, 2], [8, 3, 1]], "conv_dense": 16}


def _sharpen(policy: cairn.Policy) -> None:
    with torch.no_grad():  # logits of order one: argmax away from ties
        policy.model.action_head.weight.mul_(100.0)


def test_nature_cnn_policy_exports_with_parity(tmp_path: Path, helpers: Any) -> None:
    policy = cairn.Policy(FRAMES, gym.spaces.Discrete(4), {"model": {"vf_share_layers": True, "hidden": []}},
                          seed=0)
    _sharpen(policy)
    policy.export_checkpoint(tmp_path / "ckpt", export_native_model_files=True)
    model_dir = tmp_path / "ckpt" / "model"
    signature = json.loads((model_dir / "signature.json").read_text())
    assert (signature["inputs"][0]["shape"] == ["batch", 4, 36, 36]
            and signature["inputs"][0]["dtype"] == "float32")
    helpers.check_model_dir(policy, model_dir)


def test_dict_policy_with_a_filter_exports_with_parity(tmp_path: Path, helpers: Any) -> None:
    policy = cairn.Policy(DICT, gym.spaces.Box(-1.0, 1.0, (2,)),
                          {"model": SMALL, "observation_filter": "MeanStdFilter"}, seed=0)
    policy.process_observations(helpers.sample(DICT, 200, seed=1), update=True)
    policy.export_model(tmp_path / "onnx", onnx=18, extra_outputs=["value"])
    signature = json.loads((tmp_path / "onnx" / "signature.json").read_text())
    assert signature["inputs"][0]["shape"] == ["batch", gym.spaces.flatdim(DICT)]
    helpers.check_model_dir(policy, tmp_path / "onnx")


def test_dqn_cnn_policy_exports_with_parity(tmp_path: Path, helpers: Any) -> None:
    policy = DQNPolicy(gym.spaces.Box(0, 255, (16, 16, 1), np.uint8), gym.spaces.Discrete(3),
                       {"model": SMALL}, seed=0)
    policy.export_model(tmp_path / "program")
    helpers.check_model_dir(policy, tmp_path / "program")
