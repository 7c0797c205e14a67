"""Exported models act like the policy: Policy checkpoints, PPO and DQN checkpoints with
model/ files.

Each case compares, on 1,000 random observations, the ONNX model in onnxruntime and the torch
program loaded with plain torch against ``policy.compute_actions(obs, explore=False)`` (and
the other outputs against the action inputs and value, or DQN's ``compute_q_values``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

import cairn
from cairn.checkpoint.safetensors_io import new_hasher
from tests.helpers import policy_checkpoint

pytest.importorskip("onnxruntime")

CASES = {
    # Discrete actions with a start offset, from Box observations.
    "discrete": (gym.spaces.Box(-2.0, 2.0, (4,)), gym.spaces.Discrete(3, start=1)),
    # Box actions, some bounds tight enough to clip, one side unbounded, from 2-D observations.
    "box": (
        gym.spaces.Box(-1.0, 1.0, (3, 2)),
        gym.spaces.Box(np.array([-0.5, -np.inf, -1.0], np.float32),
                       np.array([0.5, 0.3, np.inf], np.float32)),
    ),
    # MultiDiscrete actions with starts, from Dict observations (flattened input).
    "multidiscrete": (
        gym.spaces.Dict({"pos": gym.spaces.Box(-1.0, 1.0, (2,)), "mode": gym.spaces.Discrete(3)}),
        gym.spaces.MultiDiscrete([3, 4], start=[1, -2]),
    ),
    # One number per observation (a Box of shape ()), Box actions.
    "scalar": (gym.spaces.Box(-2.0, 2.0, ()), gym.spaces.Box(-0.5, 0.5, (2,))),
}


def _hash(path: Path) -> str:
    hasher = new_hasher()
    hasher.update(path.read_bytes())
    return str(hasher.hexdigest())


@pytest.mark.parametrize("filtered", [False, True], ids=["nofilter", "meanstd"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_policy_checkpoint_models_match_policy(
    case: str, filtered: bool, tmp_path: Path, helpers: Any
) -> None:
    policy = helpers.make_policy(*CASES[case], filtered=filtered)
    checkpoint = Path(policy_checkpoint(policy, tmp_path / "ckpt", export_native=True))

    info = cairn.get_checkpoint_info(checkpoint)
    assert info["native_model"] == {"status": "ok", "formats": ["torch", "onnx"], "opset": 18}
    model_dir = checkpoint / "model"
    names = {"model.pt2", "model.safetensors", "model.onnx", "signature.json"}
    assert {p.name for p in model_dir.iterdir()} == names
    for name in names:  # every file is in the manifest with its true size and hash
        record = info["files"][f"model/{name}"]
        assert record == {"size": (model_dir / name).stat().st_size, "hash": _hash(model_dir / name)}

    helpers.check_model_dir(policy, model_dir)
    restored = cairn.Policy.from_checkpoint(checkpoint)  # model/ does not disturb loading
    obs = helpers.sample(policy.observation_space, 50, seed=3)
    np.testing.assert_array_equal(restored.compute_actions(obs, explore=False),
                                  policy.compute_actions(obs, explore=False))


def test_filter_constants_are_snapshots(tmp_path: Path, helpers: Any) -> None:
    """The model holds the filter's statistics at export time, not a live reference."""
    policy = helpers.make_policy(*CASES["discrete"], filtered=True)
    checkpoint = Path(policy_checkpoint(policy, tmp_path / "ckpt", export_native=True))
    signature = json.loads((checkpoint / "model" / "signature.json").read_text())
    assert signature["observation_filter"]["name"] == "MeanStdFilter"
    assert signature["observation_filter"]["count"] == 500
    observations = helpers.sample(policy.observation_space, 200, seed=4)
    before = policy.compute_actions(observations, explore=False)
    policy.process_observations(np.full((500, 4), 1.9, np.float32), update=True)  # shift the mean
    assert not np.array_equal(policy.compute_actions(observations, explore=False), before)
    exported = helpers.onnx_outputs(checkpoint / "model" / "model.onnx", np.asarray(observations))
    np.testing.assert_array_equal(exported[0], before)


def test_multi_agent_checkpoint_models_match_policies(multi_agent_checkpoint: Any, helpers: Any) -> None:
    policies, checkpoint = multi_agent_checkpoint
    assert sorted(policies) == ["p0", "p1"]
    for pid, policy in policies.items():
        policy_dir = checkpoint / "policies" / pid
        info = cairn.get_checkpoint_info(policy_dir)
        assert info["native_model"]["status"] == "ok"
        assert info["native_model"]["formats"] == ["torch", "onnx"]
        assert policy.observation_filter.name == "MeanStdFilter" and policy.observation_filter.count > 0
        helpers.check_model_dir(policy, policy_dir / "model")
    # The two policies were trained apart, so their exported models differ.
    a = (checkpoint / "policies/p0/model/model.safetensors").read_bytes()
    b = (checkpoint / "policies/p1/model/model.safetensors").read_bytes()
    assert a != b


