"""The numpy DQN update is the torch update: same gradients, same Adam step, same state, up to
float32 rounding within the tolerances docs/dqn.md states ("The update backend")."""

from __future__ import annotations

import copy
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch

from cairn import DQNConfig
from cairn.algorithms.dqn import DQN, DQNPolicy
from cairn.algorithms.dqn import numpy_update as numpy_update_module
from cairn.algorithms.dqn.loss import dqn_loss
from cairn.algorithms.dqn.model import QNetwork, numpy_q_forward
from cairn.algorithms.dqn.numpy_update import (
    numpy_dqn_update,
    numpy_update_unsupported,
    supports_numpy_update,
)
from cairn.policy.torch_utils import clip_grad_norm

#: Largest parameter difference allowed after a few updates on the same minibatches
#: (docs/dqn.md; measured at most 7e-7 after 1 to 20 updates at lr 1e-2).
UPDATE_ATOL = 5e-6
#: Largest parameter or target-weight difference allowed after two DQN runs on the same data
#: (416 updates of a 64x64 network; docs/dqn.md; measured at most 1.3e-6).
TRAINING_ATOL = 1e-5


def _policy(activation: str, dueling: bool) -> DQNPolicy:
    return DQNPolicy(gym.spaces.Box(-1, 1, (4,)), gym.spaces.Discrete(3),
                     {"model": {"hidden": [16, 8], "activation": activation}, "dueling": dueling,
                      "lr": 1e-2}, seed=0)


def _torch_update(policy: DQNPolicy, obs, actions, targets, *, loss_fn, grad_clip, weights):  # type: ignore[no-untyped-def]
    loss, _, _ = dqn_loss(policy.model(torch.from_numpy(obs)), torch.from_numpy(actions),
                          torch.from_numpy(targets), loss_fn=loss_fn,
                          weights=None if weights is None else torch.from_numpy(weights))
    params = list(policy.model.parameters())
    for p in params:
        p.grad = None
    loss.backward()
    if grad_clip is not None:
        clip_grad_norm(params, grad_clip)
    policy.optimizer.step()


@pytest.mark.parametrize("activation", ["relu", "tanh"])
@pytest.mark.parametrize("dueling", [True, False])
@pytest.mark.parametrize(("loss_fn", "grad_clip", "weighted"),
                         [("huber", 10.0, False), ("mse", 0.05, True), ("huber", None, True)])
def test_numpy_update_matches_autograd_and_torch_adam(activation, dueling, loss_fn, grad_clip, weighted):
    ours = _policy(activation, dueling)
    theirs = copy.deepcopy(ours)
    assert supports_numpy_update(ours.model, ours.optimizer)
    rng = np.random.default_rng(0)
    for _ in range(5):  # several steps: Adam's moments and bias correction matter
        obs = rng.normal(size=(32, 4)).astype(np.float32)
        actions = rng.integers(0, 3, size=32)
        targets = rng.normal(scale=3.0, size=32).astype(np.float32)
        weights = rng.uniform(0.1, 1.0, size=32).astype(np.float32) if weighted else None
        result = numpy_dqn_update(ours.model, ours.optimizer, obs, actions, targets,
                                  loss_fn=loss_fn, grad_clip=grad_clip, weights=weights)
        _torch_update(theirs, obs, actions, targets, loss_fn=loss_fn, grad_clip=grad_clip, weights=weights)
        assert np.isfinite(result.stats).all() and result.td_errors.shape == (32,)
    for (name, a), b in zip(ours.model.named_parameters(), theirs.model.parameters()):
        np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(),
                                   rtol=0, atol=UPDATE_ATOL, err_msg=name)
    for a, b in zip(ours.model.parameters(), theirs.model.parameters()):
        sa, sb = ours.optimizer.state[a], theirs.optimizer.state[b]
        assert float(sa["step"]) == float(sb["step"]) == 5.0
        np.testing.assert_allclose(sa["exp_avg"].numpy(), sb["exp_avg"].numpy(), rtol=1e-4, atol=1e-6)
        np.testing.assert_allclose(sa["exp_avg_sq"].numpy(), sb["exp_avg_sq"].numpy(), rtol=1e-4, atol=1e-8)


