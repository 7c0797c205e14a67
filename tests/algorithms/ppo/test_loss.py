"""GAE and the PPO loss against values computed by hand."""

import numpy as np
import pytest
import torch

from cairn.algorithms.ppo import compute_gae, ppo_loss


def test_gae_single_episode_by_hand():
    # Three steps, episode terminates at the end; gamma=0.5, lambda=0.5.
    rewards = np.array([1.0, 2.0, 3.0], np.float32)
    values = np.array([0.5, 1.0, 1.5], np.float32)
    next_values = np.array([1.0, 1.5, 9.0], np.float32)  # 9.0 is ignored: terminal
    term = np.array([False, False, True])
    ends = np.array([False, False, True])
    adv = compute_gae(rewards, values, next_values, term, ends, gamma=0.5, lambda_=0.5)
    d2 = 3.0 - 1.5  # 1.5
    d1 = 2.0 + 0.5 * 1.5 - 1.0  # 1.75
    d0 = 1.0 + 0.5 * 1.0 - 0.5  # 1.0
    a2 = d2
    a1 = d1 + 0.25 * a2
    a0 = d0 + 0.25 * a1
    np.testing.assert_allclose(adv, [a0, a1, a2], rtol=1e-6)


def test_gae_bootstraps_truncation_and_cuts_at_ends():
    rewards = np.array([1.0, 1.0, 1.0, 1.0], np.float32)
    values = np.zeros(4, np.float32)
    next_values = np.array([0.0, 10.0, 0.0, 4.0], np.float32)
    term = np.array([False, False, False, False])
    # Step 1 ends a truncated episode (bootstrap from its final obs, value 10); step 3 ends the
    # fragment (bootstrap from 4).
    ends = np.array([False, True, False, True])
    adv = compute_gae(rewards, values, next_values, term, ends, gamma=1.0, lambda_=1.0)
    np.testing.assert_allclose(adv, [12.0, 11.0, 6.0, 5.0])


def test_gae_lambda_zero_is_one_step_td():
    rng = np.random.default_rng(0)
    r, v, nv = (rng.normal(size=5).astype(np.float32) for _ in range(3))
    none = np.zeros(5, bool)
    adv = compute_gae(r, v, nv, none, none, gamma=0.9, lambda_=0.0)
    np.testing.assert_allclose(adv, r + 0.9 * nv - v, rtol=1e-6)


def _loss(**overrides):
    args = dict(
        logp=torch.log(torch.tensor([0.6, 0.2])),
        old_logp=torch.log(torch.tensor([0.4, 0.4])),
        advantages=torch.tensor([1.0, -1.0]),
        values=torch.tensor([1.0, 2.0]),
        old_values=torch.tensor([0.0, 2.5]),
        returns=torch.tensor([2.0, 2.0]),
        entropy=torch.tensor([0.5, 0.7]),
    )
    kwargs = dict(clip_param=0.2, vf_coeff=0.5, entropy_coeff=0.01, vf_clip_param=None)
    kwargs.update(overrides)
    return ppo_loss(**args, **kwargs)


def test_clipped_surrogate_by_hand():
    loss, stats = _loss()
    # ratios 1.5 and 0.5: min(1.5*1, 1.2*1)=1.2 ; min(0.5*-1, 0.8*-1)=-0.8 -> mean 0.2
    assert stats["policy_loss"].item() == pytest.approx(-0.2)
    assert stats["vf_loss"].item() == pytest.approx((1.0 + 0.0) / 2)
    assert stats["entropy"].item() == pytest.approx(0.6)
    assert loss.item() == pytest.approx(-0.2 + 0.5 * 0.5 - 0.01 * 0.6)
    assert stats["clip_fraction"].item() == pytest.approx(1.0)


def test_value_clipping_by_hand():
    _, stats = _loss(vf_clip_param=0.5)
    # v0: clipped 0 + clamp(1, -.5, .5) = .5 -> max((1-2)^2, (.5-2)^2) = 2.25
    # v1: clipped 2.5 + clamp(-.5) = 2.0 -> max(0, 0) = 0
    assert stats["vf_loss"].item() == pytest.approx(2.25 / 2)


def test_loss_gradient_flows_only_through_unclipped_ratio():
    logp = torch.log(torch.tensor([0.6, 0.2])).requires_grad_()
    loss, _ = ppo_loss(logp, torch.log(torch.tensor([0.4, 0.4])), torch.tensor([1.0, -1.0]),
                       torch.zeros(2), torch.zeros(2), torch.zeros(2), torch.zeros(2),
                       clip_param=0.2, vf_coeff=0.0, entropy_coeff=0.0, vf_clip_param=None)
    loss.backward()
    assert logp.grad is not None
    assert logp.grad.tolist() == [0.0, 0.0]  # both samples are clipped


def test_gae_refuses_a_termination_that_does_not_end_its_piece():
    """Passing the truncations as ``ends`` (a natural slip) let the advantage of a terminated
    row run on into the next episode's: a wrong number and no error. V-trace refuses it."""
    rewards, values, next_values = np.ones(4, np.float32), np.zeros(4, np.float32), np.zeros(4, np.float32)
    terminateds = np.array([False, True, False, False])
    ends = np.array([False, False, False, True])
    with pytest.raises(ValueError, match=r"rows \[1\] are terminated but not marked in ends"
                                         r".*terminateds \| truncateds"):
        compute_gae(rewards, values, next_values, terminateds, ends, gamma=0.9, lambda_=0.9)


def test_gae_refuses_columns_of_another_shape():
    """A critic's [n, 1] values broadcast against [n] rewards into an [n, n] result."""
    rewards, next_values = np.ones(3, np.float32), np.zeros(3, np.float32)
    done = np.array([False, False, True])
    with pytest.raises(ValueError, match=r"values has shape \(3, 1\), expected \(3,\)"):
        compute_gae(rewards, np.zeros((3, 1), np.float32), next_values, done, done, gamma=0.9, lambda_=0.9)