def test_single_agent_checkpoint_models_match_policy(single_agent_checkpoint: Any, helpers: Any) -> None:
    policies, checkpoint = single_agent_checkpoint
    (pid, policy), = policies.items()
    assert isinstance(policy.action_space, gym.spaces.Box)
    policy_dir = checkpoint / "policies" / pid
    assert cairn.get_checkpoint_info(policy_dir)["native_model"]["opset"] == 18
    helpers.check_model_dir(policy, policy_dir / "model")
    restored = cairn.Policy.from_checkpoint(checkpoint, policy_ids=[pid])[pid]
    helpers.check_model_dir(restored, policy_dir / "model", seed=5)


DQN_CASES = {
    # Discrete actions with a start offset, from Box observations.
    "box": (gym.spaces.Box(-2.0, 2.0, (4,)), gym.spaces.Discrete(3, start=1)),
    # Discrete observations (one-hot inside the model), Discrete actions.
    "discrete": (gym.spaces.Discrete(5, start=-1), gym.spaces.Discrete(4)),
    # Dict observations (flattened input), 2-D Box inside.
    "dict": (gym.spaces.Dict({"pos": gym.spaces.Box(-1.0, 1.0, (2, 2)), "mode": gym.spaces.Discrete(3)}),
             gym.spaces.Discrete(2)),
    # One number per observation (a Box of shape ()).
    "scalar": (gym.spaces.Box(-2.0, 2.0, ()), gym.spaces.Discrete(3, start=1)),
}


def _check_native_files(checkpoint: Path) -> None:
    info = cairn.get_checkpoint_info(checkpoint)
    assert info["native_model"] == {"status": "ok", "formats": ["torch", "onnx"], "opset": 18}
    model_dir = checkpoint / "model"
    names = {"model.pt2", "model.safetensors", "model.onnx", "signature.json"}
    assert {p.name for p in model_dir.iterdir()} == names
    for name in names:
        record = info["files"][f"model/{name}"]
        assert record == {"size": (model_dir / name).stat().st_size, "hash": _hash(model_dir / name)}


@pytest.mark.parametrize("dueling", [True, False], ids=["dueling", "plain"])
@pytest.mark.parametrize("filtered", [False, True], ids=["nofilter", "meanstd"])
@pytest.mark.parametrize("case", sorted(DQN_CASES))
def test_dqn_policy_checkpoint_models_match_policy(case: str, filtered: bool, dueling: bool,
                                                   tmp_path: Path, helpers: Any) -> None:
    policy = helpers.make_dqn_policy(*DQN_CASES[case], filtered=filtered, dueling=dueling)
    checkpoint = Path(policy_checkpoint(policy, tmp_path / "ckpt", export_native=True))
    _check_native_files(checkpoint)
    signature = json.loads((checkpoint / "model" / "signature.json").read_text())
    n = policy.action_space.n
    assert [(o["name"], o["dtype"], o["shape"]) for o in signature["outputs"]] == [
        ("action", "int64", ["batch"]), ("q_values", "float32", ["batch", n])]
    assert signature["policy_class"].endswith("DQNPolicy")
    assert signature["observation_filter"]["name"] == ("MeanStdFilter" if filtered else "NoFilter")
    helpers.check_model_dir(policy, checkpoint / "model")  # 1,000 observations, both formats
    restored = cairn.Policy.from_checkpoint(checkpoint)
    assert type(restored).__name__ == "DQNPolicy"
    helpers.check_model_dir(restored, checkpoint / "model", seed=6)


def test_dqn_checkpoint_models_match_policy(dqn_checkpoint: Any, helpers: Any) -> None:
    policies, checkpoint = dqn_checkpoint
    (pid, policy), = policies.items()
    assert type(policy).__name__ == "DQNPolicy" and policy.num_grad_updates > 0
    assert policy.observation_filter.name == "MeanStdFilter" and policy.observation_filter.count > 0
    helpers.check_model_dir(policy, checkpoint / "policies" / pid / "model")


def test_multi_agent_dqn_checkpoint_models_match_policies(multi_agent_dqn_checkpoint: Any,
                                                          helpers: Any) -> None:
    policies, checkpoint = multi_agent_dqn_checkpoint
    assert sorted(policies) == ["p0", "p1"]
    assert policies["p0"].model.dueling and not policies["p1"].model.dueling
    for pid, policy in policies.items():
        policy_dir = checkpoint / "policies" / pid
        assert cairn.get_checkpoint_info(policy_dir)["native_model"]["formats"] == ["torch", "onnx"]
        helpers.check_model_dir(policy, policy_dir / "model")
        restored = cairn.Policy.from_checkpoint(checkpoint, policy_ids=[pid])[pid]
        helpers.check_model_dir(restored, policy_dir / "model", seed=7)