def test_adams_eps_betas_and_bias_correction_are_torchs_where_they_dominate_the_step() -> None:
    """numpy_update_unsupported accepts any Adam betas and eps (a DQNPolicy subclass may make its
    own Adam), and every other test here runs the policy's own Adam (default betas, eps 1e-5):
    a numpy step that used those defaults instead of the optimizer's passed them all. Here eps is
    as large as sqrt(v) and the betas are far from their defaults, so reading the wrong ones (or
    eps inside the square root, or a bias correction dropped) moves the weights by far more
    than UPDATE_ATOL, while torch.optim.Adam and the numpy step still agree."""
    ours = _policy("tanh", True)
    ours.optimizer = torch.optim.Adam(ours.model.parameters(), lr=0.05, betas=(0.5, 0.7), eps=0.3)
    theirs = copy.deepcopy(ours)
    assert supports_numpy_update(ours.model, ours.optimizer)
    rng = np.random.default_rng(3)
    for _ in range(3):
        obs = rng.normal(size=(32, 4)).astype(np.float32)
        actions = rng.integers(0, 3, size=32)
        targets = rng.normal(scale=0.5, size=32).astype(np.float32)
        numpy_dqn_update(ours.model, ours.optimizer, obs, actions, targets, loss_fn="mse", grad_clip=None)
        _torch_update(theirs, obs, actions, targets, loss_fn="mse", grad_clip=None, weights=None)
    for (name, a), b in zip(ours.model.named_parameters(), theirs.model.parameters()):
        np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), rtol=0, atol=UPDATE_ATOL,
                                   err_msg=name)


def test_the_update_runs_the_networks_own_numpy_forward(monkeypatch: pytest.MonkeyPatch) -> None:
    """One numpy forward serves acting, targets and the update (no private copy to drift)."""
    policy = _policy("relu", True)
    obs = np.random.default_rng(0).normal(size=(8, 4)).astype(np.float32)
    calls: list[np.ndarray] = []

    def spy(layers: Any, x: np.ndarray, outputs: Any = None) -> Any:
        calls.append(x)
        return numpy_q_forward(layers, x, outputs)

    monkeypatch.setattr(numpy_update_module, "numpy_q_forward", spy)
    numpy_dqn_update(policy.model, policy.optimizer, obs, np.zeros(8, np.int64), np.zeros(8, np.float32),
                     loss_fn="huber", grad_clip=None)
    assert len(calls) == 1 and calls[0] is obs
    model = policy.model
    assert isinstance(model, QNetwork)
    activations = [obs]
    q_values = numpy_q_forward(model.numpy_layers(), obs, activations)
    np.testing.assert_array_equal(model.numpy_q_values(obs), q_values)
    assert len(activations) == 3  # the input and both hidden layers' outputs (16, 8)
    assert [a.shape[1] for a in activations] == [4, 16, 8]


class _SubclassedQNetwork(QNetwork):
    pass


def _net(**kwargs: Any) -> QNetwork:
    return QNetwork(4, 2, hidden=[8], **kwargs)


def _adam(net: torch.nn.Module, **kwargs: Any) -> torch.optim.Optimizer:
    return torch.optim.Adam(net.parameters(), **kwargs)


def _tied() -> QNetwork:
    """Two square hidden layers sharing one weight: torch sums both layers' gradients into it,
    where a backward pass with one gradient per layer would keep only one of them."""
    net = QNetwork(4, 2, hidden=[8, 8, 8])
    hidden, _, _ = net.linear_layers()
    hidden[2].weight = hidden[1].weight
    return net


def _two_groups() -> tuple[QNetwork, torch.optim.Optimizer]:
    net = _net()
    heads = [p for name, p in net.named_parameters() if not name.startswith("trunk.")]
    return net, torch.optim.Adam([{"params": net.trunk.parameters()}, {"params": heads, "lr": 1e-4}])


