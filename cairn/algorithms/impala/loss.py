"""IMPALA's and APPO's losses as pure functions: IMPALA/APPO building blocks over V-trace.

IMPALA (Espeholt et al. 2018, section 4.2): the policy gradient ``rho^pg_s log pi(a_s|x_s)
(r_s + gamma v_{s+1} - V(x_s))``, the value regression towards the V-trace targets ``v_s`` and
an entropy bonus. APPO (RLlib's name for IMPACT, Luo et al. 2020): PPO's clipped surrogate
(Schulman et al. 2017) on the V-trace advantages, with the ratio taken against a target network
and an optional KL penalty. Weights and signs are RLlib's (``vf_loss_coeff`` on ``0.5 (v_s -
V(x_s))^2``, ``entropy_coeff``, ``clip_param``, ``kl_coeff``, ``kl_target``,
``target_worker_clipping``). The targets and advantages come from
:func:`cairn.algorithms.impala.vtrace.vtrace` and are detached here again: no gradient flows
through them whatever the caller passes.
"""

from __future__ import annotations

import torch

__all__ = ["VTraceLossStats", "impala_loss", "appo_loss", "update_kl_coeff"]


class VTraceLossStats(dict[str, torch.Tensor]):
    """Detached scalars describing one update of IMPALA's or APPO's loss."""


def impala_loss(
    target_logp: torch.Tensor,
    values: torch.Tensor,
    entropy: torch.Tensor,
    vs: torch.Tensor,
    pg_advantages: torch.Tensor,
    *,
    vf_loss_coeff: float,
    entropy_coeff: float,
) -> tuple[torch.Tensor, VTraceLossStats]:
    """IMPALA's loss to minimise, means over rows:

    ``L = -E[log pi(a|x) A^pg] + vf_loss_coeff * E[0.5 (V(x) - v)^2] - entropy_coeff * E[H]``

    with ``A^pg`` and ``v`` V-trace's ``pg_advantages`` and ``vs`` (held constant).
    """
    pg_advantages, vs = pg_advantages.detach(), vs.detach()
    policy_loss = -(target_logp * pg_advantages).mean()
    vf_loss = 0.5 * (values - vs).pow(2).mean()
    entropy_mean = entropy.mean()
    loss = policy_loss + vf_loss_coeff * vf_loss - entropy_coeff * entropy_mean
    stats = VTraceLossStats(total_loss=loss.detach(), policy_loss=policy_loss.detach(),
                            vf_loss=vf_loss.detach(), entropy=entropy_mean.detach())
    return loss, stats


def appo_loss(
    target_logp: torch.Tensor,
    behaviour_logp: torch.Tensor,
    old_target_logp: torch.Tensor,
    values: torch.Tensor,
    entropy: torch.Tensor,
    vs: torch.Tensor,
    pg_advantages: torch.Tensor,
    kl: torch.Tensor | None = None,
    *,
    clip_param: float,
    vf_loss_coeff: float,
    entropy_coeff: float,
    kl_coeff: float,
    target_worker_clipping: float,
) -> tuple[torch.Tensor, VTraceLossStats]:
    """APPO's loss to minimise, means over rows:

    ``L = -E[min(r A, clip(r, 1 - clip_param, 1 + clip_param) A)]
    + vf_loss_coeff * E[0.5 (V(x) - v)^2] - entropy_coeff * E[H] + kl_coeff * E[KL]``

    where the ratio ``r = min(mu / pi_old, target_worker_clipping) * pi / mu`` is IMPACT's:
    ``pi`` the policy being learnt (``target_logp``), ``mu`` the one that acted
    (``behaviour_logp``), ``pi_old`` the target network (``old_target_logp``, also V-trace's
    target policy for ``vs`` and ``pg_advantages``). ``kl``: each row's
    ``KL(pi_old || pi)``, or None for no KL term (RLlib's ``use_kl_loss=False``; ``kl_coeff`` is
    then unused). The coefficients have no defaults here: the config's fields own them.
    """
    pg_advantages, vs = pg_advantages.detach(), vs.detach()
    behaviour_logp, old_target_logp = behaviour_logp.detach(), old_target_logp.detach()
    is_ratio = torch.clamp(torch.exp(behaviour_logp - old_target_logp), 0.0, target_worker_clipping)
    ratio = is_ratio * torch.exp(target_logp - behaviour_logp)
    surrogate = torch.min(
        ratio * pg_advantages, torch.clamp(ratio, 1.0 - clip_param, 1.0 + clip_param) * pg_advantages
    )
    policy_loss = -surrogate.mean()
    vf_loss = 0.5 * (values - vs).pow(2).mean()
    entropy_mean = entropy.mean()
    loss = policy_loss + vf_loss_coeff * vf_loss - entropy_coeff * entropy_mean
    stats = VTraceLossStats(policy_loss=policy_loss.detach(), vf_loss=vf_loss.detach(),
                            entropy=entropy_mean.detach())
    if kl is not None:
        kl_mean = kl.mean()
        loss = loss + kl_coeff * kl_mean
        stats["mean_kl_loss"] = kl_mean.detach()
    stats["total_loss"] = loss.detach()
    with torch.no_grad():
        stats["clip_fraction"] = ((ratio - 1.0).abs() > clip_param).float().mean()
    return loss, stats


def update_kl_coeff(kl_coeff: float, kl: float, *, kl_target: float) -> float:
    """APPO's adaptive KL weight (RLlib's rule): 1.5 times larger when the measured ``kl`` is
    over twice ``kl_target``, half when it is under half of it, else unchanged."""
    if kl > 2.0 * kl_target:
        return kl_coeff * 1.5
    if kl < 0.5 * kl_target:
        return kl_coeff * 0.5
    return kl_coeff
