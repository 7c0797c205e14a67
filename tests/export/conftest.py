"""Shared fixtures for the export tests: small policies (actor-critic and DQN), tiny trained
checkpoints, and loaders that read exported files the way a user without cairn would."""

from __future__ import annotations

import copy
import json
import types
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch

import cairn
from cairn.algorithms.dqn.dqn_policy import DQNPolicy
from cairn.envs import MultiAgentCartPole
from cairn.export import model_inputs

NUM_OBS = 1000


def sample(space: gym.Space[Any], n: int, *, seed: int) -> list[Any]:
    """``n`` seeded observations from a copy of ``space``."""
    space = copy.deepcopy(space)
    space.seed(seed)
    return [space.sample() for _ in range(n)]


def make_policy(obs_space: gym.Space[Any], act_space: gym.Space[Any], *, filtered: bool) -> cairn.Policy:
    """A policy with a fed MeanStdFilter (if ``filtered``) and logits/means of order one.

    The action head starts near zero (gain 0.01); scaling it up makes the Box clipping a case
    that really happens and keeps argmax away from ties.
    """
    config = {"observation_filter": "MeanStdFilter" if filtered else "NoFilter"}
    policy = cairn.Policy(obs_space, act_space, config, seed=0)
    with torch.no_grad():
        policy.model.action_head.weight.mul_(100.0)
    if filtered:
        policy.process_observations(sample(obs_space, 500, seed=1), update=True)
    return policy


def make_dqn_policy(obs_space: gym.Space[Any], act_space: gym.Space[Any], *, filtered: bool,
                    dueling: bool) -> DQNPolicy:
    """A small DQN policy (32x32), its MeanStdFilter fed when ``filtered``."""
    config = {"observation_filter": "MeanStdFilter" if filtered else "NoFilter",
              "dueling": dueling, "model": {"hidden": [32, 32]}}
    policy = DQNPolicy(obs_space, act_space, config, seed=0)
    if filtered:
        policy.process_observations(sample(obs_space, 500, seed=1), update=True)
    return policy


def onnx_outputs(path: Path, obs: np.ndarray) -> list[np.ndarray]:
    """Run ``model.onnx`` in onnxruntime, outputs in graph order."""
    import onnxruntime

    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return list(session.run(None, {"obs": obs}))


def program_outputs(path: Path, obs: np.ndarray) -> list[np.ndarray]:
    """Run ``model.pt2`` with plain torch."""
    module = torch.export.load(str(path)).module()
    with torch.inference_mode():
        return [t.numpy() for t in module(torch.from_numpy(obs))]