@pytest.mark.parametrize(("make", "why"), [
    (lambda: (net := _net(activation="elu"), _adam(net)), "activation 'elu'"),
    (lambda: (net := _SubclassedQNetwork(4, 2), _adam(net)), "_SubclassedQNetwork, not a QNetwork"),
    (lambda: (net := torch.nn.Linear(4, 2), _adam(net)), "Linear, not a QNetwork"),
    (lambda: (net := _net(), torch.optim.SGD(net.parameters(), lr=0.1)), "SGD, not torch.optim.Adam"),
    (lambda: (net := _net(), _adam(net, weight_decay=0.01)), "weight_decay=0.01"),
    (lambda: (net := _net(), _adam(net, amsgrad=True)), "amsgrad=True"),
    (lambda: (net := _net(), _adam(net, maximize=True)), "maximize=True"),
    (lambda: (net := _net().double(), _adam(net)), "torch.float64"),
    (_two_groups, "2 param groups"),
    (lambda: (net := _net(), _adam(net.advantage_head)), "not train exactly the network's parameters"),
    (lambda: (net := _tied(), _adam(net)), "share a parameter"),
], ids=["elu", "subclass", "not-qnetwork", "sgd", "weight-decay", "amsgrad", "maximize", "float64",
        "two-groups", "some-params", "tied-layers"])
def test_unsupported_pairs_say_why(make: Any, why: str) -> None:
    model, optimizer = make()
    reason = numpy_update_unsupported(model, optimizer)
    assert reason is not None and why in reason
    assert not supports_numpy_update(model, optimizer)


@pytest.mark.parametrize(("make_net", "why"), [
    (lambda: _net(activation="elu"), "activation 'elu'"),
    (lambda: _SubclassedQNetwork(4, 2), "_SubclassedQNetwork, not a QNetwork"),
    (lambda: torch.nn.Linear(4, 2), "Linear, not a QNetwork"),
    (_tied, "share a parameter"),
], ids=["elu", "subclass", "not-qnetwork", "tied-layers"])
def test_the_update_itself_refuses_a_network_its_maths_does_not_describe(make_net: Any, why: str) -> None:
    """numpy_dqn_update makes the network half of numpy_update_unsupported's check itself, so no
    caller can have a network it does not describe trained as a plain QNetwork (or fail on a
    KeyError half-way); nothing moves before the refusal."""
    net = make_net()
    optimizer = _adam(net)
    before = {name: p.detach().clone() for name, p in net.named_parameters()}
    rng = np.random.default_rng(0)
    with pytest.raises(TypeError, match=why):
        numpy_dqn_update(net, optimizer, rng.standard_normal((8, 4)).astype(np.float32),
                         np.zeros(8, np.int64), np.zeros(8, np.float32), loss_fn="huber", grad_clip=None)
    assert all(torch.equal(p, before[name]) for name, p in net.named_parameters())
    assert not optimizer.state


def test_supported_pairs_and_a_frozen_parameter() -> None:
    for activation in ("relu", "tanh"):
        for dueling in (True, False):
            net = _net(activation=activation, dueling=dueling)
            assert numpy_update_unsupported(net, torch.optim.Adam(net.parameters(), lr=1e-3)) is None
    net = _net()
    optimizer = torch.optim.Adam(net.parameters())
    net.advantage_head.bias.requires_grad_(False)  # torch's Adam would skip it; numpy would not
    assert "requires_grad=False" in (numpy_update_unsupported(net, optimizer) or "")


# ------------------------------------------------------------------ the backends in training
def _algo(backend: str, **training: Any) -> DQN:
    settings: dict[str, Any] = {
        "train_batch_size": 256, "minibatch_size": 64, "num_steps_sampled_before_learning_starts": 256,
        "target_network_update_freq": 256, "update_backend": backend,
        # Always explore: actions then do not depend on the weights, so both runs see the same
        # transitions and replay the same minibatches, and only the updates can differ.
        "epsilon": [[0, 1.0]], "model": {"hidden": [64, 64], "activation": "relu"},
    }
    settings.update(training)
    algo = (DQNConfig().environment("CartPole-v1")
            .env_runners(num_env_runners=0, rollout_fragment_length=64)
            .training(**settings).debugging(seed=3).build())
    assert isinstance(algo, DQN)
    return algo


def _arrays(algo: DQN) -> dict[str, np.ndarray]:
    policy = algo.get_policy()
    assert isinstance(policy, DQNPolicy)
    return {**{"w/" + k: v for k, v in policy.get_weights().items()},
            **{"t/" + k: v.numpy() for k, v in policy.target_model.state_dict().items()}}


