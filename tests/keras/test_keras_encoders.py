"""Keras policies with the CNN / per-part encoders (cairn/policy/keras_encoders.py): the torch
encoder's network and start, the per-layer path, copies, exact resume, model.keras and ONNX."""

from __future__ import annotations

import copy
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch

import cairn
from cairn.algorithms.dqn.dqn_policy import DQNPolicy
from cairn.algorithms.sac import SACPolicy
from cairn.algorithms.td3 import TD3Policy
from cairn.export.verify import onnx_runner
from cairn.policy.encoders import encoder_description, encoder_parameter_count
from cairn.rng import make_rng, rng_state
from tests.helpers import assert_trains_identically, assert_trees_equal
from tests.keras.plain_keras import plain_keras_outputs

SMALL = {"hidden": [8], "conv_filters": [[4, 4, 2], [8, 3, 1]], "conv_dense": 16}
KERAS = {**SMALL, "framework": "keras"}
GREY = gym.spaces.Box(0, 255, (16, 16), np.uint8)
STACK = gym.spaces.Box(0, 255, (2, 16, 16), np.uint8)  # channels first
COLOUR = gym.spaces.Box(0, 255, (12, 12, 3), np.uint8)  # channels last: transposed in the network
UNIT = gym.spaces.Box(0.0, 1.0, (3, 12, 12), np.float32)  # not scaled
DICT = gym.spaces.Dict({"camera": COLOUR, "speed": gym.spaces.Box(-1.0, 1.0, (2,), np.float32),
                        "gear": gym.spaces.Discrete(3), "map": gym.spaces.Box(0, 255, (1, 10, 10), np.uint8)})
TUPLE = gym.spaces.Tuple((gym.spaces.Discrete(2), GREY))
SPACES = {"grey": GREY, "stack": STACK, "colour": COLOUR, "unit": UNIT, "dict": DICT, "tuple": TUPLE}


def _rows(policy, n=6, seed=0):
    space = policy.observation_space
    space.seed(seed)
    obs = [space.sample() for _ in range(n)]
    return obs, torch.from_numpy(policy.process_observations(obs, update=False))


@pytest.mark.parametrize("share", [False, True], ids=["separate", "shared"])
@pytest.mark.parametrize("name", sorted(SPACES))
def test_a_keras_cnn_policy_starts_from_the_torch_policys_weights_and_computes_the_same(name, share):
    space, actions = SPACES[name], gym.spaces.Box(-1.0, 1.0, (2,))
    config = {"vf_share_layers": share}
    keras_policy = cairn.Policy(space, actions, {"model": {**KERAS, **config}}, seed=3)
    torch_policy = cairn.Policy(space, actions, {"model": {**SMALL, **config}}, seed=3)
    obs, x = _rows(torch_policy)
    model = keras_policy.model
    with torch.no_grad():
        np.testing.assert_allclose(model.action_inputs(x), torch_policy.model.action_inputs(x), atol=1e-5)
        np.testing.assert_allclose(model.value(x), torch_policy.model.value(x), atol=1e-5)
        # the per-layer path cairn trains and acts with is the Keras model's own output
        inputs, value = model.network(x)
        np.testing.assert_allclose(inputs, model.action_inputs(x), atol=1e-6)
        np.testing.assert_allclose(value[:, 0], model.value(x), atol=1e-6)
        both = model(x)
        np.testing.assert_allclose(both[1], model.value(x), atol=1e-6)
    np.testing.assert_allclose(keras_policy.compute_actions(obs, explore=False),
                               torch_policy.compute_actions(obs, explore=False), atol=1e-5)
    # as many weights as the torch network, and the encoder's as the description counts
    weights, torch_weights = keras_policy.get_weights(), torch_policy.get_weights()
    # the log-std Dense layer's kernel, which only sees zeros
    extra = weights["variables.log_std_kernel"].size
    assert sum(w.size for w in weights.values()) == sum(w.size for w in torch_weights.values()) + extra
    description = encoder_description(space, SMALL)
    encoders = 1 if share else 2
    in_encoders = sum(w.size for k, w in weights.items() if "encoder_" in k)
    assert in_encoders == encoders * encoder_parameter_count(description)
    assert any(k.startswith("variables.critic_encoder_") for k in weights) is not share


