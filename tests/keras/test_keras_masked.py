"""A Keras policy with an action mask exports every format with two inputs, obs and action_mask,
and its exported action is legal."""

from __future__ import annotations

import json

import gymnasium as gym
import numpy as np
import pytest

import cairn
from cairn.algorithms.dqn.dqn_policy import DQNPolicy
from cairn.export import export_model, model_feeds
from cairn.export.keras_files import keras_file_runner
from cairn.export.keras_saved_model import export_saved_model
from cairn.export.verify import onnx_runner, sample_policy_observations

MASKED = gym.spaces.Dict({"observation": gym.spaces.Box(-1.0, 1.0, (5,)),
                          "action_mask": gym.spaces.MultiBinary(7)})
POLICIES = {
    "ppo-multidiscrete": lambda: cairn.Policy(
        MASKED, gym.spaces.MultiDiscrete([3, 4]),
        {"model": {"framework": "keras"}, "observation_filter": "MeanStdFilter"}, seed=0),
    "dqn": lambda: DQNPolicy(MASKED, gym.spaces.Discrete(7), {"model": {"framework": "keras"}}, seed=0),
}


def legal(action: np.ndarray, mask: np.ndarray) -> bool:
    if action.ndim == 1:
        return bool((mask[np.arange(len(action)), action] > 0.5).all())
    return bool((mask[np.arange(len(action)), action[:, 0]] > 0.5).all()
                and (mask[np.arange(len(action)), 3 + action[:, 1]] > 0.5).all())


@pytest.mark.slow
@pytest.mark.parametrize("name", list(POLICIES))
def test_model_keras_and_onnx_of_a_masked_keras_policy(name, tmp_path):
    policy = POLICIES[name]()
    if policy.observation_filter.name == "MeanStdFilter":
        policy.process_observations(sample_policy_observations(policy, 200, seed=1), update=True)
    keras_files = export_model(policy, tmp_path / "keras")  # parity checked inside
    assert keras_files["files"] == {"keras": "model.keras"}
    assert [spec["name"] for spec in keras_files["inputs"]] == ["obs", "action_mask"]
    onnx_files = export_model(policy, tmp_path / "onnx", onnx=18)  # Keras' own ONNX exporter
    assert [spec["name"] for spec in onnx_files["inputs"]] == ["obs", "action_mask"]

    observations = sample_policy_observations(policy, 128, seed=3)
    feeds = model_feeds(policy.observation_space, policy.action_space, observations)
    expected = policy.compute_actions(observations, explore=False)
    for run in (keras_file_runner(tmp_path / "keras" / "model.keras"),
                onnx_runner(str(tmp_path / "onnx" / "model.onnx"))):
        action, scores = run(*feeds.values())
        np.testing.assert_array_equal(action, expected)
        assert legal(action, feeds["action_mask"])
        assert (scores[feeds["action_mask"] <= 0.5] == -1e9).all()


@pytest.mark.slow
@pytest.mark.tf
def test_saved_model_of_a_masked_keras_policy(tmp_path):
    policy = POLICIES["dqn"]()
    signature = export_saved_model(policy, tmp_path / "tf")  # TensorFlow's outputs checked inside
    assert signature["files"] == {"saved_model": "saved_model", "keras": "model.keras"}
    assert [spec["name"] for spec in signature["inputs"]] == ["obs", "action_mask"]
    assert json.loads((tmp_path / "tf" / "signature.json").read_text()) == signature


@pytest.mark.parametrize("name", ["ppo-multidiscrete", "dqn"])
def test_model_keras_acts_legally_when_legal_scores_are_below_the_masked_score(name, tmp_path):
    """ReLU networks on observations of magnitude 1e12: legal logits or Q-values below
    MASKED_SCORE (-1e9) must not let an illegal action win, in the policy or in model.keras."""
    config = {"model": {"framework": "keras", "activation": "relu", "hidden": [16]}}
    policy = (cairn.Policy(MASKED, gym.spaces.MultiDiscrete([3, 4]), config, seed=0) if name != "dqn"
              else DQNPolicy(MASKED, gym.spaces.Discrete(7), config, seed=0))
    rng = np.random.default_rng(0)
    observations = []
    for _ in range(100):
        mask = np.zeros(7, np.int8)
        mask[rng.integers(3)] = 1
        mask[3 + rng.integers(4)] = 1
        if name == "dqn":
            mask[:] = 0
            mask[rng.integers(7)] = 1
        observations.append({"observation": (rng.standard_normal(5) * 1e12).astype(np.float32),
                             "action_mask": mask})
    masks = np.stack([o["action_mask"] for o in observations]).astype(np.float32)
    greedy = policy.compute_actions(observations, explore=False)
    assert legal(greedy, masks)
    export_model(policy, tmp_path)
    feeds = model_feeds(policy.observation_space, policy.action_space, observations)
    action = keras_file_runner(tmp_path / "model.keras")(*feeds.values())[0]
    assert legal(action, masks)
    np.testing.assert_array_equal(action, greedy)
