import gymnasium as gym
import numpy as np
import pytest
import torch

import cairn
from cairn.errors import ConfigError

OBS = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)
ACTION_SPACES = [
    gym.spaces.Discrete(3, start=1),
    gym.spaces.MultiDiscrete([2, 3]),
    gym.spaces.Box(-2.0, 2.0, (2,), np.float32),
]


@pytest.mark.parametrize("action_space", ACTION_SPACES, ids=lambda s: type(s).__name__)
@pytest.mark.parametrize("explore", [True, False])
def test_actions_inside_action_space(action_space, explore):
    policy = cairn.Policy(OBS, action_space, seed=0)
    batch = np.random.default_rng(0).uniform(-1, 1, (64, 4)).astype(np.float32)
    actions = policy.compute_actions(batch, explore=explore)
    assert actions.shape[0] == 64
    assert all(action_space.contains(a) for a in actions)
    single = policy.compute_single_action(batch[0], explore=explore)
    assert action_space.contains(single)


def test_box_actions_are_clipped():
    policy = cairn.Policy(OBS, ACTION_SPACES[2], {"model": {"log_std_init": 3.0}}, seed=0)
    actions = policy.compute_actions(np.zeros((500, 4), np.float32), explore=True)
    assert actions.min() == -2.0 and actions.max() == 2.0


@pytest.mark.parametrize(
    "obs_space",
    [gym.spaces.Discrete(4), gym.spaces.Dict({"a": gym.spaces.Box(0, 1, (2,)), "b": gym.spaces.Discrete(2)}),
     gym.spaces.Tuple((gym.spaces.Box(0, 1, (3,)), gym.spaces.MultiBinary(2)))],
    ids=lambda s: type(s).__name__,
)
def test_observation_spaces(obs_space):
    policy = cairn.Policy(obs_space, gym.spaces.Discrete(2), seed=0)
    obs = [obs_space.sample() for _ in range(5)]
    assert policy.compute_actions(obs).shape == (5,)


def test_unsupported_spaces_name_the_space():
    with pytest.raises(ConfigError, match="Text"):
        cairn.Policy(gym.spaces.Text(4), gym.spaces.Discrete(2))
    with pytest.raises(ConfigError, match="MultiBinary"):
        cairn.Policy(OBS, gym.spaces.MultiBinary(2))


def test_seeded_policies_are_identical():
    a = cairn.Policy(OBS, ACTION_SPACES[0], seed=3)
    b = cairn.Policy(OBS, ACTION_SPACES[0], seed=3)
    c = cairn.Policy(OBS, ACTION_SPACES[0], seed=4)
    wa, wb, wc = a.get_weights(), b.get_weights(), c.get_weights()
    assert all(np.array_equal(wa[k], wb[k]) for k in wa)
    assert not all(np.array_equal(wa[k], wc[k]) for k in wa)


def test_state_round_trip_continues_identically():
    policy = cairn.Policy(OBS, ACTION_SPACES[2], {"observation_filter": "MeanStdFilter"}, seed=1)
    data = np.random.default_rng(1).normal(size=(32, 4)).astype(np.float32)
    policy.process_observations(data, update=True)
    state = policy.get_state()
    clone = cairn.Policy.from_state(state)
    assert np.array_equal(policy.compute_actions(data), clone.compute_actions(data))
    # get_state() is a snapshot: later changes to the policy do not leak into it.
    policy.model.action_head.bias.data += 1.0
    assert not np.array_equal(state["weights"]["action_head.bias"], policy.get_weights()["action_head.bias"])


def test_set_weights_rejects_wrong_shapes():
    policy = cairn.Policy(OBS, ACTION_SPACES[0], seed=0)
    other = cairn.Policy(gym.spaces.Box(-1, 1, (5,)), ACTION_SPACES[0], seed=0)
    with pytest.raises(ValueError, match="shape"):
        policy.set_weights(other.get_weights())