def test_the_encoder_layers_follow_the_description():
    policy = cairn.Policy(DICT, gym.spaces.Discrete(2), {"model": KERAS}, seed=0)
    network = policy.model.network
    conv = network.get_layer("encoder_0_conv_0")
    assert (conv.filters, conv.kernel_size, conv.strides, conv.padding, conv.data_format) == (
        4, (4, 4), (2, 2), "valid", "channels_first")
    assert network.get_layer("encoder_0_permute").dims == (3, 1, 2)  # HWC camera -> CHW
    assert network.get_layer("encoder_0_scale").scale == pytest.approx(1 / 255)
    assert network.get_layer("encoder_2_reshape").target_shape == (1, 10, 10)  # the CHW map: no permute
    assert network.get_layer("encoder_0_dense").units == 16
    names = {layer.name for layer in network.layers}
    assert "encoder_1_conv_0" not in names and "encoder_concat" in names  # part 1 (gear) passes on
    # under a normalising filter the network does not scale the pixels again
    filtered = cairn.Policy(DICT, gym.spaces.Discrete(2),
                            {"model": KERAS, "observation_filter": "MeanStdFilter"})
    assert "encoder_0_scale" not in {layer.name for layer in filtered.model.network.layers}


@pytest.mark.parametrize("dueling", [True, False])
def test_a_keras_q_network_with_an_encoder_starts_from_the_torch_ones_weights(dueling):
    config = {"dueling": dueling}
    keras_policy = DQNPolicy(DICT, gym.spaces.Discrete(3), {**config, "model": KERAS}, seed=1)
    torch_policy = DQNPolicy(DICT, gym.spaces.Discrete(3), {**config, "model": SMALL}, seed=1)
    obs, x = _rows(torch_policy)
    np.testing.assert_allclose(keras_policy.compute_q_values(obs), torch_policy.compute_q_values(obs),
                               atol=1e-5)
    with torch.no_grad():
        np.testing.assert_allclose(keras_policy.model.network(x), keras_policy.model(x), atol=1e-6)
        # the target is a copy computing with its own variables, equal at the start
        target = keras_policy.target_model
        assert {id(p) for p in target.parameters()}.isdisjoint(id(p) for p in keras_policy.model.parameters())
        np.testing.assert_array_equal(target(x), keras_policy.model(x))


def test_copies_compute_with_their_own_encoder_variables():
    policy = cairn.Policy(STACK, gym.spaces.Discrete(2), {"model": KERAS}, seed=0)
    _, x = _rows(policy)
    copied = copy.deepcopy(policy.model)
    with torch.no_grad():
        before = copied.action_inputs(x).clone()
        for name, tensor in policy.model.named_parameters():
            if "encoder_0_conv_0" in name:
                tensor.add_(1.0)
        assert not torch.equal(policy.model.action_inputs(x), before)
        torch.testing.assert_close(copied.action_inputs(x), before, rtol=0, atol=0)
        torch.testing.assert_close(copied.network(x)[0], before, rtol=1e-6, atol=1e-6)


def test_gradients_reach_every_encoder_variable():
    policy = cairn.Policy(DICT, gym.spaces.Discrete(2), {"model": KERAS}, seed=0)
    _, x = _rows(policy, n=16)
    inputs, value = policy.model(x)
    (inputs.square().sum() + value.square().sum()).backward()
    encoder = {name: p for name, p in policy.model.named_parameters() if "encoder_" in name}
    # actor and critic encoders x 2 images x (2 convs + dense) x (kernel, bias)
    assert len(encoder) == 2 * 2 * 3 * 2
    assert all(p.grad is not None and bool(p.grad.abs().sum() > 0) for p in encoder.values())


CNN = {"conv_filters": [[4, 4, 2], [8, 3, 1]], "conv_dense": 16, "hidden": [16]}


