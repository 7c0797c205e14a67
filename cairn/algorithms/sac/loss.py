"""SAC's maths as pure functions (Haarnoja et al. 2018, "Soft Actor-Critic Algorithms and
Applications", arXiv:1812.05905; equation numbers refer to it).

* :func:`squashed_gaussian_log_prob`: ``log pi(a|s)`` of ``a = tanh(u)``, ``u ~ N(mean, std)``
  (appendix C, eq. 26, with SB3's epsilon);
* :func:`soft_q_targets`: the twin-Q soft Bellman target with n-step returns (eqs. 3, 7);
* :func:`critic_loss`, :func:`actor_loss`, :func:`alpha_loss`: eqs. 5, 7 and 18.

n-step returns themselves are DQN's :func:`cairn.algorithms.dqn.loss.n_step_returns`.
"""

from __future__ import annotations

import math

import torch

__all__ = [
    "squashed_gaussian_log_prob",
    "squashed_gaussian_sample",
    "soft_q_targets",
    "critic_loss",
    "actor_loss",
    "alpha_loss",
    "SQUASH_EPSILON",
]

_LOG_SQRT_2PI = 0.5 * math.log(2 * math.pi)

#: ``epsilon`` in the tanh correction ``log(1 - tanh(u)^2 + epsilon)`` of
#: :func:`squashed_gaussian_log_prob`: Stable-Baselines3's value.
SQUASH_EPSILON = 1e-6


def squashed_gaussian_log_prob(mean: torch.Tensor, log_std: torch.Tensor,
                               pre_tanh: torch.Tensor) -> torch.Tensor:
    """``log pi(a|s)`` for ``a = tanh(u)``, per row (summed over action dimensions).

    ``log pi(a|s) = log N(u; mean, std) - sum_i log(1 - tanh(u_i)^2 + epsilon)``: eq. 26 with
    Stable-Baselines3's ``epsilon`` (:data:`SQUASH_EPSILON`; RLlib and CleanRL use the same).
    Where ``tanh(u)`` saturates, the exact term, about ``2 log 2 - 2|u|``, has no bound and
    keeps pulling ``u`` back (the actor loss weighs it by alpha); with ``epsilon`` each
    dimension's term stops at ``log(epsilon)`` (about -13.8) and its gradient fades. cairn
    computed the exact term until 2026-12; SB3's form learned better on HalfCheetah-v5 and
    Hopper-v5 (docs/sac.md, section MuJoCo).

    >>> round(float(squashed_gaussian_log_prob(torch.zeros(1, 1), torch.zeros(1, 1), torch.zeros(1, 1))), 4)
    -0.9189
    """
    z = (pre_tanh - mean) * torch.exp(-log_std)
    gaussian = (-0.5 * z.pow(2) - log_std - _LOG_SQRT_2PI).sum(dim=-1)
    return gaussian - _tanh_log_det(torch.tanh(pre_tanh))


def _tanh_log_det(actions: torch.Tensor) -> torch.Tensor:
    # sum_i log(1 - a_i^2 + epsilon), a = tanh(u): finite where a rounds to +-1.
    return torch.log(1.0 - actions.square() + SQUASH_EPSILON).sum(dim=-1)


