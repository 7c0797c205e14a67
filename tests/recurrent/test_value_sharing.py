"""``vf_share_layers`` means one thing for every built-in network (RLlib's meaning: False gives
the critic its own layers), and ``vf_stop_gradient`` is sb3-contrib's ``shared_lstm``: shared
layers that only the policy loss trains (docs/models.md, docs/ppo.md)."""

import gymnasium as gym
import numpy as np
import pytest
import torch

import cairn
from cairn.errors import ConfigError

LSTM = {"use_lstm": True, "lstm_cell_size": 8, "max_seq_len": 4, "hidden": [6]}
BOX4 = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)
OBS = torch.from_numpy(np.random.default_rng(0).standard_normal((3, 5, 4)).astype(np.float32))


def network(model, action_space=gym.spaces.Discrete(2)):
    return cairn.Policy(BOX4, action_space, {"model": model}, seed=0).model


def value_gradients(net, recurrent):
    """Which parameters the value alone sends gradient to (name -> bool)."""
    net.zero_grad(set_to_none=True)
    if recurrent:
        state = [torch.randn(3, s.shape[0], generator=torch.Generator().manual_seed(1))
                 for s in net.get_initial_state()]
        _, value, _ = net(OBS, state)
    else:
        _, value = net(OBS.reshape(-1, 4))
    value.square().sum().backward()
    return {name: p.grad is not None and bool(p.grad.abs().sum() > 0) for name, p in net.named_parameters()}


def test_separate_critic_lstm_has_its_own_layers_and_state():
    net = network(LSTM)  # vf_share_layers defaults to False: the critic has its own layers
    names = {name.split(".")[0] for name, _ in net.named_parameters()}
    assert {"trunk", "lstm", "action_head", "critic_trunk", "critic_lstm", "value_head"} <= names
    assert [s.shape for s in net.get_initial_state()] == [(16,), (16,)]  # actor's 8, then critic's 8
    policy = cairn.Policy(BOX4, gym.spaces.Discrete(2), {"model": LSTM}, seed=0)
    assert [s.shape for s in policy.get_initial_state()] == [(16,), (16,)]


def test_value_loss_of_a_separate_critic_does_not_touch_the_actor():
    grads = value_gradients(network(LSTM, gym.spaces.Box(-1.0, 1.0, (2,), np.float32)), recurrent=True)
    assert grads["value_head.weight"] and grads["critic_lstm.weight_hh_l0"] and grads["critic_trunk.0.weight"]
    actor = {n: g for n, g in grads.items() if not n.startswith(("critic_", "value_head"))}
    assert actor and not any(actor.values()), actor  # trunk, lstm, action_head, log_std


def test_the_actor_output_and_its_state_half_do_not_depend_on_the_critic():
    net = network(LSTM)
    state = [torch.randn(3, 16, generator=torch.Generator().manual_seed(2)) for _ in range(2)]
    inputs, value, out = net(OBS, state)
    with torch.no_grad():
        for name, p in net.named_parameters():
            if name.startswith("critic_"):
                p.add_(1.0)
    inputs2, value2, out2 = net(OBS, state)
    torch.testing.assert_close(inputs2, inputs)
    torch.testing.assert_close(out2[0][:, :8], out[0][:, :8])
    assert not torch.allclose(value2, value) and not torch.allclose(out2[0][:, 8:], out[0][:, 8:])


@pytest.mark.parametrize("recurrent", [True, False])
def test_shared_layers_are_trained_by_the_value_loss_unless_its_gradient_is_stopped(recurrent):
    base = LSTM if recurrent else {"hidden": [6]}
    shared_layer = "lstm.weight_hh_l0" if recurrent else "actor.0.weight"
    trained = value_gradients(network({**base, "vf_share_layers": True}), recurrent)
    assert trained[shared_layer] and trained["value_head.weight"]
    assert not any(n.startswith("critic") for n in trained)
    stopped = value_gradients(network({**base, "vf_share_layers": True, "vf_stop_gradient": True}), recurrent)
    assert stopped["value_head.weight"]
    assert not any(g for n, g in stopped.items() if not n.startswith("value_head")), stopped


def test_mlp_value_with_stopped_gradient_equals_the_shared_value():
    shared = network({"hidden": [6], "vf_share_layers": True})
    stopped = network({"hidden": [6], "vf_share_layers": True, "vf_stop_gradient": True})
    stopped.load_state_dict(shared.state_dict())
    x = OBS.reshape(-1, 4)
    torch.testing.assert_close(stopped(x)[1], shared(x)[1])
    torch.testing.assert_close(stopped.value(x), shared.value(x))


def test_numpy_acting_steps_both_lstms_as_forward_does():
    net = network(LSTM)
    rng = np.random.default_rng(3)
    obs = rng.standard_normal((4, 4)).astype(np.float32)
    state = [rng.standard_normal((4, 16)).astype(np.float32) for _ in range(2)]
    inputs, out = net.numpy_step(obs, state)
    with torch.inference_mode():
        t_inputs, _, t_out = net(torch.from_numpy(obs)[:, None], [torch.from_numpy(s) for s in state])
    np.testing.assert_allclose(inputs, t_inputs[:, 0].numpy(), atol=1e-5)
    for got, want in zip(out, t_out, strict=True):
        np.testing.assert_allclose(got, want.numpy(), atol=1e-5)


def test_separate_critic_lstm_trains_both_towers():
    algo = (cairn.PPOConfig().environment("CartPole-v1")
            .training(train_batch_size=64, minibatch_size=32, num_epochs=1, model=LSTM)
            .debugging(seed=0).build())
    before = {n: p.detach().clone() for n, p in algo.get_policy().model.named_parameters()}
    result = algo.train()
    assert np.isfinite(result["learners"]["default_policy"]["vf_loss"])
    after = dict(algo.get_policy().model.named_parameters())
    for name in ("lstm.weight_hh_l0", "critic_lstm.weight_hh_l0", "action_head.weight", "value_head.weight"):
        assert not torch.equal(before[name], after[name]), name
    algo.stop()


@pytest.mark.parametrize("model, match", [
    ({**LSTM, "vf_stop_gradient": True}, "vf_share_layers=False"),
    ({"vf_stop_gradient": True}, "vf_share_layers=False"),
    ({"vf_share_layers": True, "vf_stop_gradient": "yes"}, "vf_stop_gradient' must be True or False"),
    ({"vf_share_layers": 1}, "vf_share_layers' must be True or False"),
    ({"framework": "keras", "vf_share_layers": True, "vf_stop_gradient": True}, "Keras"),
    ({"custom_model": "tests.models.nets:TwoHeads", "vf_share_layers": True, "vf_stop_gradient": True},
     "a setting of the built-in networks"),
])
def test_settings_that_do_not_fit_are_config_errors(model, match):
    with pytest.raises(ConfigError, match=match):
        cairn.PPOConfig().environment("CartPole-v1").training(model=model).validate()
    with pytest.raises(ConfigError, match=match):
        cairn.Policy(BOX4, gym.spaces.Discrete(2), {"model": model}, seed=0)
