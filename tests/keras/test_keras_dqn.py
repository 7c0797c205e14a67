"""DQN with a Keras Q-network (``framework="keras"``): same start as torch, exact resume, exports."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch

import cairn
from cairn.algorithms.dqn.dqn_policy import DQNPolicy
from cairn.errors import ConfigError
from cairn.export.verify import onnx_runner
from tests.conftest import ROOT
from tests.helpers import (
    assert_trains_identically,
    assert_trees_equal,
    make_ma_cartpole,
    map_by_index,
    weights_digest,
)
from tests.keras.plain_keras import plain_keras_outputs

KERAS = {"model": {"framework": "keras"}}
SPACE, ACTIONS = gym.spaces.Box(-5, 5, (4,)), gym.spaces.Discrete(3)
OBS = np.random.default_rng(0).normal(size=(16, 4)).astype(np.float32)


def _dqn(multi_agent: bool = False) -> cairn.DQNConfig:
    config = (cairn.DQNConfig().framework("keras").debugging(seed=0)
              .env_runners(num_envs_per_env_runner=2, observation_filter="MeanStdFilter")
              .checkpointing(store_replay_buffer=True)
              .training(num_steps_sampled_before_learning_starts=64, train_batch_size=64, minibatch_size=32,
                        target_network_update_freq=100, model={"hidden": [32]}))
    if multi_agent:
        return config.environment(make_ma_cartpole, env_config={"num_agents": 2}).multi_agent(
            policies={"p0", "p1"}, policy_mapping_fn=map_by_index)
    return config.environment("CartPole-v1")


@pytest.mark.parametrize("dueling", [True, False])
def test_a_keras_q_network_starts_from_the_torch_ones_weights_and_computes_the_same(dueling):
    config = {"dueling": dueling, "model": {"hidden": [16, 8]}}
    keras_policy = DQNPolicy(SPACE, ACTIONS, {**config, "model": {**config["model"], "framework": "keras"}},
                             seed=1)
    torch_policy = DQNPolicy(SPACE, ACTIONS, config, seed=1)
    assert type(keras_policy.model).__name__ == "KerasQNetwork"
    np.testing.assert_allclose(keras_policy.compute_q_values(OBS), torch_policy.compute_q_values(OBS),
                               atol=1e-5)
    np.testing.assert_array_equal(keras_policy.compute_actions(OBS, explore=False),
                                  torch_policy.compute_actions(OBS, explore=False))
    with torch.no_grad():  # the layer-by-layer path cairn trains is the Keras model's own output
        x = torch.from_numpy(OBS)
        np.testing.assert_allclose(keras_policy.model.network(x), keras_policy.model(x), atol=1e-6)
    # the target network is a copy with its own variables, equal at the start
    target, model = keras_policy.target_model, keras_policy.model
    assert {id(p) for p in target.parameters()}.isdisjoint(id(p) for p in model.parameters())
    assert {id(v.value) for v in target.network.variables} == {id(p) for p in target.parameters()}


@pytest.mark.parametrize("multi_agent", [False, True], ids=["single", "multi"])
def test_dqn_with_a_keras_q_network_trains_and_resumes_exactly(tmp_path, multi_agent):
    algo = _dqn(multi_agent).build()
    for _ in range(3):
        result = algo.train()
    assert {stats["update_backend"] for stats in result["learners"].values()} == {"torch"}
    path = Path(algo.save(tmp_path / "c"))
    restored = cairn.Algorithm.from_checkpoint(path)
    assert type(restored.get_policy(sorted(restored.policies)[0]).model).__name__ == "KerasQNetwork"
    assert_trees_equal(algo.get_state(), restored.get_state())
    assert_trains_identically(algo, restored)
    for pid in algo.policies:
        assert (path / f"policies/{pid}/model/model.keras").is_file()


def test_update_backend_numpy_is_refused_for_a_keras_q_network():
    with pytest.raises(ConfigError, match="update_backend='numpy' cannot train"):
        _dqn().training(update_backend="numpy").build()


def test_a_users_keras_q_model_trains_restores_and_exports(tmp_path):
    algo = _dqn().training(model={"keras_model": "tests.keras.builders:small_q_network"}).build()
    algo.train()
    policy = algo.get_policy()
    assert sorted(policy.model.state_dict()) == [f"variables.variable_{i}" for i in range(4)]
    restored = cairn.Algorithm.from_checkpoint(algo.save(tmp_path / "c"))
    np.testing.assert_array_equal(restored.get_policy().compute_q_values(OBS), policy.compute_q_values(OBS))
    algo.train()
    restored.train()
    assert weights_digest(restored) == weights_digest(algo)
    cairn.export.export_model(policy, tmp_path / "m", onnx=18)  # parity checked inside


def test_a_users_keras_q_model_with_batchnorm_learns_in_training_mode_and_acts_in_eval_mode(tmp_path):
    """As for PPO (test_keras_policy.py): before, a user's Keras Q-network was called without
    ``training``, so its BatchNormalization never moved its statistics while learning."""
    algo = _dqn().training(model={"keras_model": "tests.keras.builders:noisy_q_network"}).build()
    policy = algo.get_policy()
    bn = policy.model.network.get_layer("bn")
    moving = np.array(bn.moving_mean.numpy())
    q = policy.compute_q_values(OBS)
    np.testing.assert_array_equal(policy.compute_q_values(OBS), q)
    np.testing.assert_array_equal(np.array(bn.moving_mean.numpy()), moving)  # acting moved nothing
    algo.train()
    assert not np.array_equal(np.array(bn.moving_mean.numpy()), moving)  # learning did
    assert policy.switches_modes and not policy.model.training
    restored = cairn.Algorithm.from_checkpoint(algo.save(tmp_path / "c"))
    np.testing.assert_array_equal(restored.get_policy().compute_q_values(OBS), policy.compute_q_values(OBS))


def test_a_users_keras_model_with_the_wrong_outputs_is_refused_for_dqn():
    config = {"model": {"framework": "keras", "keras_model": "tests.keras.builders:small_actor_critic"}}
    with pytest.raises(ConfigError, match="expected a keras.Model with one output for DQN"):
        DQNPolicy(SPACE, ACTIONS, config, seed=0)


def test_onnx_of_a_keras_dqn_policy_gives_its_greedy_actions_and_q_values(tmp_path):
    policy = DQNPolicy(gym.spaces.Box(-2, 2, (2, 3)), gym.spaces.Discrete(4, start=2),
                       {**KERAS, "observation_filter": "MeanStdFilter"}, seed=0)
    obs = np.random.default_rng(1).uniform(-2, 2, size=(32, 2, 3)).astype(np.float32)
    policy.process_observations(obs, update=True)  # filter statistics that are not the identity
    signature = cairn.export.export_model(policy, tmp_path / "m", onnx=18)  # parity checked inside
    assert [o["name"] for o in signature["outputs"]] == ["action", "q_values"]
    action, q_values = onnx_runner(str(tmp_path / "m/model.onnx"))(
        cairn.export.model_inputs(policy.observation_space, obs))
    np.testing.assert_array_equal(action, policy.compute_actions(obs, explore=False))
    np.testing.assert_allclose(q_values, policy.compute_q_values(obs), atol=1e-5)


def test_cairn_export_and_model_keras_of_a_keras_dqn_checkpoint_load_without_cairn(tmp_path):
    algo = _dqn().build()
    algo.train()
    policy = algo.get_policy()
    path = algo.save(tmp_path / "c")
    obs = OBS * 2
    [(action, q_values)] = plain_keras_outputs(
        [Path(path) / "policies/default_policy/model/model.keras"], obs, tmp_path)
    assert action.tolist() == policy.compute_actions(obs, explore=False).tolist()
    np.testing.assert_allclose(q_values, policy.compute_q_values(obs), atol=1e-5)

    subprocess.run([sys.executable, "-m", "cairn", "export", path, "--format", "onnx",
                    "--out", str(tmp_path / "onnx")],
                   check=True, cwd=ROOT, capture_output=True)
    action, q_values = onnx_runner(str(tmp_path / "onnx/model.onnx"))(obs)
    np.testing.assert_array_equal(action, policy.compute_actions(obs, explore=False))
    np.testing.assert_allclose(q_values, policy.compute_q_values(obs), atol=1e-5)


@pytest.mark.parametrize("builder, match", [
    ("int_input_q_network", r"input has dtype 'int32'; cairn feeds float32 observations"),
    ("unbuilt_sequential_q_network", r"returned Sequential; .*Sequential without keras.Input"),
])
def test_a_users_keras_q_network_that_cannot_take_the_observations_is_refused_at_build(builder, match):
    with pytest.raises(ConfigError, match=match):
        model = {"framework": "keras", "keras_model": f"tests.keras.builders:{builder}"}
        _dqn().training(model=model).build()
