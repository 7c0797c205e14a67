"""The numpy DQN update is the torch update: same gradients, same Adam step, same state."""

from __future__ import annotations

import copy

import gymnasium as gym
import numpy as np
import pytest
import torch

from cairn.algorithms.dqn.dqn_policy import DQNPolicy
from cairn.algorithms.dqn.loss import dqn_loss
from cairn.algorithms.dqn.numpy_update import numpy_dqn_update, supports_numpy_update
from cairn.policy.torch_utils import clip_grad_norm


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
        np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), rtol=1e-4, atol=1e-5, err_msg=name)
    for a, b in zip(ours.model.parameters(), theirs.model.parameters()):
        sa, sb = ours.optimizer.state[a], theirs.optimizer.state[b]
        assert float(sa["step"]) == float(sb["step"]) == 5.0
        np.testing.assert_allclose(sa["exp_avg"].numpy(), sb["exp_avg"].numpy(), rtol=1e-4, atol=1e-6)
        np.testing.assert_allclose(sa["exp_avg_sq"].numpy(), sb["exp_avg_sq"].numpy(), rtol=1e-4, atol=1e-8)


def test_unsupported_networks_use_the_torch_path():
    elu = DQNPolicy(gym.spaces.Box(-1, 1, (4,)), gym.spaces.Discrete(2), {"model": {"activation": "elu"}}, seed=0)
    assert not supports_numpy_update(elu.model, elu.optimizer)
    relu = _policy("relu", True)
    sgd = torch.optim.SGD(relu.model.parameters(), lr=0.1)
    assert not supports_numpy_update(relu.model, sgd)
