"""DQN's pure maths: n-step returns, the TD loss, and the dueling Q-network."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from cairn.algorithms.dqn.loss import dqn_loss, n_step_returns, q_targets
from cairn.algorithms.dqn.model import QNetwork


def n_step_reference(rewards, ends, gamma, n):  # type: ignore[no-untyped-def]
    """The definition, one transition at a time."""
    out, lasts, steps = [], [], []
    for t in range(len(rewards)):
        g, k = 0.0, 0
        while True:
            g += gamma**k * rewards[t + k]
            k += 1
            if ends[t + k - 1] or k == n:
                break
        out.append(g)
        lasts.append(t + k - 1)
        steps.append(k)
    return np.array(out), np.array(lasts), np.array(steps)


@pytest.mark.parametrize("n", [1, 2, 3, 5])
def test_n_step_returns_match_definition(n: int) -> None:
    rng = np.random.default_rng(n)
    rewards = rng.normal(size=40).astype(np.float32)
    ends = rng.random(40) < 0.2
    ends[-1] = True
    returns, last, steps = n_step_returns(rewards, ends, gamma=0.9, n=n)
    ref_returns, ref_last, ref_steps = n_step_reference(rewards, ends, 0.9, n)
    np.testing.assert_allclose(returns, ref_returns, rtol=1e-5)
    np.testing.assert_array_equal(last, ref_last)
    np.testing.assert_array_equal(steps, ref_steps)


def q(*rows: list[float]) -> torch.Tensor:
    return torch.tensor(rows, dtype=torch.float32)


def test_double_q_evaluates_the_online_argmax_with_the_target_network() -> None:
    next_target = np.array([[10.0, 0.0]])
    next_online = np.array([[0.0, 5.0]])  # online prefers action 1, worth 0 to the target
    args = (np.array([1.0]), np.array([0.5]), np.array([False]), next_target, next_online)
    # double: y = 1 + 0.5 * Q_target(s', 1) = 1; plain: y = 1 + 0.5 * max Q_target = 6
    assert q_targets(*args, double_q=True).tolist() == [1.0]
    assert q_targets(*args, double_q=False).tolist() == [6.0]
    with pytest.raises(ValueError, match="next_q_online"):
        q_targets(*args[:4], double_q=True)


def test_terminal_transitions_do_not_bootstrap_and_truncation_is_not_terminal() -> None:
    targets = q_targets(np.array([1.0, 1.0]), np.array([0.99, 0.99]), np.array([True, False]),
                        np.array([[7.0, 7.0], [7.0, 7.0]]), np.array([[1.0, 0.0], [1.0, 0.0]]))
    assert targets.dtype == np.float32
    assert targets.tolist() == pytest.approx([1.0, 1.0 + 0.99 * 7.0])


def test_td_errors_and_stats() -> None:
    q_values = q([1.0, 2.0], [3.0, 0.0]).requires_grad_()
    _, td, stats = dqn_loss(q_values, torch.tensor([1, 0]), torch.tensor([1.0, 1.0]), loss_fn="mse")
    assert td.tolist() == [1.0, 2.0]
    assert stats["q_mean"] == 2.5 and stats["target_mean"] == 1.0
    assert stats["td_error_abs_mean"] == 1.5


def test_huber_is_quadratic_near_zero_and_linear_beyond_one() -> None:
    def loss_for(error: float, fn: str) -> float:
        q_values = q([error]).requires_grad_()
        loss, _, _ = dqn_loss(q_values, torch.tensor([0]), torch.tensor([0.0]), loss_fn=fn)
        return float(loss.detach())

    assert loss_for(0.5, "huber") == pytest.approx(0.125)
    assert loss_for(3.0, "huber") == pytest.approx(2.5)
    assert loss_for(3.0, "mse") == pytest.approx(9.0)
    with pytest.raises(ValueError, match="loss_fn"):
        loss_for(1.0, "l1")


def test_importance_weights_scale_each_sample_and_gradients_reach_taken_actions_only() -> None:
    q_values = q([2.0, 0.0], [0.0, 4.0]).requires_grad_()
    loss, _, _ = dqn_loss(q_values, torch.tensor([0, 1]), torch.tensor([0.0, 0.0]), loss_fn="mse",
                          weights=torch.tensor([1.0, 0.0]))
    assert float(loss.detach()) == pytest.approx(4.0 / 2)
    loss.backward()
    assert q_values.grad is not None
    assert q_values.grad.tolist() == [[2.0, 0.0], [0.0, 0.0]]


def test_dueling_head_combines_value_and_centred_advantages() -> None:
    torch.manual_seed(0)
    net = QNetwork(3, 4, hidden=[8], dueling=True)
    obs = torch.randn(5, 3)
    features = net.trunk(obs)
    assert net.value_head is not None
    value = net.value_head(features).squeeze(1)
    q_values = net(obs)
    torch.testing.assert_close(q_values.mean(dim=1), value)
    advantages = net.advantage_head(features)
    torch.testing.assert_close(q_values - value[:, None], advantages - advantages.mean(1, keepdim=True))


@pytest.mark.parametrize("dueling", [True, False])
def test_numpy_forward_matches_torch(dueling: bool) -> None:
    net = QNetwork(4, 3, hidden=[16, 16], activation="relu", dueling=dueling)
    net.reset_parameters(torch.Generator().manual_seed(1))
    obs = np.random.default_rng(0).normal(size=(7, 4)).astype(np.float32)
    with torch.no_grad():
        expected = net(torch.from_numpy(obs)).numpy()
    np.testing.assert_allclose(net.numpy_q_values(obs), expected, rtol=1e-5, atol=1e-6)
    with torch.no_grad():  # the numpy path views the live parameters
        net.advantage_head.bias.add_(1.0)
        expected = net(torch.from_numpy(obs)).numpy()
    np.testing.assert_allclose(net.numpy_q_values(obs), expected, rtol=1e-5, atol=1e-6)


# Masked next states (issue 36, item 6): raw Q-values, as a network outputs them before masking,
# so that an illegal action is the best one and a mistake shows.
NEXT_TARGET = np.array([[9.0, 2.0, 4.0], [9.0, 2.0, 4.0], [9.0, 2.0, 4.0]], dtype=np.float32)
NEXT_ONLINE = np.array([[8.0, 1.0, 0.0], [8.0, 1.0, 0.0], [8.0, 1.0, 0.0]], dtype=np.float32)
LEGAL = np.array([[False, True, True], [False, False, False], [True, True, True]])


@pytest.mark.parametrize("double_q", [True, False])
def test_a_next_state_without_legal_actions_bootstraps_nothing(double_q: bool) -> None:
    for q_value in (NEXT_TARGET, np.full((3, 3), -1e9, np.float32)):  # raw, and as masked Q-values
        targets = q_targets(np.array([1.0, 2.0, 3.0]), np.full(3, 0.99, np.float32),
                            np.array([False, False, False]), q_value, q_value, double_q=double_q,
                            next_legal=LEGAL)
        assert targets[1] == 2.0  # truncated into a state where nothing can be done: y = r


def test_the_maximum_ranges_over_legal_actions_only() -> None:
    targets = q_targets(np.array([1.0, 2.0, 3.0]), np.full(3, 0.5, np.float32), np.zeros(3, bool),
                        NEXT_TARGET, double_q=False, next_legal=LEGAL)
    assert targets.tolist() == [1.0 + 0.5 * 4.0, 2.0, 3.0 + 0.5 * 9.0]


def test_double_q_argmax_ranges_over_legal_actions_only() -> None:
    # The online network prefers action 0 (illegal in row 0), then action 1, worth 2 to the target.
    targets = q_targets(np.array([1.0, 2.0, 3.0]), np.full(3, 0.5, np.float32), np.zeros(3, bool),
                        NEXT_TARGET, NEXT_ONLINE, double_q=True, next_legal=LEGAL)
    assert targets.tolist() == [1.0 + 0.5 * 2.0, 2.0, 3.0 + 0.5 * 9.0]


def test_masked_targets_are_finite_without_warnings_for_any_discount() -> None:
    with np.errstate(all="raise"):  # 0 * -inf would be NaN: no row may compute it
        targets = q_targets(np.array([1.0, 2.0, 3.0]), np.zeros(3, np.float32),
                            np.array([True, False, False]), NEXT_TARGET, NEXT_ONLINE, next_legal=LEGAL)
    assert targets.tolist() == [1.0, 2.0, 3.0]


def test_without_masks_targets_are_unchanged_by_an_all_legal_table() -> None:
    rng = np.random.default_rng(0)
    args = (rng.normal(size=50).astype(np.float32), np.full(50, 0.97, np.float32), rng.random(50) < 0.3,
            rng.normal(size=(50, 4)).astype(np.float32), rng.normal(size=(50, 4)).astype(np.float32))
    assert np.array_equal(q_targets(*args), q_targets(*args, next_legal=np.ones((50, 4), bool)))
