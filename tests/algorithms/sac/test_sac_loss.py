"""SAC's loss functions against values computed by hand, and against torch's distributions."""

from __future__ import annotations

import doctest
import math

import numpy as np
import pytest
import torch

from cairn.algorithms.replay_buffers import replay_transitions
from cairn.algorithms.sac import loss as sac_loss
from cairn.algorithms.sac.distribution import SquashedGaussian
from cairn.algorithms.sac.loss import (
    SQUASH_EPSILON,
    actor_loss,
    alpha_loss,
    critic_loss,
    soft_q_targets,
    squashed_gaussian_log_prob,
    squashed_gaussian_sample,
)
from cairn.env_runner.sample_batch import SampleBatch


def test_doctests_of_the_loss_module():
    assert doctest.testmod(sac_loss, optionflags=doctest.ELLIPSIS).failed == 0


def test_squashed_log_prob_by_hand():
    # u = 1, N(0, 1): log N = -1/2 - log sqrt(2 pi); correction log(1 - tanh(1)^2 + 1e-6).
    expected = -0.5 - 0.5 * math.log(2 * math.pi) - math.log(1 - math.tanh(1.0) ** 2 + 1e-6)
    got = squashed_gaussian_log_prob(torch.zeros(1, 1), torch.zeros(1, 1), torch.ones(1, 1))
    assert float(got) == pytest.approx(expected, abs=1e-6)
    assert expected == pytest.approx(-0.5513793, abs=1e-6)


def test_squashed_log_prob_sums_dimensions_and_matches_sb3s_form():
    gen = torch.Generator().manual_seed(0)
    mean, log_std = torch.randn(64, 3, generator=gen), 0.5 * torch.randn(64, 3, generator=gen)
    u = mean + log_std.exp() * torch.randn(64, 3, generator=gen)
    # Stable-Baselines3's SquashedDiagGaussianDistribution.log_prob, written out.
    reference = (torch.distributions.Normal(mean, log_std.exp()).log_prob(u).sum(-1)
                 - torch.log(1 - torch.tanh(u) ** 2 + SQUASH_EPSILON).sum(-1))
    np.testing.assert_allclose(squashed_gaussian_log_prob(mean, log_std, u).numpy(), reference.numpy(),
                               rtol=1e-5, atol=1e-5)
    # Away from saturation it is eq. 26 (torch's exact tanh change of variables) up to epsilon.
    calm = u.abs().max(dim=-1).values < 2
    exact = torch.distributions.TransformedDistribution(
        torch.distributions.Normal(mean, log_std.exp()), [torch.distributions.TanhTransform()])
    np.testing.assert_allclose(squashed_gaussian_log_prob(mean, log_std, u)[calm].numpy(),
                               exact.log_prob(torch.tanh(u)).sum(-1)[calm].numpy(), rtol=1e-4, atol=1e-4)
    assert 10 < int(calm.sum()) < 64


def test_squashed_log_prob_is_bounded_where_tanh_saturates():
    # tanh(20) rounds to 1 in float32: the naive log(1 - tanh^2) is -inf; with epsilon the
    # correction stops at log(1e-6) and its gradient vanishes (the exact term would keep a
    # slope of -2 in |u|): d log pi / du is the Gaussian's alone, -u.
    u = torch.tensor([[20.0]], requires_grad=True)
    got = squashed_gaussian_log_prob(torch.zeros(1, 1), torch.zeros(1, 1), u)
    expected = -0.5 * 400 - 0.5 * math.log(2 * math.pi) - math.log(1e-6)
    assert math.isfinite(float(got.detach())) and float(got.detach()) == pytest.approx(expected, rel=1e-6)
    got.sum().backward()
    assert float(u.grad) == pytest.approx(-20.0, rel=1e-6)
    assert float(torch.log(1 - torch.tanh(u.detach()) ** 2)) == -math.inf


def test_sample_log_prob_equals_the_log_prob_of_its_pre_tanh_value():
    gen = torch.Generator().manual_seed(1)
    mean, log_std = torch.randn(32, 2, generator=gen), 0.5 * torch.randn(32, 2, generator=gen)
    noise = torch.randn(32, 2, generator=gen)
    actions, log_prob = squashed_gaussian_sample(mean, log_std, noise)
    pre_tanh = mean + log_std.exp() * noise
    np.testing.assert_allclose(actions.numpy(), torch.tanh(pre_tanh).numpy(), rtol=0, atol=0)
    np.testing.assert_allclose(log_prob.numpy(), squashed_gaussian_log_prob(mean, log_std, pre_tanh).numpy(),
                               rtol=1e-5, atol=1e-5)


def test_sample_is_reparameterised():
    mean = torch.zeros(2, 1, requires_grad=True)
    log_std = torch.zeros(2, 1, requires_grad=True)
    actions, log_prob = squashed_gaussian_sample(mean, log_std, torch.tensor([[0.5], [-1.0]]))
    np.testing.assert_allclose(actions.detach().numpy(), np.tanh([[0.5], [-1.0]]), rtol=1e-6)
    actions.sum().backward()
    np.testing.assert_allclose(mean.grad.numpy(), 1 - np.tanh([[0.5], [-1.0]]) ** 2, rtol=1e-6)
    assert log_prob.shape == (2,)


