"""Keras SAC and TD3 (``model.framework="keras"``): the actor and both critics (and TD3's target
actor) are Keras models on the torch backend, trained by the algorithm's torch losses; same start
and same training as the torch policy, exact resume, ``model.keras`` of the deterministic action
path, ONNX and SavedModel exports. TD3 shares SAC's Keras twin critics; each test runs for both."""

from __future__ import annotations

import copy
import json
import subprocess
import sys

import gymnasium as gym
import numpy as np
import pytest
import torch

import cairn
from cairn.algorithms.sac import SACPolicy
from cairn.algorithms.td3 import TD3Policy
from cairn.errors import ConfigError
from cairn.export.verify import onnx_runner
from tests.algorithms.sac.multi_agent_pendulum import make_ma_pendulum
from tests.checkpoint.test_resume_in_process import check_storage_alignment
from tests.conftest import ROOT
from tests.helpers import assert_trains_identically, assert_trees_equal, map_by_index
from tests.keras.plain_keras import plain_keras_outputs

OBS_SPACE = gym.spaces.Box(-3.0, 3.0, (3,), np.float32)
# Asymmetric bounds, and a 2x2 Box whose actions the serving model reshapes.
ACT_SPACES = [gym.spaces.Box(np.array([0.0, -1.0], np.float32), np.array([10.0, 3.0], np.float32)),
              gym.spaces.Box(-2.0, 2.0, (2, 2), np.float32)]
OBS = np.random.default_rng(0).uniform(-3, 3, size=(64, 3)).astype(np.float32)
ALGORITHMS = ["SAC", "TD3"]
POLICY_CLASSES = {"SAC": SACPolicy, "TD3": TD3Policy}
#: The outputs of each algorithm's export: the deterministic action (SAC: with its Gaussian's).
EXPORT_OUTPUTS = {"SAC": ["action", "mean", "log_std"], "TD3": ["action"]}
#: The Keras model names of each algorithm's parts.
PARTS = {"SAC": ("actor", "critic", "target_critic"),
         "TD3": ("actor", "critic", "target_actor", "target_critic")}


def box_policy(algorithm: str, action_space: gym.spaces.Box, framework: str,
               **config: object) -> SACPolicy | TD3Policy:
    model = {"hidden": [32, 32], "framework": framework}
    return POLICY_CLASSES[algorithm](OBS_SPACE, action_space, {"model": model, **config}, seed=4)


def off_policy_config(algorithm: str = "SAC", multi_agent: bool = False, *, framework: str = "keras",
                      **env_runners: object) -> cairn.SACConfig | cairn.TD3Config:
    buffer = {"type": "prioritized" if env_runners else "uniform", "capacity": 1000}
    # SAC: a critic learning rate of its own; TD3: one lr, actor updates every 2nd step.
    own = {"critic_lr": 1e-3} if algorithm == "SAC" else {"lr": 1e-3}
    config_class = cairn.SACConfig if algorithm == "SAC" else cairn.TD3Config
    config = (
        config_class().framework(framework)
        .training(train_batch_size=120, minibatch_size=32, model={"hidden": [16, 16]}, n_step=2,
                  train_freq=2, gradient_steps=2, num_steps_sampled_before_learning_starts=60,
                  replay_buffer_config=buffer, **own)
        .checkpointing(store_replay_buffer=True)
        .env_runners(num_envs_per_env_runner=2, **env_runners)
        .debugging(seed=3)
    )
    if multi_agent:
        return config.environment(make_ma_pendulum, env_config={"num_agents": 2}).multi_agent(
            policies={"p0", "p1"}, policy_mapping_fn=map_by_index)
    return config.environment("Pendulum-v1")


def close(actual: object, expected: object, atol: float = 1e-5) -> None:
    np.testing.assert_allclose(np.asarray(actual), np.asarray(expected), rtol=0, atol=atol)


