"""Masked policies export with two inputs, ``obs`` and ``action_mask``, and never act illegally."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch

import cairn
from cairn.algorithms.dqn.dqn_policy import DQNPolicy
from cairn.errors import ExportError
from cairn.export import export_model, input_spec, model_feeds, model_inputs
from cairn.export.verify import check_against_policy, with_legal_masks
from cairn.policy.action_masking import MASKED_SCORE, action_sizes
from tests.models.nets import MaskAware, TwoHeads

BOARD = gym.spaces.Dict({"observation": gym.spaces.Box(0, 1, (3, 3, 2), np.int8),
                         "action_mask": gym.spaces.Box(0, 1, (9,), np.int8)})
FLAT = gym.spaces.Dict({"observation": gym.spaces.Box(-1.0, 1.0, (5,)),
                        "action_mask": gym.spaces.MultiBinary(7)})
SEVERAL = gym.spaces.Dict({"position": gym.spaces.Box(-2.0, 2.0, (3,)), "phase": gym.spaces.Discrete(3),
                           "action_mask": gym.spaces.MultiBinary(4)})
NUM_OBS = 500


def sparse_legal_observations(policy: cairn.Policy, n: int, *, seed: int) -> list[Any]:
    """``n`` observations whose masks allow few actions (each entry legal with probability 0.2,
    then one legal action added where a (sub-)action had none): argmax without the mask would
    pick an illegal action for most rows."""
    space = copy.deepcopy(policy.observation_space)
    space.seed(seed)
    rng = np.random.default_rng(seed)
    observations = []
    for _ in range(n):
        obs = dict(space.sample())
        mask = space["action_mask"]
        obs["action_mask"] = (rng.random(mask.shape) < 0.2).astype(mask.dtype)
        observations.append(obs)
    return with_legal_masks(observations, action_sizes(policy.action_space), seed=seed)


def ppo(obs_space: gym.Space[Any], act_space: gym.Space[Any], **config: Any) -> cairn.Policy:
    policy = cairn.Policy(obs_space, act_space, config, seed=0)
    if config.get("observation_filter") == "MeanStdFilter":
        space = copy.deepcopy(obs_space)
        space.seed(1)
        policy.process_observations([space.sample() for _ in range(300)], update=True)
    return policy


POLICIES = {
    "ppo-discrete": lambda: ppo(BOARD, gym.spaces.Discrete(9)),
    "ppo-multidiscrete": lambda: ppo(FLAT, gym.spaces.MultiDiscrete([3, 4])),
    "ppo-dict-filtered": lambda: ppo(SEVERAL, gym.spaces.Discrete(4, start=1),
                                     observation_filter="MeanStdFilter"),
    "ppo-mask-aware": lambda: ppo(BOARD, gym.spaces.Discrete(9), model={"custom_model": MaskAware}),
    "ppo-custom": lambda: ppo(FLAT, gym.spaces.MultiDiscrete([3, 4]), model={"custom_model": TwoHeads}),
    "dqn": lambda: DQNPolicy(BOARD, gym.spaces.Discrete(9), {"model": {"hidden": [32, 32]}}, seed=0),
    "dqn-filtered": lambda: DQNPolicy(FLAT, gym.spaces.Discrete(7), {"observation_filter": "MeanStdFilter"},
                                      seed=0),
}


def run_export(model_dir: Path, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    """The exported model's outputs, read as a user would (onnxruntime or plain torch)."""
    files = json.loads((model_dir / "signature.json").read_text())["files"]
    if "onnx" in files:
        import onnxruntime

        session = onnxruntime.InferenceSession(str(model_dir / files["onnx"]),
                                               providers=["CPUExecutionProvider"])
        assert [i.name for i in session.get_inputs()] == list(feeds)
        return list(session.run(None, feeds))
    program = torch.export.load(str(model_dir / files["torch"])).module()
    with torch.inference_mode():
        return [t.numpy() for t in program(*(torch.from_numpy(x) for x in feeds.values()))]


def assert_legal(action: np.ndarray, masks: np.ndarray, action_space: gym.Space[Any]) -> None:
    """Every action is allowed by its row's mask."""
    if isinstance(action_space, gym.spaces.Discrete):
        chosen = masks[np.arange(len(action)), action - int(action_space.start)]
        assert (chosen > 0.5).all()
        return
    offsets = np.cumsum([0, *action_space.nvec[:-1]])  # type: ignore[attr-defined]
    for k, offset in enumerate(offsets):
        assert (masks[np.arange(len(action)), offset + action[:, k]] > 0.5).all()


