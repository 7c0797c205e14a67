"""TD3's maths as pure functions (Fujimoto, van Hoof and Meger 2018, "Addressing Function
Approximation Error in Actor-Critic Methods", arXiv:1802.09477; Algorithm 1).

* :func:`smoothed_target_actions`: target policy smoothing, ``a~ = clip(pi'(s') + clip(eps, -c, c))``
  with ``eps ~ N(0, sigma)`` (section 5.3, eq. 15);
* :func:`clipped_double_q_targets`: ``y = r + gamma * min_i Q'_i(s', a~)`` (clipped double
  Q-learning, section 4.2, eq. 10), with n-step returns;
* :func:`critic_loss`: ``sum_i mean((y - Q_i(s, a))^2)`` (Algorithm 1, both critics);
* :func:`actor_loss`: ``-mean(Q_1(s, pi(s)))``, the deterministic policy gradient (eq. 1)
  through the first critic only, taken every ``policy_delay`` critic updates (section 5.2).

Actions are the squashed ones in [-1, 1] (what replay stores and the critics read); the Box
bounds are applied only when acting.
"""

from __future__ import annotations

import torch

__all__ = ["smoothed_target_actions", "clipped_double_q_targets", "critic_loss", "actor_loss"]


def smoothed_target_actions(target_actions: torch.Tensor, noise: torch.Tensor, *, noise_std: float,
                            noise_clip: float) -> torch.Tensor:
    """Target policy smoothing: ``clip(pi'(s') + clip(noise_std * noise, -noise_clip, noise_clip), -1, 1)``.

    Args:
        target_actions: The target actor's actions ``pi'(s')`` in [-1, 1], ``[B, A]``.
        noise: Standard normal draws, ``[B, A]``.
        noise_std: ``sigma`` (``target_policy_noise``, 0.2 in the paper and SB3).
        noise_clip: ``c`` (``target_noise_clip``, 0.5).

    >>> smoothed_target_actions(torch.tensor([[0.9, 0.0]]), torch.tensor([[1.0, -5.0]]),
    ...                         noise_std=0.2, noise_clip=0.5).tolist()
    [[1.0, -0.5]]
    """
    smoothing = (noise_std * noise).clamp(-noise_clip, noise_clip)
    return (target_actions + smoothing).clamp(-1.0, 1.0)


def clipped_double_q_targets(rewards: torch.Tensor, discounts: torch.Tensor, terminateds: torch.Tensor,
                             next_q_target: torch.Tensor) -> torch.Tensor:
    """``y = R + discount * (1 - terminated) * min(Q'_1(s', a~), Q'_2(s', a~))``.

    Args:
        rewards: (n-step) returns ``R``, ``[B]``.
        discounts: ``gamma ** n`` per transition, ``[B]``.
        terminateds: Whether the bootstrap state ``s'`` is terminal, ``[B]`` (a truncated
            episode still bootstraps).
        next_q_target: Both target critics at ``(s', a~)``, ``[2, B]``.

    >>> clipped_double_q_targets(torch.tensor([1.0, 1.0]), torch.tensor([0.5, 0.5]),
    ...                          torch.tensor([False, True]), torch.tensor([[4.0, 4.0], [2.0, 2.0]])).tolist()
    [2.0, 1.0]
    """
    return rewards + discounts * torch.where(terminateds, 0.0, next_q_target.min(dim=0).values)


def critic_loss(q_values: torch.Tensor, targets: torch.Tensor,
                weights: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """``J_Q = sum_i mean(w * (y - Q_i(s, a))^2)`` (both critics regress on the one target, as
    in Algorithm 1 and SB3), and the per-transition TD error ``mean_i |Q_i - y|`` for replay
    priorities.

    Args:
        q_values: Both critics at the stored ``(s, a)``, ``[2, B]`` (with gradients).
        targets: :func:`clipped_double_q_targets`, ``[B]`` (no gradient).
        weights: Importance-sampling weights of prioritized replay, ``[B]``.

    >>> float(critic_loss(torch.tensor([[1.0], [3.0]]), torch.tensor([2.0]))[0])
    2.0
    """
    errors = q_values - targets
    per_sample = errors.pow(2).sum(dim=0)
    loss = per_sample.mean() if weights is None else (weights * per_sample).mean()
    return loss, errors.detach().abs().mean(dim=0)


def actor_loss(q1_values: torch.Tensor) -> torch.Tensor:
    """``J_pi = -mean(Q_1(s, pi(s)))``: the deterministic policy gradient ascends the first
    critic (eq. 1; Algorithm 1 uses ``Q_theta1``).

    >>> float(actor_loss(torch.tensor([1.0, 3.0])))
    -2.0
    """
    return -q1_values.mean()
