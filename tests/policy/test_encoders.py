"""The CNN encoder and per-part (Dict/Tuple) encoding: layouts, scaling, sizes, errors,
and the networks of PPO, DQN and SAC built on it."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

import cairn
from cairn.algorithms.dqn.dqn_policy import DQNPolicy
from cairn.algorithms.dqn.numpy_update import numpy_update_unsupported
from cairn.algorithms.sac.sac_policy import SACPolicy
from cairn.errors import ConfigError
from cairn.policy.encoders import (
    ObservationEncoder,
    encoder_description,
    encoder_parameter_count,
    image_layout,
)

SMALL = {"hidden": [8], "conv_filters": [[4, 4, 2], [8, 3, 1]], "conv_dense": 16}
GREY = gym.spaces.Box(0, 255, (16, 16), np.uint8)
STACK = gym.spaces.Box(0, 255, (4, 20, 20), np.uint8)
DICT = gym.spaces.Dict({
    "camera": gym.spaces.Box(0, 255, (12, 12, 3), np.uint8),
    "speed": gym.spaces.Box(-1.0, 1.0, (2,), np.float32),
    "gear": gym.spaces.Discrete(3),
    "map": gym.spaces.Box(0, 255, (1, 10, 10), np.uint8),
})


@pytest.mark.parametrize(("shape", "layout"), [
    ((84, 84, 3), "HWC"), ((3, 64, 64), "CHW"), ((84, 84), "HW"), ((4, 84, 84), "CHW"),
    ((84, 84, 1), "HWC"), ((8, 84, 84), "CHW"), ((84, 84, 16), "HWC"), ((4, 84, 84, 3), None),
])
def test_channel_axis_follows_from_the_shape(shape, layout):
    assert image_layout(shape) == layout


def test_nature_cnn_is_the_default_and_matches_sb3s_sizes():
    description = encoder_description(gym.spaces.Box(0, 255, (4, 84, 84), np.uint8), {})
    (part,) = description["parts"]
    assert part["conv_filters"] == [[32, 8, 4], [64, 4, 2], [64, 3, 1]]
    assert part["conv_output"] == [64, 7, 7] and part["dense"] == 512 and part["scale"] == 1 / 255
    encoder = ObservationEncoder(description)
    # As many parameters as SB3 2.9's NatureCNN for 4x84x84 (counted there: 1,684,128).
    assert sum(p.numel() for p in encoder.parameters()) == encoder_parameter_count(description) == 1_684_128
    assert encoder(torch.zeros(3, 4 * 84 * 84)).shape == (3, 512)


@pytest.mark.parametrize("space", [GREY, STACK, DICT, gym.spaces.Tuple((GREY, gym.spaces.Discrete(2)))],
                         ids=["grey", "stack", "dict", "tuple"])
def test_parameter_count_from_the_description_is_the_built_networks(space):
    description = encoder_description(space, SMALL)
    assert description["input_size"] == gym.spaces.flatdim(space)
    encoder = ObservationEncoder(description)
    assert sum(p.numel() for p in encoder.parameters()) == encoder_parameter_count(description)
    assert encoder(torch.zeros(2, description["input_size"])).shape == (2, description["output_size"])


def test_vector_spaces_and_empty_conv_filters_have_no_encoder():
    assert encoder_description(gym.spaces.Box(-1, 1, (4,)), {}) is None
    assert encoder_description(gym.spaces.Dict({"a": gym.spaces.Discrete(2)}), {}) is None
    assert encoder_description(STACK, {"conv_filters": []}) is None  # the MLP reads the pixels


def test_scaling_only_for_0_255_pixels_and_not_under_a_normalising_filter():
    assert encoder_description(STACK, SMALL)["parts"][0]["scale"] == 1 / 255
    assert encoder_description(STACK, SMALL, scale_images=False)["parts"][0]["scale"] == 1.0
    unit = gym.spaces.Box(0.0, 1.0, (3, 16, 16), np.float32)
    assert encoder_description(unit, SMALL)["parts"][0]["scale"] == 1.0
    policy = cairn.Policy(STACK, gym.spaces.Discrete(2),
                          {"model": SMALL, "observation_filter": "MeanStdFilter"})
    assert policy.model.encoder.parts["0"].scale == 1.0


def test_channels_last_and_channels_first_images_give_the_same_features():
    hwc = gym.spaces.Box(0, 255, (16, 16, 3), np.uint8)
    chw = gym.spaces.Box(0, 255, (3, 16, 16), np.uint8)
    a = ObservationEncoder(encoder_description(hwc, SMALL))
    b = ObservationEncoder(encoder_description(chw, SMALL))
    b.load_state_dict(a.state_dict())
    images = np.random.default_rng(0).integers(0, 256, (5, 16, 16, 3)).astype(np.float32)
    out_hwc = a(torch.from_numpy(images.reshape(5, -1)))
    out_chw = b(torch.from_numpy(images.transpose(0, 3, 1, 2).reshape(5, -1).copy()))
    torch.testing.assert_close(out_hwc, out_chw)


def test_dict_parts_are_encoded_apart_and_concatenated_in_flatten_order():
    policy = cairn.Policy(DICT, gym.spaces.Discrete(2), {"model": SMALL}, seed=0)
    encoder = policy.model.encoder
    kinds = [(p["kind"], p.get("path")) for p in encoder_description(DICT, SMALL)["parts"]]
    # gymnasium orders Dict keys: camera, gear, map, speed; gear and speed are not neighbours.
    assert kinds == [("image", "obs['camera']"), ("flat", None), ("image", "obs['map']"), ("flat", None)]
    obs = DICT.sample()
    row = torch.from_numpy(policy.process_observations([obs], update=False))
    features = encoder(row)
    camera = torch.from_numpy(obs["camera"].astype(np.float32).reshape(1, -1))
    map_ = torch.from_numpy(obs["map"].astype(np.float32).reshape(1, -1))
    expected = torch.cat([encoder.parts["0"](camera), torch.eye(3)[[obs["gear"]]],
                          encoder.parts["2"](map_), torch.from_numpy(obs["speed"][None])], dim=1)
    torch.testing.assert_close(features, expected)


def test_vf_share_layers_shares_the_cnn():
    shared = cairn.Policy(STACK, gym.spaces.Discrete(2), {"model": {**SMALL, "vf_share_layers": True}},
                          seed=0)
    separate = cairn.Policy(STACK, gym.spaces.Discrete(2), {"model": SMALL}, seed=0)
    assert shared.model.critic_encoder is None
    assert any(k.startswith("critic_encoder.") for k in separate.get_weights())
    for policy in (shared, separate):  # the value path runs through a CNN in both
        obs = policy.process_observations([STACK.sample()], update=False)
        assert policy.model.value(torch.from_numpy(obs)).shape == (1,)


@pytest.mark.parametrize(("model", "match"), [
    ({"conv_filters": [[32, 8]]}, r"model.conv_filters.*\[out_channels, kernel, stride\]"),
    ({"conv_filters": [[32, 8, 0]]}, "positive ints"),
    ({"conv_filters": "nature"}, "conv_filters"),
    ({"conv_dense": -1}, "conv_dense"),
    ({"conv_activation": "gelu"}, "conv_activation"),
    ({"conv_filters": [[8, 8, 4], [8, 8, 4]]},
     r"layer 1 .* leaves nothing of the image obs of shape \(4, 20, 20\)"),
])
def test_invalid_conv_configs_are_config_errors_naming_the_value(model, match):
    with pytest.raises(ConfigError, match=match):
        cairn.Policy(STACK, gym.spaces.Discrete(2), {"model": model})


@pytest.mark.parametrize("part", [
    gym.spaces.Text(8), gym.spaces.Graph(gym.spaces.Box(0, 1, (2,)), None),
    gym.spaces.Sequence(gym.spaces.Discrete(2)),
], ids=["text", "graph", "sequence"])
def test_unsupported_parts_of_dict_and_tuple_spaces_are_named(part):
    space = gym.spaces.Dict({"ok": GREY, "bad": gym.spaces.Tuple((gym.spaces.Discrete(2), part))})
    with pytest.raises(ConfigError, match=rf"part obs\['bad'\]\[1\] is {type(part).__name__}"):
        cairn.Policy(space, gym.spaces.Discrete(2))
    with pytest.raises(ConfigError, match="Unsupported observation space"):
        cairn.Policy(part, gym.spaces.Discrete(2))


def test_dqn_q_network_reads_images_in_torch_and_keeps_the_dueling_head():
    policy = DQNPolicy(DICT, gym.spaces.Discrete(3), {"model": SMALL, "dueling": True}, seed=0)
    assert policy.model.encoder is not None and policy.model.value_head is not None
    obs = [DICT.sample() for _ in range(4)]
    processed = policy.process_observations(obs, update=False)
    np.testing.assert_allclose(policy.model.numpy_q_values(processed), policy.compute_q_values(obs),
                               rtol=1e-6)
    reason = numpy_update_unsupported(policy.model, policy.optimizer)
    assert reason is not None and "CNN encoder" in reason


def test_sac_actor_and_critics_have_their_own_cnns_and_targets_follow():
    space = gym.spaces.Box(0, 255, (1, 16, 16), np.uint8)
    policy = SACPolicy(space, gym.spaces.Box(-1.0, 1.0, (2,)), {"model": SMALL}, seed=0)
    model = policy.model
    names = set(policy.get_weights())
    for net in ("actor", "critic", "target_critic"):
        assert f"{net}.encoder.parts.0.conv.0.weight" in names
    torch.testing.assert_close(model.target_critic.encoder.state_dict(), model.critic.encoder.state_dict())
    groups = {name: {id(p) for p in params} for name, params in model.parameter_groups().items()}
    assert id(model.actor.encoder.parts["0"].conv[0].weight) in groups["actor"]
    assert id(model.critic.encoder.parts["0"].conv[0].weight) in groups["critic"]
    obs = torch.from_numpy(policy.process_observations([space.sample()], update=False))
    actions = torch.zeros(1, 2, requires_grad=True)
    model.critic(obs, actions, detach=True).sum().backward()  # the actor loss's path
    assert actions.grad is not None and model.critic.encoder.parts["0"].conv[0].weight.grad is None
    assert policy.compute_actions([space.sample()], explore=False).shape == (1, 2)
