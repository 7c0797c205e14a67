"""DQN's maths as pure functions.

Q-learning targets (Mnih et al. 2015), double Q-learning (van Hasselt et al. 2016), n-step
returns (Sutton 1988; Hessel et al. 2018) and importance weights for prioritized replay
(Schaul et al. 2016).
"""

from __future__ import annotations

import numpy as np
import torch
from torch.nn import functional as F

__all__ = ["n_step_returns", "q_targets", "dqn_loss", "DQNLossStats", "TD_ERROR_LOSS_FNS"]

TD_ERROR_LOSS_FNS = ("huber", "mse")


def n_step_returns(
    rewards: np.ndarray, ends: np.ndarray, *, gamma: float, n: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """n-step returns for trajectory pieces laid end to end.

    ``G_t = sum_{k<m} gamma^k r_{t+k}`` where ``m = min(n, steps left in t's piece)``; the
    window stops at the step marked in ``ends`` (episode or fragment end), so a short window
    simply bootstraps earlier. Returns ``(G, last, m)``: the returns, the row whose next
    observation (and ``terminated``) the target bootstraps from, and the window lengths, so
    that the bootstrap discount is ``gamma ** m``.

    >>> G, last, m = n_step_returns(np.array([1.0, 1.0, 1.0]), np.array([False, False, True]),
    ...                             gamma=0.5, n=2)
    >>> G.tolist(), last.tolist(), m.tolist()
    ([1.5, 1.5, 1.0], [1, 2, 2], [2, 2, 1])
    """
    length = len(rewards)
    t = np.arange(length)
    returns = np.zeros(length, dtype=np.float64)
    last = t.copy()
    steps = np.zeros(length, dtype=np.int64)
    open_ = np.ones(length, dtype=bool)  # windows still collecting rewards
    for k in range(n):
        row = np.minimum(t + k, length - 1)
        returns += np.where(open_, gamma**k * rewards[row], 0.0)
        last = np.where(open_, row, last)
        steps += open_
        open_ &= ~ends[row] & (t + k + 1 < length)
    return returns.astype(np.float32), last, steps


def q_targets(
    rewards: np.ndarray,
    discounts: np.ndarray,
    terminateds: np.ndarray,
    next_q_target: np.ndarray,
    next_q_online: np.ndarray | None = None,
    *,
    double_q: bool = True,
    next_legal: np.ndarray | None = None,
) -> np.ndarray:
    """Bootstrapped Q-learning targets (no gradient flows through them, so numpy suffices).

    ``y = r + discount * (1 - terminated) * Q_target(s', a*)`` with
    ``a* = argmax_a Q_online(s', a)`` (double Q-learning, van Hasselt et al. 2016) or
    ``argmax_a Q_target(s', a)`` (Mnih et al. 2015).

    With action masks, ``a*`` ranges over the legal actions of ``s'`` only, and an ``s'`` with
    no legal action bootstraps nothing, as a terminal one: no action is ever taken there, so
    the return from it is 0 (its masked Q-values, about ``-1e9``, are no value at all).

    Args:
        rewards: (n-step) returns, ``[B]``.
        discounts: ``gamma ** n`` per transition, ``[B]``.
        terminateds: Whether ``s'`` is terminal, ``[B]``; truncation is not termination.
        next_q_target: ``Q_target(s', .)``, ``[B, A]``.
        next_q_online: ``Q_online(s', .)``, ``[B, A]``; needed when ``double_q``.
        next_legal: Which actions are legal in ``s'`` (its action mask), ``[B, A]`` bool;
            None: all of them.

    >>> q_targets(np.array([1.0]), np.array([0.5]), np.array([False]),
    ...           np.array([[10.0, 0.0]]), np.array([[0.0, 5.0]])).tolist()
    [1.0]
    >>> q_targets(np.array([1.0, 1.0]), np.array([0.5, 0.5]), np.array([False, False]),
    ...           np.array([[10.0, 4.0], [10.0, 4.0]]), double_q=False,
    ...           next_legal=np.array([[False, True], [False, False]])).tolist()
    [3.0, 1.0]
    """
    no_bootstrap = np.asarray(terminateds, dtype=bool)
    if next_legal is not None:
        no_bootstrap = no_bootstrap | ~next_legal.any(axis=1)
        next_q_target = np.where(next_legal, next_q_target, -np.inf)
        if next_q_online is not None:
            next_q_online = np.where(next_legal, next_q_online, -np.inf)
    if double_q:
        if next_q_online is None:
            raise ValueError("double_q needs next_q_online, the online network's Q(s', .).")
        next_actions = next_q_online.argmax(axis=1)
    else:
        next_actions = next_q_target.argmax(axis=1)
    next_value = np.take_along_axis(next_q_target, next_actions[:, None], axis=1)[:, 0]
    # Zeroed before the product: a row without legal actions holds -inf, and 0 * -inf is NaN.
    bootstrap = discounts * np.where(no_bootstrap, 0.0, next_value)
    return (rewards + bootstrap).astype(np.float32)


class DQNLossStats(dict[str, float]):
    """Scalars describing one gradient update."""


def dqn_loss(
    q_values: torch.Tensor,
    actions: torch.Tensor,
    targets: torch.Tensor,
    *,
    loss_fn: str = "huber",
    weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor, DQNLossStats]:
    """The TD loss of a batch of transitions, and its TD errors (for replay priorities).

    ``L = mean(w * l(Q(s, a) - y))`` where ``y`` are :func:`q_targets`, ``l`` is the Huber loss
    (delta 1) or the squared error, and ``w`` are importance weights (1 without prioritized
    replay).

    Args:
        q_values: ``Q(s, .)`` of the online network, ``[B, A]`` (with gradients).
        actions: Taken actions, ``[B]`` int64.
        targets: Bootstrapped targets ``y``, ``[B]``.
        weights: Importance-sampling weights, ``[B]``.
    """
    if loss_fn not in TD_ERROR_LOSS_FNS:
        raise ValueError(f"Got invalid {loss_fn=}. Valid values are: {list(TD_ERROR_LOSS_FNS)}.")
    q_taken = q_values.gather(1, actions.long().unsqueeze(1)).squeeze(1)
    if loss_fn == "huber":
        per_sample = F.huber_loss(q_taken, targets, reduction="none", delta=1.0)
    else:
        per_sample = (q_taken - targets).pow(2)
    loss = per_sample.mean() if weights is None else (weights * per_sample).mean()
    # Statistics in numpy on views of the tensors: a handful of torch reductions per update
    # would cost more than the update's arithmetic for small networks.
    q_taken_np = q_taken.detach().cpu().numpy()
    targets_np = targets.cpu().numpy()
    td_errors = q_taken_np - targets_np
    stats = DQNLossStats(
        loss=float(loss.detach()),
        q_mean=float(q_taken_np.mean()),
        target_mean=float(targets_np.mean()),
        td_error_abs_mean=float(np.abs(td_errors).mean()),
    )
    return loss, torch.from_numpy(td_errors), stats