@pytest.mark.parametrize("onnx", [None, 18])
@pytest.mark.parametrize("name", list(POLICIES))
def test_masked_export_matches_the_policy_and_acts_legally(name: str, onnx: int | None,
                                                           tmp_path: Path) -> None:
    if onnx is not None:
        pytest.importorskip("onnxruntime")
    policy = POLICIES[name]()
    signature = export_model(policy, tmp_path, onnx=onnx)

    obs_spec = input_spec(policy.network_observation_space).to_json()
    assert [spec["name"] for spec in signature["inputs"]] == ["obs", "action_mask"]
    assert signature["inputs"][0] == obs_spec
    assert signature["inputs"][1]["dtype"] == "float32"
    assert signature["inputs"][1]["shape"] == ["batch", policy.action_mask_size]

    observations = sparse_legal_observations(policy, NUM_OBS, seed=3)
    feeds = model_feeds(policy.observation_space, policy.action_space, observations)
    outputs = run_export(tmp_path, feeds)
    expected_action = policy.compute_actions(observations, explore=False)
    np.testing.assert_array_equal(outputs[0], expected_action)
    assert_legal(outputs[0], feeds["action_mask"], policy.action_space)
    scores = outputs[1]  # logits or Q-values: masked exactly as the policy masks them
    assert (scores[feeds["action_mask"] <= 0.5] == np.float32(MASKED_SCORE)).all()
    processed = torch.from_numpy(policy.process_observations(observations, update=False))
    with torch.inference_mode():
        expected = (policy.model(processed) if isinstance(policy, DQNPolicy)
                    else policy.model.action_inputs(processed)).numpy()
    np.testing.assert_allclose(scores, expected, rtol=1e-5, atol=1e-5)


def test_value_output_and_the_checks_of_a_masked_export(tmp_path: Path) -> None:
    policy = POLICIES["ppo-multidiscrete"]()
    signature = export_model(policy, tmp_path, extra_outputs=["value"])
    assert [o["name"] for o in signature["outputs"]] == ["action", "logits", "value"]
    program = torch.export.load(str(tmp_path / "model.pt2"))
    assert list(program.graph_signature.user_inputs) == ["obs", "action_mask"]

    # The check every export runs feeds both inputs, and catches a model that ignores the mask.
    def unmasked(obs: np.ndarray, mask: np.ndarray) -> list[np.ndarray]:
        with torch.inference_mode():
            logits = policy.model.net.action_inputs(torch.from_numpy(obs)).numpy()
            value = policy.model.net.value(torch.from_numpy(obs)).numpy()
        action = np.stack([logits[:, :3].argmax(1), logits[:, 3:].argmax(1)], axis=1)
        return [action.astype(policy.action_space.dtype), logits, value]

    with pytest.raises(ExportError, match="chose different actions"):
        check_against_policy(policy, unmasked, "model", graph=policy.export_graph())


def test_model_inputs_and_feeds_of_masked_observations() -> None:
    obs = [{"position": np.array([0.5, -1.0, 2.0], np.float32), "phase": 2,
            "action_mask": np.array([0, 1, 1, 0], np.int8)}]
    feeds = model_feeds(SEVERAL, gym.spaces.Discrete(4), obs)
    assert list(feeds) == ["obs", "action_mask"]
    # Keys in the space's (sorted) order: phase one-hot, then position.
    np.testing.assert_array_equal(feeds["obs"], [[0.0, 0.0, 1.0, 0.5, -1.0, 2.0]])
    np.testing.assert_array_equal(feeds["action_mask"], [[0.0, 1.0, 1.0, 0.0]])
    assert feeds["action_mask"].dtype == np.float32
    obs_only = model_inputs(SEVERAL, obs, action_space=gym.spaces.Discrete(4))
    np.testing.assert_array_equal(obs_only, feeds["obs"])
    # Box actions: "action_mask" is an ordinary part of the observation, and there is one input.
    box_feeds = model_feeds(SEVERAL, gym.spaces.Box(-1.0, 1.0, (2,)), obs)
    assert list(box_feeds) == ["obs"] and box_feeds["obs"].shape == (1, 10)
    board = model_feeds(BOARD, gym.spaces.Discrete(9), [])
    assert board["obs"].shape == (0, 3, 3, 2) and board["action_mask"].shape == (0, 9)


def test_filter_fold_applies_to_the_obs_input_of_a_masked_onnx_model(tmp_path: Path) -> None:
    onnx = pytest.importorskip("onnx")
    pytest.importorskip("onnxruntime")
    policy = POLICIES["dqn-filtered"]()
    export_model(policy, tmp_path, onnx=18)
    graph = onnx.load(str(tmp_path / "model.onnx")).graph
    assert [i.name for i in graph.input] == ["obs", "action_mask"]
    assert [n.op_type for n in graph.node if "obs" in n.input] == ["BatchNormalization"]