def test_numpy_and_torch_forward_agree():
    import torch

    policy = cairn.Policy(OBS, ACTION_SPACES[2], {"model": {"activation": "relu"}}, seed=0)
    obs = np.random.default_rng(2).uniform(-1, 1, (16, 4)).astype(np.float32)
    with torch.no_grad():
        expected = policy.model.action_inputs(torch.from_numpy(obs)).numpy()
    np.testing.assert_allclose(policy.compute_action_inputs(obs), expected, rtol=1e-5, atol=1e-6)


def test_mean_std_filter_matches_numpy():
    from cairn.policy.filters import MeanStdFilter

    data = np.random.default_rng(0).normal(3.0, 2.0, size=(1000, 3))
    f = MeanStdFilter(3)
    for chunk in np.array_split(data, 7):
        f.update(chunk)
    np.testing.assert_allclose(f.mean, data.mean(0))
    np.testing.assert_allclose(f.std, data.std(0))
    out = f.apply(data[:2].astype(np.float32))
    np.testing.assert_allclose(out, (data[:2] - data.mean(0)) / data.std(0), rtol=1e-4)


def test_clip_grad_norm_matches_torch():
    import torch

    from cairn.policy.torch_utils import clip_grad_norm

    for scale in (0.01, 100.0):
        params = [torch.nn.Parameter(torch.zeros(3, 2)), torch.nn.Parameter(torch.zeros(2))]
        twins = [torch.nn.Parameter(torch.zeros(3, 2)), torch.nn.Parameter(torch.zeros(2))]
        for p, t in zip(params, twins):
            p.grad = torch.randn_like(p) * scale
            t.grad = p.grad.clone()
        ours = clip_grad_norm(params, 1.0)
        theirs = torch.nn.utils.clip_grad_norm_(twins, 1.0)
        torch.testing.assert_close(ours, theirs)
        for p, t in zip(params, twins):
            torch.testing.assert_close(p.grad, t.grad)


def test_from_spec_refuses_a_policy_class_that_is_not_a_policy():
    """PolicySpec is data; Policy.from_spec builds it and checks its class at that boundary (a
    class given as an object, like one given by reference, must subclass cairn.Policy)."""

    class NotAPolicy:
        def __init__(self, *args, **kwargs):
            raise AssertionError("built without a check")

    spec = cairn.PolicySpec(policy_class=NotAPolicy, observation_space=gym.spaces.Box(-1, 1, (2,)),
                            action_space=gym.spaces.Discrete(2))
    with pytest.raises(ConfigError, match="NotAPolicy.*not a subclass of cairn.Policy"):
        cairn.Policy.from_spec(spec)


def test_restored_policy_reads_dict_observations_in_their_key_order(tmp_path):
    """A Dict observation space whose keys are not sorted (an OrderedDict, or sort_keys=False)
    comes back from a checkpoint in the same order: the restored policy's network reads each
    key's values where the trained one did, so both choose the same actions."""
    from collections import OrderedDict

    space = gym.spaces.Dict(OrderedDict([("z", gym.spaces.Box(-1.0, 1.0, (2,))),
                                         ("a", gym.spaces.Discrete(3))]))
    policy = cairn.Policy(space, gym.spaces.Discrete(4), seed=0)
    with torch.no_grad():
        policy.model.action_head.weight.mul_(100.0)  # logits of order one: no argmax ties
    policy.export_checkpoint(tmp_path / "ckpt")
    restored = cairn.Policy.from_checkpoint(tmp_path / "ckpt")
    assert list(restored.observation_space.spaces) == ["z", "a"]
    space.seed(0)
    obs = [space.sample() for _ in range(200)]
    np.testing.assert_array_equal(restored.compute_actions(obs, explore=False),
                                  policy.compute_actions(obs, explore=False))