def test_soft_q_targets_by_hand():
    # min(Q1', Q2') = [3, 1]; soft values [3 + 0.2, 1 - 0.1]; the second transition is terminal.
    targets = soft_q_targets(
        torch.tensor([1.0, 2.0]), torch.tensor([0.99, 0.9801]), torch.tensor([False, True]),
        torch.tensor([[3.0, 5.0], [4.0, 1.0]]), torch.tensor([-1.0, 0.5]), 0.2)
    np.testing.assert_allclose(targets.numpy(), [1.0 + 0.99 * 3.2, 2.0], rtol=1e-6)


def test_soft_q_targets_use_the_n_step_discount():
    # A 3-step return R bootstraps with gamma ** 3.
    targets = soft_q_targets(torch.tensor([2.71]), torch.tensor([0.9**3]), torch.tensor([False]),
                             torch.tensor([[10.0], [10.0]]), torch.tensor([0.0]), 1.0)
    assert float(targets[0]) == pytest.approx(2.71 + 0.729 * 10.0, rel=1e-6)


def test_critic_loss_sums_both_critics_and_weights_samples():
    q = torch.tensor([[0.0, 0.0], [2.0, 0.0]], requires_grad=True)
    y = torch.tensor([1.0, 0.0])
    loss, td = critic_loss(q, y)
    # errors [[-1, 0], [1, 0]]: per-sample 0.5 * (1 + 1) = 1 and 0; mean 0.5.
    assert float(loss.detach()) == pytest.approx(0.5)
    np.testing.assert_allclose(td.numpy(), [1.0, 0.0])
    weighted, _ = critic_loss(q, y, torch.tensor([3.0, 1.0]))
    assert float(weighted.detach()) == pytest.approx(1.5)
    loss.backward()
    np.testing.assert_allclose(q.grad.numpy(), [[-0.5, 0.0], [0.5, 0.0]])  # (Q - y) / B


def test_actor_loss_by_hand_and_only_through_the_smaller_q():
    q = torch.tensor([[3.0, 1.0], [2.0, 4.0]], requires_grad=True)
    loss = actor_loss(torch.tensor([-1.0, 2.0]), q, 0.5)
    # min Q = [2, 1]: mean(0.5 * -1 - 2, 0.5 * 2 - 1) = mean(-2.5, 0) = -1.25.
    assert float(loss.detach()) == pytest.approx(-1.25)
    loss.backward()
    np.testing.assert_allclose(q.grad.numpy(), [[0.0, -0.5], [-0.5, 0.0]])


def test_alpha_loss_by_hand_and_its_direction():
    log_alpha = torch.tensor([math.log(0.5)], requires_grad=True)
    log_prob = torch.tensor([-0.5, -1.5], requires_grad=True)
    loss = alpha_loss(log_alpha, log_prob, -1.0)
    # mean(log_prob + target) = -2: loss = -(log 0.5 * -2) = 2 log 0.5.
    assert float(loss.detach()) == pytest.approx(2 * math.log(0.5))
    loss.backward()
    # Entropy (mean -log_prob = 1) above its target (-1): descending lowers alpha.
    assert float(log_alpha.grad[0]) == pytest.approx(2.0)
    assert log_prob.grad is None


def test_squashed_gaussian_rescales_to_the_box_and_inverts_in_logp():
    import gymnasium as gym

    dist = SquashedGaussian(
        gym.spaces.Box(np.array([-2.0, 0.0], np.float32), np.array([2.0, 10.0], np.float32)))
    raw = np.array([[-1.0, 1.0], [0.0, 0.0], [0.5, -0.5]], dtype=np.float32)
    np.testing.assert_allclose(dist.to_env(raw), [[-2.0, 10.0], [0.0, 5.0], [1.0, 2.5]])
    inputs = torch.tensor([[0.3, -0.2, -0.5, 0.1]])
    actions = dist.sample(inputs, torch.Generator().manual_seed(0))
    u = torch.atanh(actions)
    np.testing.assert_allclose(dist.logp(inputs, actions).numpy(),
                               squashed_gaussian_log_prob(inputs[:, :2], inputs[:, 2:], u).numpy(), rtol=1e-5)
    np.testing.assert_allclose(dist.deterministic(inputs).numpy(), np.tanh([[0.3, -0.2]]), rtol=1e-6)


def test_replay_transitions_store_n_step_returns():
    batch = SampleBatch({
        "obs": np.arange(4, dtype=np.float32)[:, None], "actions": np.zeros((4, 1), np.float32),
        "rewards": np.array([1.0, 1.0, 1.0, 1.0], np.float32),
        "terminateds": np.array([False, False, True, False]), "truncateds": np.zeros(4, bool),
        "ends": np.array([False, False, True, True]),
        "next_obs": np.arange(1, 5, dtype=np.float32)[:, None]})
    rows = replay_transitions(batch, gamma=0.5, n_step=2)
    np.testing.assert_allclose(rows["rewards"], [1.5, 1.5, 1.0, 1.0])
    np.testing.assert_array_equal(rows["n_steps"], [2, 2, 1, 1])
    np.testing.assert_array_equal(rows["next_obs"][:, 0], [2.0, 3.0, 3.0, 4.0])
    np.testing.assert_array_equal(rows["terminateds"], [False, True, True, False])