def test_native_model_files_of_a_masked_policy(tmp_path: Path) -> None:
    policy = POLICIES["ppo-discrete"]()
    checkpoint = tmp_path / "ckpt"
    policy.export_checkpoint(checkpoint, export_native_model_files=True)
    assert cairn.get_checkpoint_info(checkpoint)["native_model"]["status"] == "ok"
    signature = json.loads((checkpoint / "model" / "signature.json").read_text())
    assert [spec["name"] for spec in signature["inputs"]] == ["obs", "action_mask"]
    observations = sparse_legal_observations(policy, 100, seed=5)
    feeds = model_feeds(policy.observation_space, policy.action_space, observations)
    np.testing.assert_array_equal(run_export(checkpoint / "model", feeds)[0],
                                  policy.compute_actions(observations, explore=False))


HUGE = gym.spaces.Dict({"observation": gym.spaces.Box(-1.0, 1.0, (4,)),
                        "action_mask": gym.spaces.MultiBinary(5)})
HUGE_POLICIES = {  # ReLU networks: observations of magnitude 1e12 give scores far below MASKED_SCORE
    "ppo-discrete": lambda: cairn.Policy(HUGE, gym.spaces.Discrete(5), {"model": {"activation": "relu"}},
                                         seed=0),
    "ppo-multidiscrete": lambda: cairn.Policy(HUGE, gym.spaces.MultiDiscrete([2, 3]),
                                              {"model": {"activation": "relu"}}, seed=0),
    "dqn": lambda: DQNPolicy(HUGE, gym.spaces.Discrete(5), {"model": {"activation": "relu", "hidden": [16]}},
                             seed=0),
}


def _huge_observations(policy: cairn.Policy, n: int) -> list[Any]:
    """Observations of magnitude 1e12 whose masks leave one legal action per (sub-)action."""
    rng = np.random.default_rng(0)
    sizes = action_sizes(policy.action_space)
    observations = []
    for _ in range(n):
        mask = np.zeros(sum(sizes), np.int8)
        for start, size in zip(np.cumsum([0, *sizes[:-1]]), sizes, strict=True):
            mask[start + rng.integers(size)] = 1
        observations.append({"observation": (rng.standard_normal(4) * 1e12).astype(np.float32),
                             "action_mask": mask})
    return observations


def _legal(policy: cairn.Policy, observations: list[Any], actions: np.ndarray) -> np.ndarray:
    sizes = action_sizes(policy.action_space)
    starts = np.cumsum([0, *sizes[:-1]])
    columns = np.asarray(actions).reshape(len(observations), len(sizes))
    return np.array([[obs["action_mask"][start + a] == 1 for start, a in zip(starts, row, strict=True)]
                     for obs, row in zip(observations, columns, strict=True)]).all(axis=1)


@pytest.mark.parametrize("name", list(HUGE_POLICIES))
def test_scores_below_the_masked_score_still_give_legal_actions(name: str, tmp_path: Path) -> None:
    """A legal action's logit or Q-value below MASKED_SCORE (-1e9) must not let an illegal
    action win: greedy and sampled actions of the policy, and the exported models' actions,
    are legal (and the exports equal the policy)."""
    pytest.importorskip("onnxruntime")
    import onnxruntime

    policy = HUGE_POLICIES[name]()
    observations = _huge_observations(policy, 200)
    processed = policy.process_observations(observations, update=False)
    scores = policy.compute_action_inputs(processed)
    legal_scores = np.where(processed[:, policy.preprocessor.size:] > 0.5, scores, np.inf)
    assert (legal_scores < MASKED_SCORE).any()  # the case is real
    greedy = policy.compute_actions(observations, explore=False)
    assert _legal(policy, observations, greedy).all()
    assert _legal(policy, observations, policy.compute_actions(observations, explore=True)).all()
    feeds = model_feeds(policy.observation_space, policy.action_space, observations)
    export_model(policy, tmp_path / "torch")
    program = torch.export.load(str(tmp_path / "torch" / "model.pt2")).module()
    with torch.inference_mode():
        program_action = program(*(torch.from_numpy(x) for x in feeds.values()))[0].numpy()
    export_model(policy, tmp_path / "onnx", onnx=18)
    session = onnxruntime.InferenceSession(str(tmp_path / "onnx" / "model.onnx"),
                                           providers=["CPUExecutionProvider"])
    onnx_action = session.run(None, feeds)[0]
    for action in (program_action, onnx_action):
        assert _legal(policy, observations, action).all()
        np.testing.assert_array_equal(action, greedy)