def assert_parity(policy: cairn.Policy, outputs: Sequence[np.ndarray], observations: list[Any],
                  model_dir: Path) -> None:
    """``outputs`` of an exported model match the policy on ``observations``.

    Discrete actions must be equal; Box actions, distribution inputs, values and Q-values
    within 1e-5. A DQN policy's outputs are ``action`` and ``q_values`` (``compute_q_values``).
    """
    signature = json.loads((model_dir / "signature.json").read_text())
    names = [spec["name"] for spec in signature["outputs"]]
    assert len(outputs) == len(names)
    got = dict(zip(names, outputs, strict=True))
    expected_action = policy.compute_actions(observations, explore=False)
    action = got["action"]
    assert action.shape == expected_action.shape
    assert action.dtype == expected_action.dtype
    if isinstance(policy.action_space, gym.spaces.Box):
        np.testing.assert_allclose(action, expected_action, rtol=0, atol=1e-5)
    else:
        np.testing.assert_array_equal(action, expected_action)
    if isinstance(policy, DQNPolicy):
        assert names == ["action", "q_values"]
        np.testing.assert_allclose(got["q_values"], policy.compute_q_values(observations),
                                   rtol=1e-5, atol=1e-5)
        np.testing.assert_array_equal(action, got["q_values"].argmax(axis=1) + policy.action_space.start)
        return
    processed = torch.from_numpy(policy.process_observations(observations, update=False))
    with torch.inference_mode():
        inputs = policy.model.action_inputs(processed).numpy()
        value = policy.model.value(processed).numpy()
    assert names[-1:] == ["value"] if "value" in got else "value" not in names
    if "value" in got:  # optional: exported with extra_outputs=["value"]
        np.testing.assert_allclose(got["value"], value, rtol=1e-5, atol=1e-5)
    if "logits" in got:
        np.testing.assert_allclose(got["logits"], inputs, rtol=1e-5, atol=1e-5)
    else:
        size = got["mean"].shape[1]
        np.testing.assert_allclose(got["mean"], inputs[:, :size], rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(got["log_std"], inputs[:, size:], rtol=1e-5, atol=1e-5)


def check_model_dir(policy: cairn.Policy, model_dir: Path, *, seed: int = 2) -> None:
    """Each format in ``model_dir`` (the ones signature.json lists) reproduces ``policy`` on
    NUM_OBS random observations."""
    files = json.loads((model_dir / "signature.json").read_text())["files"]
    assert "torch" in files or "onnx" in files
    observations = sample(policy.observation_space, NUM_OBS, seed=seed)
    obs = model_inputs(policy.observation_space, observations)
    if "torch" in files:
        assert_parity(policy, program_outputs(model_dir / files["torch"], obs), observations, model_dir)
    if "onnx" in files:
        assert_parity(policy, onnx_outputs(model_dir / files["onnx"], obs), observations, model_dir)


@pytest.fixture(scope="session")
def helpers() -> types.SimpleNamespace:
    """The helper functions above, for the test modules."""
    return types.SimpleNamespace(
        sample=sample, make_policy=make_policy, make_dqn_policy=make_dqn_policy,
        onnx_outputs=onnx_outputs,
        program_outputs=program_outputs, assert_parity=assert_parity,
        check_model_dir=check_model_dir, NUM_OBS=NUM_OBS,
    )


def _train_and_save(config: Any, path: Path) -> tuple[dict[str, cairn.Policy], Path]:
    config = (
        config.env_runners(observation_filter="MeanStdFilter")
        .checkpointing(export_native_model_files=True)
        .debugging(seed=0)
    )
    algo = config.build()
    try:
        algo.train()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the env creator lambda cannot be stored
            checkpoint = Path(algo.save(path))
        policies = {pid: algo.get_policy(pid) for pid in algo.policies}
    finally:
        algo.stop()
    return policies, checkpoint


@pytest.fixture(scope="session")
def multi_agent_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, cairn.Policy], Path]:
    """A PPO checkpoint of MultiAgentCartPole(2) with policies p0 and p1, model files on."""
    config = (
        cairn.PPOConfig()
        .environment(lambda cfg: MultiAgentCartPole(2))
        .multi_agent(policies={"p0", "p1"}, policy_mapping_fn={"agent_0": "p0", "agent_1": "p1"})
    )
    return _tiny_ppo(config, tmp_path_factory.mktemp("ma") / "ckpt")


def _tiny_ppo(config: Any, path: Path) -> tuple[dict[str, cairn.Policy], Path]:
    return _train_and_save(config.training(train_batch_size=64, minibatch_size=32, num_epochs=1), path)


def _tiny_dqn(config: Any, path: Path) -> tuple[dict[str, cairn.Policy], Path]:
    """One DQN iteration with a few updates, so that the weights leave their initialisation."""
    config = config.training(train_batch_size=64, num_steps_sampled_before_learning_starts=32,
                             model={"hidden": [32, 32]}).env_runners(rollout_fragment_length=32)
    return _train_and_save(config, path)


@pytest.fixture(scope="session")
def single_agent_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, cairn.Policy], Path]:
    """A PPO checkpoint of Pendulum-v1 (Box actions), model files on."""
    config = cairn.PPOConfig().environment("Pendulum-v1")
    return _tiny_ppo(config, tmp_path_factory.mktemp("sa") / "ckpt")


@pytest.fixture(scope="session")
def dqn_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, cairn.Policy], Path]:
    """A DQN checkpoint of CartPole-v1 (dueling heads, MeanStdFilter), model files on."""
    return _tiny_dqn(cairn.DQNConfig().environment("CartPole-v1"),
                     tmp_path_factory.mktemp("dqn") / "ckpt")


@pytest.fixture(scope="session")
def multi_agent_dqn_checkpoint(
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[dict[str, cairn.Policy], Path]:
    """A DQN checkpoint of MultiAgentCartPole(2): p0 dueling, p1 plain, model files on."""
    config = (
        cairn.DQNConfig()
        .environment(lambda cfg: MultiAgentCartPole(2))
        .multi_agent(policies={"p0": cairn.PolicySpec(), "p1": cairn.PolicySpec(config={"dueling": False})},
                     policy_mapping_fn={"agent_0": "p0", "agent_1": "p1"})
    )
    return _tiny_dqn(config, tmp_path_factory.mktemp("madqn") / "ckpt")