class Cue(gym.Env):
    """PixelCue's task (a bright square in the left or right half of a 16x16 image; name the
    side) with the environment state protocol, so that a run resumes exactly (PixelCue has
    none, and restarts episodes after a restore). ``channels_last``: ``(16, 16, 3)`` images,
    else ``(1, 16, 16)``; ``dict``: the image under a key beside a vector and a Discrete part;
    ``continuous``: a Box action whose sign names the side (reward ``-(action - target)^2``)."""

    def __init__(self, env_config):
        self.shape = (16, 16, 3) if env_config.get("channels_last") else (1, 16, 16)
        image = gym.spaces.Box(0, 255, self.shape, np.uint8)
        self.as_dict = bool(env_config.get("dict"))
        self.observation_space = gym.spaces.Dict({
            "pixels": image, "noise": gym.spaces.Box(-1.0, 1.0, (3,), np.float32),
            "phase": gym.spaces.Discrete(2)}) if self.as_dict else image
        self.continuous = bool(env_config.get("continuous"))
        self.action_space = (gym.spaces.Box(-1.0, 1.0, (1,), np.float32) if self.continuous
                             else gym.spaces.Discrete(2))
        self.side, self.t = 0, 0

    def observe(self):
        rng = self.np_random
        self.side, row, col = int(rng.integers(2)), int(rng.integers(13)), int(rng.integers(5))
        image = np.zeros((16, 16), np.uint8)
        image[row: row + 4, col + 8 * self.side: col + 8 * self.side + 4] = 255
        image = np.repeat(image[..., None], 3, -1) if self.shape[-1] == 3 else image[None]
        if not self.as_dict:
            return image
        return {"pixels": image, "noise": rng.uniform(-1, 1, 3).astype(np.float32),
                "phase": int(rng.integers(2))}

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self.observe(), {}

    def step(self, action):
        if self.continuous:
            reward = -float((float(np.asarray(action).reshape(-1)[0]) - (2 * self.side - 1)) ** 2)
        else:
            reward = float(int(action) == self.side)
        self.t += 1
        return self.observe(), reward, False, self.t >= 16, {}

    def get_state(self):
        return {"side": self.side, "t": self.t, "rng": rng_state(self.np_random)}

    def set_state(self, state):
        self.side, self.t, self.np_random = int(state["side"]), int(state["t"]), make_rng(state["rng"])


def make_cue(env_config):
    return Cue(env_config)


def _resumes_exactly(config: cairn.AlgorithmConfig, tmp_path: Path) -> cairn.Algorithm:
    algo = config.debugging(seed=0).build()
    algo.train()
    path = Path(algo.save(tmp_path / "c"))
    restored = cairn.Algorithm.from_checkpoint(path)
    assert type(restored.get_policy().model).__name__.startswith("Keras")
    assert_trees_equal(algo.get_state(), restored.get_state())
    assert_trains_identically(algo, restored, iterations=1)
    assert (path / "policies/default_policy/model/model.keras").is_file()
    return algo


def test_ppo_with_a_keras_cnn_resumes_exactly(tmp_path):
    _resumes_exactly(cairn.PPOConfig().environment(make_cue).framework("keras")
                     .training(train_batch_size=64, minibatch_size=32, num_epochs=2, model=CNN), tmp_path)


def test_ppo_with_keras_on_dict_observations_and_a_filter_resumes_exactly(tmp_path):
    _resumes_exactly(cairn.PPOConfig().environment(make_cue, env_config={"dict": True}).framework("keras")
                     .env_runners(observation_filter="MeanStdFilter", num_envs_per_env_runner=2)
                     .training(train_batch_size=64, minibatch_size=32, num_epochs=1,
                               model={**CNN, "vf_share_layers": True}), tmp_path)


def test_dqn_with_a_keras_cnn_resumes_exactly_with_its_replay_buffer(tmp_path):
    algo = _resumes_exactly(
        cairn.DQNConfig().environment(make_cue, env_config={"channels_last": True})
        .framework("keras").env_runners(rollout_fragment_length=32).checkpointing(store_replay_buffer=True)
        .training(train_batch_size=32, minibatch_size=16, num_steps_sampled_before_learning_starts=32,
                  training_intensity=2.0, target_network_update_freq=32, model=CNN), tmp_path)
    assert {stats["update_backend"] for stats in algo.train()["learners"].values()} == {"torch"}