def test_weights_with_a_zero_dimensional_buffer_load_back():
    # BatchNorm's num_batches_tracked is a 0-d buffer: loading it must keep its shape, from
    # writeable arrays (a state round trip, a device learner's returned weights) and read-only
    # ones (Ray's) alike.
    from tests.models.nets import NoisyHeads

    space, actions = gym.spaces.Box(-1.0, 1.0, (4,), np.float32), gym.spaces.Discrete(2)
    source = cairn.Policy(space, actions, {"model": {"custom_model": NoisyHeads}}, seed=0)
    with torch.no_grad():
        source.model.trunk[1].running_mean.add_(0.5)
        source.model.trunk[1].num_batches_tracked.fill_(7)
    weights = source.get_weights()
    assert weights["trunk.1.num_batches_tracked"].shape == ()
    for writeable in (True, False):
        target = cairn.Policy(space, actions, {"model": {"custom_model": NoisyHeads}}, seed=1)
        given = {name: value.copy() for name, value in weights.items()}
        for value in given.values():
            value.flags.writeable = writeable
        target.set_weights(given)
        for name, value in weights.items():
            np.testing.assert_array_equal(target.get_weights()[name], value, err_msg=name)
    restored = cairn.Policy.from_state(source.get_state())
    assert int(restored.model.trunk[1].num_batches_tracked) == 7


class _NarrowingPendulum(gym.Wrapper):
    """Pendulum whose own action space's low bound is raised in place at each reset (a
    curriculum written the unsupported way)."""

    def reset(self, **kwargs):
        self.env.action_space.low[0] = 1.5
        return self.env.reset(**kwargs)


def test_a_policy_keeps_its_own_spaces_when_the_env_changes_its_own_in_place(tmp_path):
    # The policy held the env's own space objects (inferred spaces): the env's in-place change
    # reached the policy's spec, so its checkpoints stored low 1.5 while it still clipped
    # actions at the -2 it was built with, and a restored policy clipped at 1.5.
    algo = (cairn.PPOConfig().environment(lambda _: _NarrowingPendulum(gym.make("Pendulum-v1")))
            .training(train_batch_size=64, minibatch_size=32, num_epochs=1).debugging(seed=0).build())
    try:
        algo.train()
        policy = algo.get_policy()
        assert policy.action_space.low.tolist() == [-2.0]
        assert policy.get_state()["spec"]["action_space"]["low"] == [-2.0]
        restored = cairn.Policy.from_state(policy.get_state())
        obs = np.zeros((1, 3), np.float32)
        assert restored.action_space == policy.action_space
        np.testing.assert_array_equal(restored.dist.low, policy.dist.low)
        assert restored.compute_actions(obs, explore=False)[0].shape == (1,)
    finally:
        algo.stop()


def test_changing_a_policys_spec_changes_neither_the_policy_nor_what_it_saves():
    # spec shared the policy's nested config values and its spaces: editing it to build another
    # policy (spec.config["model"]["custom_model_config"]..., hidden.append, action_space.low)
    # changed the config and spaces this policy saves while its network and distribution kept
    # what they were built with.
    config = {"model": {"hidden": [8], "custom_model_config": {"width": 3}}}
    policy = cairn.Policy(gym.spaces.Box(-1.0, 1.0, (3,), np.float32),
                          gym.spaces.Box(-2.0, 2.0, (1,), np.float32), config, seed=0)
    saved = policy.get_state()["spec"]
    spec = policy.spec
    spec.config["model"]["hidden"].append(16)
    spec.config["model"]["custom_model_config"]["width"] = 9
    spec.action_space.low[0] = 1.5
    spec.observation_space.high[0] = 5.0
    assert policy.get_state()["spec"] == saved
    assert policy.config["model"]["hidden"] == [8] and policy.action_space.low.tolist() == [-2.0]
    other = cairn.Policy.from_spec(spec, seed=0)
    assert other.config["model"]["hidden"] == [8, 16] and other.action_space.low.tolist() == [1.5]