def as_torch_weights(weights: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """A Keras SAC or TD3 policy's weights under the torch SACModel's / TD3Model's names and
    layouts (kernels transposed to ``[out, in]``; the two critics' layers stacked as TwinQ holds
    them)."""
    out = {"log_alpha": weights["log_alpha"]} if "log_alpha" in weights else {}
    heads = ("mean_head", "log_std_head", "action_head")
    for name, array in weights.items():
        for actor in ("actor", "target_actor"):
            if name.startswith(f"{actor}.variables."):
                layer, variable = name.removeprefix(f"{actor}.variables.").rsplit("_", 1)
                trunk = f"{actor}.trunk.{layer.removeprefix('actor_')}"
                prefix = f"{actor}.{layer}" if layer in heads else trunk
                key = f"{prefix}.{'weight' if variable == 'kernel' else 'bias'}"
                out[key] = array.T if variable == "kernel" else array
    for part in ("critic", "target_critic"):
        layers = sorted({n.removeprefix(f"{part}.variables.q0_").rsplit("_", 1)[0] for n in weights
                         if n.startswith(f"{part}.variables.q0_")}, key=lambda k: (k == "out", k))
        for index, layer in enumerate(layers):
            kernels = [weights[f"{part}.variables.q{i}_{layer}_kernel"] for i in range(2)]
            out[f"{part}.weights.{index}"] = np.stack(kernels)
            out[f"{part}.biases.{index}"] = np.stack(
                [weights[f"{part}.variables.q{i}_{layer}_bias"][None] for i in range(2)])
    return out


@pytest.mark.parametrize("algorithm", ALGORITHMS)
@pytest.mark.parametrize("action_space", ACT_SPACES, ids=["bounds", "2x2"])
def test_keras_policy_starts_from_the_torch_policys_weights_and_acts_the_same(algorithm, action_space):
    keras_policy = box_policy(algorithm, action_space, "keras")
    torch_policy = box_policy(algorithm, action_space, "torch")
    assert type(keras_policy.model).__name__ == f"Keras{algorithm}Model"
    assert_trees_equal(as_torch_weights(keras_policy.get_weights()), torch_policy.get_weights())
    close(keras_policy.compute_action_inputs(OBS), torch_policy.compute_action_inputs(OBS))
    for explore in (False, True):  # the same numpy generator draws the same noise
        close(keras_policy.compute_actions(OBS, explore=explore),
              torch_policy.compute_actions(OBS, explore=explore))
    x = torch.from_numpy(OBS)
    actions = np.random.default_rng(1).uniform(-1, 1, (len(OBS), keras_policy.action_size))
    actions = torch.from_numpy(actions.astype(np.float32))
    keras_model, torch_model = keras_policy.model, torch_policy.model
    with torch.no_grad():
        for name in ("critic", "target_critic"):
            close(getattr(keras_model, name)(x, actions), getattr(torch_model, name)(x, actions))
        close(keras_model.action_inputs(x), torch_model.action_inputs(x))
        if algorithm == "TD3":
            close(keras_model.target_actor(x), torch_model.target_actor(x))
        # what cairn computes layer by layer is the Keras models' own output
        outputs = keras_model.actor.network(x)
        close(torch.cat(list(outputs), -1) if algorithm == "SAC" else outputs, keras_model.action_inputs(x),
              atol=1e-6)
        q0, q1 = keras_model.critic.network([x, actions])
        close(torch.cat([q0, q1], -1).T, keras_model.critic(x, actions), atol=1e-6)


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_keras_policy_trains_as_the_torch_policy_does(algorithm):
    """From the same weights, the same losses, gradients and Adam steps: TD3's critic and delayed
    actor losses (and SAC's) on Keras networks move them as on the torch ones."""
    keras_algo = off_policy_config(algorithm).build()
    torch_algo = off_policy_config(algorithm, framework="torch").build()
    for _ in range(2):  # 240 env steps; 2 gradient steps per 4 of them after the first 60
        keras_result, torch_result = keras_algo.train(), torch_algo.train()
    assert keras_algo.get_policy().num_grad_updates == torch_algo.get_policy().num_grad_updates >= 90
    keras_stats = keras_result["learners"]["default_policy"]
    torch_stats = torch_result["learners"]["default_policy"]
    for name in ("critic_loss", "actor_loss", "q_mean", "target_mean"):  # the second iteration's means
        np.testing.assert_allclose(keras_stats[name], torch_stats[name], rtol=1e-4, atol=1e-5, err_msg=name)
    trained = as_torch_weights(keras_algo.get_policy().get_weights())
    expected = torch_algo.get_policy().get_weights()
    assert trained.keys() == expected.keys()
    for name in expected:  # the same losses and Adam on the same numbers, up to the products' rounding
        close(trained[name], expected[name], atol=1e-4)
    keras_algo.stop()
    torch_algo.stop()


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_keras_variables_are_what_the_optimizer_groups_train_and_the_targets_follow(algorithm):
    algo = off_policy_config(algorithm).training(num_steps_sampled_before_learning_starts=0).build()
    policy = algo.get_policy()
    model = policy.model
    groups = {g["name"]: {id(p) for p in g["params"]} for g in policy.optimizer.param_groups}
    assert groups["actor"] == {id(v.value) for v in model.actor.network.trainable_variables}
    assert groups["critic"] == {id(v.value) for v in model.critic.network.trainable_variables}
    assert groups.pop("alpha", set()) == ({id(model.log_alpha)} if algorithm == "SAC" else set())
    assert set(groups) == {"actor", "critic"}
    trained = set().union(*groups.values())
    for target in (name for name in PARTS[algorithm] if name.startswith("target_")):
        ids = {id(v.value) for v in getattr(model, target).network.variables}
        assert ids == {id(p) for p in getattr(model, target).parameters()} and not ids & trained
        assert not any(p.requires_grad for p in getattr(model, target).parameters())
    before = {name: w.copy() for name, w in policy.get_weights().items()}
    algo.train()
    after = policy.get_weights()
    moved = {name for name in before if not np.array_equal(before[name], after[name])}
    assert moved == set(before), sorted(set(before) - moved)  # actor, critics, targets (Polyak), alpha
    for source in ("actor", "critic"):
        if f"target_{source}" not in PARTS[algorithm]:
            continue
        part = {n.removeprefix(f"{source}."): w for n, w in after.items() if n.startswith(f"{source}.")}
        target = {n.removeprefix(f"target_{source}."): w for n, w in after.items()
                  if n.startswith(f"target_{source}.")}
        assert part.keys() == target.keys() and any(not np.array_equal(part[n], target[n]) for n in part)
    algo.stop()


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_copies_of_keras_networks_compute_with_their_own_variables(algorithm):
    model = box_policy(algorithm, ACT_SPACES[0], "keras").model
    copied = copy.deepcopy(model)
    for part in PARTS[algorithm]:
        network = getattr(copied, part).network
        own = {id(p) for p in getattr(copied, part).parameters()}
        assert {id(v.value) for v in network.variables} == own
        assert not own & {id(p) for p in model.parameters()}
    with torch.no_grad():
        for p in copied.parameters():
            p.add_(0.5)
        x, actions = torch.from_numpy(OBS), torch.zeros(len(OBS), 2)
        assert not np.allclose(copied.action_inputs(x), model.action_inputs(x))
        assert not np.allclose(copied.critic(x, actions), model.critic(x, actions))
    if algorithm == "SAC":  # SAC's Keras actor acts in numpy too (TD3's runs its layers in torch)
        np.testing.assert_allclose(copied.numpy_action_inputs(OBS),
                                   copied.action_inputs(torch.from_numpy(OBS)).detach(), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("algorithm", ALGORITHMS)
@pytest.mark.parametrize("multi_agent, env_runners", [
    (False, {"observation_filter": "MeanStdFilter"}),
    pytest.param(True, {}, marks=pytest.mark.slow),
], ids=["sa-MeanStdFilter-prioritized", "ma-NoFilter-uniform"])
def test_keras_policy_resumes_exactly(tmp_path, algorithm, multi_agent, env_runners):
    algo = off_policy_config(algorithm, multi_agent, **env_runners).build()
    for _ in range(2):
        algo.train()
    restored = cairn.Algorithm.from_checkpoint(algo.save(tmp_path / "c"))
    state = algo.get_state()
    assert_trees_equal(state, restored.get_state())
    for policy_id in algo.policies:
        assert type(restored.get_policy(policy_id).model).__name__ == f"Keras{algorithm}Model"
        check_storage_alignment(restored.get_policy(policy_id))
        own = ({"actor.variables.mean_head_kernel", "log_alpha"} if algorithm == "SAC" else
               {"actor.variables.action_head_kernel", "target_actor.variables.action_head_kernel"})
        assert {"critic.variables.q1_out_bias", "target_critic.variables.q1_out_bias",
                *own} <= set(state["policies"][policy_id]["weights"])
    assert_trains_identically(algo, restored)
    algo.stop()
    restored.stop()


def check_extra_outputs(policy: SACPolicy | TD3Policy, obs: np.ndarray, extras: list[np.ndarray]) -> None:
    """SAC's ``mean`` and ``log_std`` outputs are its action inputs; TD3 exports none."""
    if not isinstance(policy, SACPolicy):
        assert extras == []
        return
    inputs = policy.compute_action_inputs(policy.process_observations(obs, update=False))
    np.testing.assert_allclose(np.concatenate(extras, -1), inputs, rtol=1e-5, atol=1e-5)


@pytest.mark.slow
def test_model_keras_is_the_greedy_action_path_and_loads_with_plain_keras(tmp_path):
    # SAC's and TD3's files, both action spaces, loaded by one plain-Keras process (one Keras
    # start-up instead of one per algorithm: each file is still loaded and checked on its own).
    policies, paths = [], []
    for algorithm in ALGORITHMS:
        for i, action_space in enumerate(ACT_SPACES):
            policy = box_policy(algorithm, action_space, "keras", observation_filter="MeanStdFilter")
            head = policy.model.actor.mean_head if algorithm == "SAC" else policy.model.actor.action_head
            with torch.no_grad():  # actions that reach the tanh's flat ends: the bounds clip some
                head.kernel.value.mul_(30.0)
            policy.process_observations(OBS, update=True)
            policy.export_checkpoint(tmp_path / f"{algorithm}_p{i}")
            signature = json.loads((tmp_path / f"{algorithm}_p{i}/model/signature.json").read_text())
            assert [o["name"] for o in signature["outputs"]] == EXPORT_OUTPUTS[algorithm]
            policies.append(policy)
            paths.append(str(tmp_path / f"{algorithm}_p{i}/model/model.keras"))
    obs = OBS * 1.5
    outputs = plain_keras_outputs(paths, obs, tmp_path)
    for policy, (action, *extras) in zip(policies, outputs, strict=True):
        expected = policy.compute_actions(obs, explore=False)
        assert action.shape == expected.shape == (len(obs), *policy.action_space.shape)
        np.testing.assert_allclose(action, expected, rtol=0, atol=1e-5)
        low, high = policy.action_space.low, policy.action_space.high
        assert (np.isclose(expected, low) | np.isclose(expected, high)).any()
        check_extra_outputs(policy, obs, extras)


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_onnx_of_a_keras_policy_matches_the_policy(tmp_path, algorithm):
    policy = box_policy(algorithm, ACT_SPACES[0], "keras", observation_filter="MeanStdFilter")
    policy.process_observations(OBS, update=True)
    signature = cairn.export.export_model(policy, tmp_path / "m", onnx=18)  # parity checked inside
    assert signature["files"] == {"onnx": "model.onnx"}
    assert [o["name"] for o in signature["outputs"]] == EXPORT_OUTPUTS[algorithm]
    action, *extras = onnx_runner(str(tmp_path / "m/model.onnx"))(OBS)
    np.testing.assert_allclose(action, policy.compute_actions(OBS, explore=False), rtol=0, atol=1e-5)
    check_extra_outputs(policy, OBS, extras)


@pytest.mark.slow
@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_cairn_export_onnx_cli_on_a_keras_checkpoint(tmp_path, algorithm):
    algo = off_policy_config(algorithm, observation_filter="MeanStdFilter").build()
    algo.train()
    path = algo.save(tmp_path / "c")
    subprocess.run([sys.executable, "-m", "cairn", "export", path, "--format", "onnx",
                    "--out", str(tmp_path / "onnx")],
                   check=True, cwd=ROOT, capture_output=True)
    obs = np.random.default_rng(1).normal(size=(32, 3)).astype(np.float32)
    action, *_ = onnx_runner(str(tmp_path / "onnx/model.onnx"))(obs)
    np.testing.assert_allclose(action, algo.get_policy().compute_actions(obs, explore=False),
                               rtol=0, atol=1e-5)
    algo.stop()


_SERVE = """
import json, os
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "2"
import numpy as np
import tensorflow as tf
report = {{}}
for name, path in {paths!r}.items():
    served = tf.saved_model.load(path)  # held: a temporary's variables are freed before serve() runs
    outputs = served.serve(tf.constant(np.asarray({obs!r}, dtype=np.float32)))
    action = outputs[0] if isinstance(outputs, (list, tuple)) else outputs  # TD3's one output comes alone
    report[name] = action.numpy().tolist()
print(json.dumps(report))
"""


@pytest.mark.tf
@pytest.mark.slow
def test_saved_model_export_of_a_keras_policy_serves_its_greedy_actions(tmp_path):
    # SAC's and TD3's SavedModels, served by one TensorFlow process (one TensorFlow start-up, of
    # several seconds, instead of one per algorithm; each model is loaded and served on its own).
    from cairn.export.keras_saved_model import export_saved_model

    policies, paths = {}, {}
    for algorithm in ALGORITHMS:
        policy = box_policy(algorithm, ACT_SPACES[1], "keras", observation_filter="MeanStdFilter")
        policy.process_observations(OBS, update=True)
        signature = export_saved_model(policy, tmp_path / algorithm)  # its outputs checked inside
        assert signature["files"] == {"saved_model": "saved_model", "keras": "model.keras"}
        policies[algorithm], paths[algorithm] = policy, str(tmp_path / algorithm / "saved_model")
    report = subprocess.run([sys.executable, "-c", _SERVE.format(paths=paths, obs=OBS.tolist())],
                            check=True, capture_output=True, text=True, cwd=tmp_path).stdout
    served = json.loads(report.strip().splitlines()[-1])
    assert sorted(served) == sorted(ALGORITHMS)
    for algorithm, policy in policies.items():
        np.testing.assert_allclose(np.asarray(served[algorithm], np.float32),
                                   policy.compute_actions(OBS, explore=False), rtol=0, atol=1e-5,
                                   err_msg=algorithm)


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_a_users_keras_model_is_a_config_error(algorithm):
    # (image observations get the CNN encoders: tests/keras/test_keras_encoders.py)
    with pytest.raises(ConfigError, match=f"not supported by {algorithm}"):
        POLICY_CLASSES[algorithm](OBS_SPACE, ACT_SPACES[0],
                  {"model": {"framework": "keras", "keras_model": "tests.keras.builders:small_actor_critic"}},
                  seed=0)


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_flattened_images_need_no_encoder(algorithm):
    space = gym.spaces.Box(0, 255, (8, 8, 1), np.uint8)
    policy = POLICY_CLASSES[algorithm](space, ACT_SPACES[0],
                       {"model": {"framework": "keras", "hidden": [8], "conv_filters": []}}, seed=0)
    assert policy.compute_actions([space.sample()], explore=False).shape == (1, 2)


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_a_keras_checkpoint_restores_as_a_policy_alone(tmp_path, algorithm):
    policy = box_policy(algorithm, ACT_SPACES[0], "keras")
    policy.export_checkpoint(tmp_path / "p")
    assert (tmp_path / "p/model/model.keras").is_file()  # written and checked against the policy
    restored = cairn.Policy.from_checkpoint(tmp_path / "p")
    assert type(restored.model).__name__ == f"Keras{algorithm}Model"
    np.testing.assert_array_equal(restored.compute_action_inputs(OBS), policy.compute_action_inputs(OBS))
    assert_trees_equal(policy.get_state(), restored.get_state())
    copied = cairn.Policy.from_state(policy.get_state())  # copies into fresh storage instead of adopting
    np.testing.assert_array_equal(copied.compute_action_inputs(OBS), policy.compute_action_inputs(OBS))
    assert {id(v.value) for v in copied.model.network.variables} <= {id(p) for p in copied.model.parameters()}