def test_sac_with_a_keras_cnn_resumes_exactly(tmp_path):
    _resumes_exactly(cairn.SACConfig().environment(make_cue, env_config={"continuous": True})
                     .framework("keras")
                     .checkpointing(store_replay_buffer=True)
                     .training(train_batch_size=32, minibatch_size=16,
                               num_steps_sampled_before_learning_starts=16, model=CNN), tmp_path)


@pytest.mark.parametrize("policy_class", [SACPolicy, TD3Policy], ids=["sac", "td3"])
@pytest.mark.parametrize("name", ["stack", "dict"])
def test_keras_sac_and_td3_with_encoders_start_from_the_torch_policys_weights(name, policy_class):
    space, actions = SPACES[name], gym.spaces.Box(-1.0, 1.0, (2,))
    keras_policy = policy_class(space, actions, {"model": KERAS}, seed=2)
    torch_policy = policy_class(space, actions, {"model": SMALL}, seed=2)
    obs, x = _rows(torch_policy)
    a = torch.from_numpy(np.random.default_rng(1).uniform(-1, 1, (len(obs), 2)).astype(np.float32))
    model, reference = keras_policy.model, torch_policy.model
    with torch.no_grad():
        np.testing.assert_allclose(model.action_inputs(x), reference.action_inputs(x), atol=1e-5)
        np.testing.assert_allclose(model.critic(x, a), reference.critic(x, a), atol=1e-5)
        np.testing.assert_allclose(model.target_critic(x, a), reference.critic(x, a), atol=1e-5)
        sac = policy_class is SACPolicy
        if not sac:
            np.testing.assert_allclose(model.target_actor(x), reference.actor(x), atol=1e-5)
        # the per-layer paths are the Keras models' own outputs
        actor_outputs = model.actor.network(x)
        np.testing.assert_allclose(torch.cat(actor_outputs, dim=-1) if sac else actor_outputs,
                                   model.action_inputs(x), atol=1e-6)
        np.testing.assert_allclose(torch.stack(model.critic.network([x, a]))[..., 0], model.critic(x, a),
                                   atol=1e-6)
    np.testing.assert_allclose(keras_policy.compute_actions(obs, explore=False),
                               torch_policy.compute_actions(obs, explore=False), atol=1e-5)
    # the actor's own CNN, one the critics share, and the targets' copies (own variables)
    weights = keras_policy.get_weights()
    count = encoder_parameter_count(encoder_description(space, SMALL))
    for net in ("actor", "critic", "target_critic", *(() if sac else ("target_actor",))):
        assert sum(w.size for k, w in weights.items() if k.startswith(f"{net}.variables.encoder_")) == count
    assert {id(p) for p in model.target_critic.parameters()}.isdisjoint(
        id(p) for p in model.critic.parameters())
    assert sum(w.size for w in weights.values()) == sum(w.size for w in torch_policy.get_weights().values())


def test_the_sac_actor_loss_reads_the_critics_encoder_without_training_it():
    policy = SACPolicy(STACK, gym.spaces.Box(-1.0, 1.0, (2,)), {"model": KERAS}, seed=0)
    _, x = _rows(policy)
    actions = torch.zeros(len(x), 2, requires_grad=True)
    policy.model.critic(x, actions, detach=True).sum().backward()
    assert actions.grad is not None and bool(actions.grad.abs().sum() > 0)
    assert all(p.grad is None for p in policy.model.critic.parameters())
    policy.model.critic(x, actions).sum().backward()
    encoder = [p for name, p in policy.model.critic.named_parameters() if "encoder_" in name]
    assert encoder and all(p.grad is not None for p in encoder)