@pytest.mark.parametrize("variant", [
    {},  # the defaults: double Q, dueling, relu, Huber, clip 10
    {"double_q": False, "dueling": False},
    {"n_step": 3, "td_error_loss_fn": "mse", "grad_clip": None},
    {"model": {"hidden": [64, 64], "activation": "tanh"}, "dueling": False, "n_step": 3},
], ids=["double-dueling-relu", "plain", "nstep3-mse-noclip", "tanh-nstep3"])
def test_numpy_and_torch_backends_train_to_the_same_weights(variant: dict[str, Any]) -> None:
    runs = {backend: _algo(backend, **variant) for backend in ("numpy", "torch")}
    try:
        for _ in range(4):
            results = {backend: algo.train() for backend, algo in runs.items()}
        for backend, result in results.items():
            assert result["learners"]["default_policy"]["update_backend"] == backend
        assert runs["numpy"].get_policy().num_grad_updates == 416  # 32, then 128 per iteration
        ours, theirs = _arrays(runs["numpy"]), _arrays(runs["torch"])
        worst = max(float(np.abs(ours[k] - theirs[k]).max()) for k in ours)
        assert worst <= TRAINING_ATOL, f"max |numpy - torch| = {worst:.2e} over {sorted(ours)}"
        assert any(not np.array_equal(ours[k], theirs[k]) for k in ours)  # two real backends ran
    finally:
        for algo in runs.values():
            algo.stop()


def test_a_network_replaced_after_the_backend_was_chosen_is_refused_not_updated_as_a_qnetwork() -> None:
    """numpy_dqn_learn runs QNetwork maths (numpy_dqn_update refuses anything else); DQN chose it
    for this iteration's QNetwork. A network
    swapped in since (here a subclass, which may change the forward pass) is refused before anything moves,
    where the numpy update would have trained it as a plain QNetwork without a word."""
    from cairn.algorithms.dqn.learn import numpy_dqn_learn
    from cairn.learners.sync import LOCAL_SYNC

    policy = _policy("relu", True)
    replacement = _SubclassedQNetwork(4, 3, hidden=[16, 8], activation="relu", dueling=True)
    replacement.load_state_dict(policy.model.state_dict())
    policy.model = replacement
    before = {name: p.detach().clone() for name, p in policy.model.named_parameters()}
    rng = np.random.default_rng(0)
    sample = {"obs": rng.standard_normal((8, 4)).astype(np.float32), "actions": rng.integers(3, size=8),
              "rewards": np.ones(8, np.float32), "next_obs": rng.standard_normal((8, 4)).astype(np.float32),
              "terminateds": np.zeros(8, bool), "n_steps": np.ones(8, np.int64)}
    config = DQNConfig().training(double_q=True)
    with pytest.raises(TypeError, match="_SubclassedQNetwork"):
        numpy_dqn_learn(config, policy, LOCAL_SYNC, sample=sample)
    assert all(torch.equal(p, before[name]) for name, p in policy.model.named_parameters())
    assert policy.num_grad_updates == 0


def test_acting_and_the_update_follow_an_activation_changed_after_the_views_were_taken() -> None:
    """QNetwork.forward reads ``activation`` at each call; its numpy views were taken with the
    activation of that moment and acted (and trained) with it after the attribute changed."""
    ours = _policy("relu", True)
    model = ours.model
    assert isinstance(model, QNetwork)
    obs = np.random.default_rng(0).normal(size=(32, 4)).astype(np.float32)
    model.numpy_q_values(obs)  # the views are taken with relu
    model.activation = "tanh"
    with torch.no_grad():
        np.testing.assert_allclose(model.numpy_q_values(obs), model(torch.from_numpy(obs)).numpy(),
                                   rtol=0, atol=1e-5)
    theirs = copy.deepcopy(ours)
    rng = np.random.default_rng(1)
    for _ in range(3):
        actions, targets = rng.integers(0, 3, size=32), rng.normal(scale=3.0, size=32).astype(np.float32)
        numpy_dqn_update(model, ours.optimizer, obs, actions, targets, loss_fn="huber", grad_clip=None)
        _torch_update(theirs, obs, actions, targets, loss_fn="huber", grad_clip=None, weights=None)
    for a, b in zip(ours.model.parameters(), theirs.model.parameters(), strict=True):
        np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), rtol=0, atol=UPDATE_ATOL)
