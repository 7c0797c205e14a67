"""PPO's maths as pure functions (Schulman et al. 2017; GAE: Schulman et al. 2016)."""

from __future__ import annotations

import numpy as np
import torch

__all__ = ["compute_gae", "ppo_loss", "PPOLossStats"]


def compute_gae(
    rewards: np.ndarray,
    values: np.ndarray,
    next_values: np.ndarray,
    terminateds: np.ndarray,
    ends: np.ndarray,
    *,
    gamma: float,
    lambda_: float,
) -> np.ndarray:
    """Generalised advantage estimates for a batch of trajectory pieces laid end to end.

    ``delta_t = r_t + gamma * V(s_{t+1}) * (1 - terminated_t) - V(s_t)`` and
    ``A_t = delta_t + gamma * lambda * (1 - end_t) * A_{t+1}``.

    ``next_values`` are the values of each step's next observation (the final observation when
    an episode was truncated, so time limits are bootstrapped); ``ends`` marks the last step of
    each piece (episode end or fragment end), where the recursion stops; every termination
    must be one (ValueError otherwise, as :func:`cairn.algorithms.impala.vtrace.vtrace`).
    All inputs are 1-D, one entry per row.
    """
    n = len(rewards)
    for name, x in (("rewards", rewards), ("values", values), ("next_values", next_values),
                    ("terminateds", terminateds), ("ends", ends)):
        if np.shape(x) != (n,):
            raise ValueError(f"compute_gae: {name} has shape {np.shape(x)}, expected ({n},) like rewards; "
                             "pass one entry per row (a critic's [n, 1] output: .reshape(-1))")
    stray = np.flatnonzero(np.asarray(terminateds, dtype=bool) & ~np.asarray(ends, dtype=bool))
    if stray.size:
        raise ValueError(f"compute_gae: rows {stray[:10].tolist()} are terminated but not marked in ends, "
                         "so their advantage would run on into the next episode's; a termination ends "
                         "its piece: set ends = terminateds | truncateds, and the last row of each "
                         "fragment (as SampleBatch does)")
    not_terminal = 1.0 - terminateds.astype(np.float32)
    deltas = rewards + gamma * next_values * not_terminal - values
    carry = gamma * lambda_ * (1.0 - ends.astype(np.float32))
    advantages = np.empty_like(deltas)
    last = 0.0
    for t in range(len(deltas) - 1, -1, -1):
        last = deltas[t] + carry[t] * last
        advantages[t] = last
    return advantages


class PPOLossStats(dict[str, torch.Tensor]):
    """Detached scalars describing one minibatch update."""


def ppo_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    values: torch.Tensor,
    old_values: torch.Tensor,
    returns: torch.Tensor,
    entropy: torch.Tensor,
    *,
    clip_param: float,
    vf_coeff: float,
    entropy_coeff: float,
    vf_clip_param: float | None,
) -> tuple[torch.Tensor, PPOLossStats]:
    """The clipped-surrogate PPO objective, as a loss to minimise.

    ``L = -E[min(r A, clip(r, 1-eps, 1+eps) A)] + c_v * E[(V - R)^2] - c_e * E[H]`` with
    ``r = exp(logp - old_logp)``. With ``vf_clip_param``, the value prediction is kept within
    ``vf_clip_param`` of the value at sampling time (as in PPO2 / Stable-Baselines3's
    ``clip_range_vf``) and the larger of the two squared errors is used.
    """
    ratio = torch.exp(logp - old_logp)
    surrogate = torch.min(
        ratio * advantages, torch.clamp(ratio, 1.0 - clip_param, 1.0 + clip_param) * advantages
    )
    policy_loss = -surrogate.mean()
    if vf_clip_param is None:
        vf_loss = (values - returns).pow(2).mean()
    else:
        clipped = old_values + torch.clamp(values - old_values, -vf_clip_param, vf_clip_param)
        vf_loss = torch.max((values - returns).pow(2), (clipped - returns).pow(2)).mean()
    entropy_mean = entropy.mean()
    loss = policy_loss + vf_coeff * vf_loss
    if entropy_coeff:  # a zero-weighted term would still cost its backward pass
        loss = loss - entropy_coeff * entropy_mean
    with torch.no_grad():
        log_ratio = logp - old_logp
        stats = PPOLossStats(
            total_loss=loss.detach(),
            policy_loss=policy_loss.detach(),
            vf_loss=vf_loss.detach(),
            entropy=entropy_mean.detach(),
            # Schulman's low-variance KL estimator: E[(r - 1) - log r].
            approx_kl=((ratio - 1.0) - log_ratio).mean(),
            clip_fraction=((ratio - 1.0).abs() > clip_param).float().mean(),
        )
    return loss, stats