def squashed_gaussian_sample(
    mean: torch.Tensor, log_std: torch.Tensor, noise: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """The reparameterised sample ``a = tanh(mean + std * noise)`` (eq. 11) and its
    ``log pi(a|s)``; gradients flow to ``mean`` and ``log_std`` through both.

    :func:`squashed_gaussian_log_prob` of the sample, with its standardised value
    ``(u - mean) / std`` taken as what it is, ``noise`` (exact, and a few operations fewer
    for autograd to record).

    >>> a, logp = squashed_gaussian_sample(torch.zeros(1, 1), torch.zeros(1, 1), torch.zeros(1, 1))
    >>> float(a), round(float(logp), 4)
    (0.0, -0.9189)
    """
    actions = torch.tanh(mean + log_std.exp() * noise)
    gaussian = (-0.5 * noise.square() - _LOG_SQRT_2PI).sum(dim=-1) - log_std.sum(dim=-1)
    return actions, gaussian - _tanh_log_det(actions)


def soft_q_targets(
    rewards: torch.Tensor,
    discounts: torch.Tensor,
    terminateds: torch.Tensor,
    next_q_target: torch.Tensor,
    next_log_prob: torch.Tensor,
    alpha: torch.Tensor | float,
) -> torch.Tensor:
    """The soft Bellman target of both critics (eqs. 3 and 7, with clipped double Q):

    ``y = R + discount * (1 - terminated) * (min_i Q_target_i(s', a') - alpha * log pi(a'|s'))``

    with ``a' ~ pi(.|s')`` sampled fresh, ``R`` the n-step return and ``discount = gamma ** n``.

    Args:
        rewards: (n-step) returns ``R``, ``[B]``.
        discounts: ``gamma ** n`` per transition, ``[B]``.
        terminateds: Whether the bootstrap state ``s'`` is terminal, ``[B]`` (truncation is
            not termination: a truncated episode still bootstraps).
        next_q_target: Both target critics at ``(s', a')``, ``[2, B]``.
        next_log_prob: ``log pi(a'|s')``, ``[B]``.
        alpha: The entropy temperature.

    >>> soft_q_targets(torch.tensor([1.0]), torch.tensor([0.5]), torch.tensor([False]),
    ...                torch.tensor([[4.0], [2.0]]), torch.tensor([-1.0]), 0.5).tolist()
    [2.25]
    """
    soft_value = next_q_target.min(dim=0).values - alpha * next_log_prob
    return rewards + discounts * torch.where(terminateds, 0.0, soft_value)


def critic_loss(
    q_values: torch.Tensor, targets: torch.Tensor, weights: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """``J_Q = sum_i 0.5 * mean(w * (Q_i(s, a) - y)^2)`` (eq. 5, summed over both critics,
    as SB3 does), and the per-transition TD error ``mean_i |Q_i - y|`` for replay priorities.

    Args:
        q_values: Both critics at the stored ``(s, a)``, ``[2, B]`` (with gradients).
        targets: :func:`soft_q_targets`, ``[B]`` (no gradient).
        weights: Importance-sampling weights of prioritized replay, ``[B]``.
    """
    errors = q_values - targets
    per_sample = 0.5 * errors.pow(2).sum(dim=0)
    loss = per_sample.mean() if weights is None else (weights * per_sample).mean()
    return loss, errors.detach().abs().mean(dim=0)


def actor_loss(log_prob: torch.Tensor, q_values: torch.Tensor, alpha: torch.Tensor | float) -> torch.Tensor:
    """``J_pi = mean(alpha * log pi(a|s) - min_i Q_i(s, a))`` with ``a ~ pi(.|s)``
    reparameterised (eq. 7 with clipped double Q).

    Args:
        log_prob: ``log pi(a|s)``, ``[B]`` (with gradients).
        q_values: Both critics at ``(s, a)``, ``[2, B]`` (gradients to ``a`` only).
        alpha: The temperature, a constant here.

    >>> float(actor_loss(torch.tensor([-1.0]), torch.tensor([[3.0], [2.0]]), 0.5))
    -2.5
    """
    return (alpha * log_prob - q_values.min(dim=0).values).mean()


def alpha_loss(log_alpha: torch.Tensor, log_prob: torch.Tensor, target_entropy: float) -> torch.Tensor:
    """``J(alpha) = -mean(log alpha * (log pi(a|s) + target_entropy))`` (eq. 18, written
    in ``log alpha`` as the authors' code does): alpha grows while the policy's entropy
    ``-log pi`` is below ``target_entropy``.

    >>> float(alpha_loss(torch.zeros(1), torch.tensor([1.0]), -1.0))
    -0.0
    """
    return -(log_alpha * (log_prob.detach() + target_entropy)).mean()