def test_model_keras_of_a_cnn_policy_loads_with_plain_keras_and_gives_its_actions_from_raw_images(tmp_path):
    policy = cairn.Policy(COLOUR, gym.spaces.Discrete(3), {"model": KERAS}, seed=0)
    with torch.no_grad():  # a head that tells the images apart (the 0.01-gain start is near-uniform)
        policy.model.variables["action_head_kernel"].mul_(100.0)
    signature = cairn.export.export_model(policy, tmp_path / "m")
    assert signature["files"] == {"keras": "model.keras"}
    images = np.random.default_rng(0).integers(0, 256, (8, 12, 12, 3)).astype(np.uint8)
    # raw pixel values, as every export takes
    [(action, logits)] = plain_keras_outputs([tmp_path / "m/model.keras"], images.astype(np.float32),
                                             tmp_path)
    assert action.tolist() == policy.compute_actions(list(images), explore=False).tolist()
    assert len(set(action.tolist())) > 1
    np.testing.assert_allclose(logits, policy.compute_action_inputs(
        policy.process_observations(list(images), update=False)), atol=1e-5)


@pytest.mark.parametrize("kind", ["ppo", "dqn", "sac", "td3"])
def test_onnx_of_a_keras_encoder_policy_matches_the_policy(tmp_path, kind):
    make, actions = {"ppo": (cairn.Policy, gym.spaces.Discrete(3)),
                     "dqn": (DQNPolicy, gym.spaces.Discrete(3)),
                     "sac": (SACPolicy, gym.spaces.Box(-2.0, 2.0, (2,))),
                     "td3": (TD3Policy, gym.spaces.Box(-2.0, 2.0, (2,)))}[kind]
    policy = make(DICT, actions, {"model": KERAS, "observation_filter": "MeanStdFilter"}, seed=0)
    obs = [DICT.sample() for _ in range(16)]
    policy.process_observations(obs, update=True)  # filter statistics that are not the identity
    signature = cairn.export.export_model(policy, tmp_path / "m", onnx=18)  # parity checked inside
    assert signature["files"] == {"onnx": "model.onnx"}
    action, *values = onnx_runner(str(tmp_path / "m/model.onnx"))(cairn.export.model_inputs(DICT, obs))
    np.testing.assert_allclose(action, policy.compute_actions(obs, explore=False), rtol=0, atol=1e-5)
    if kind == "td3":
        assert values == []  # the action alone
        return
    expected = (policy.compute_q_values(obs) if kind == "dqn"
                else policy.compute_action_inputs(policy.process_observations(obs, update=False)))
    np.testing.assert_allclose(np.concatenate(values, axis=-1), expected, atol=1e-5)  # SAC: mean, log_std


def test_a_users_keras_model_reads_the_flat_row_of_image_observations():
    policy = cairn.Policy(STACK, gym.spaces.Discrete(2),
                          {"model": {**KERAS, "keras_model": "tests.keras.builders:small_actor_critic"}})
    assert policy.model.network.input_shape == (None, 2 * 16 * 16)
    assert policy.compute_actions([STACK.sample()], explore=False).shape == (1,)


@pytest.mark.tf
def test_saved_model_of_a_keras_cnn_policy_serves_its_actions_with_tensorflow(tmp_path, monkeypatch):
    from cairn.export.keras_saved_model import export_saved_model

    # TensorFlow's plain CPU kernels, as on a machine or build without oneDNN: they have no NCHW
    # Conv2D, so the encoder's channels_first convolutions must be served NHWC. The worker
    # subprocess inherits this process's environment (keras_saved_model._worker_env).
    monkeypatch.setenv("TF_ENABLE_ONEDNN_OPTS", "0")
    policy = cairn.Policy(DICT, gym.spaces.Discrete(3), {"model": KERAS}, seed=0)
    with torch.no_grad():  # a head that tells observations apart (the 0.01-gain start is near-uniform)
        policy.model.variables["action_head_kernel"].mul_(100.0)
    # Keras' TensorFlow backend in a subprocess writes and runs the SavedModel on the CPU; cairn
    # checks the served actions and logits against the policy's inside (64 observations).
    signature = export_saved_model(policy, tmp_path / "tf")
    assert signature["files"] == {"saved_model": "saved_model", "keras": "model.keras"}
    assert (tmp_path / "tf/saved_model/saved_model.pb").is_file()
