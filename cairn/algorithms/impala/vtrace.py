"""V-trace: off-policy corrected value targets and policy-gradient advantages.

One of the IMPALA/APPO building blocks (Espeholt et al. 2018, "IMPALA: Scalable Distributed
Deep-RL with Importance Weighted Actor-Learner Architectures", section 4.1). For the rows of one
trajectory piece, acted by a behaviour policy mu and learnt by a target policy pi::

    v_s = V(x_s) + sum_{t=s}^{s+n-1} gamma^{t-s} (prod_{i=s}^{t-1} c_i) delta_t V      (eq. 1)
    delta_t V = rho_t (r_t + gamma V(x_{t+1}) - V(x_t))
    rho_t = min(rho_bar, pi(a_t|x_t) / mu(a_t|x_t)),   c_i = lambda min(c_bar, pi(a_i|x_i) / mu(a_i|x_i))

computed by the paper's recursion ``v_s - V(x_s) = delta_s V + gamma c_s (v_{s+1} - V(x_{s+1}))``.
The policy gradient uses ``rho^pg_s (r_s + gamma v_{s+1} - V(x_s))`` with its own clip.

Rows are laid out as cairn's PPO batches (:class:`cairn.env_runner.sample_batch.SampleBatch`)
and :func:`cairn.algorithms.ppo.compute_gae` read them: pieces of trajectories laid end to end,
``ends`` marking each piece's last row (an episode end or the fragment's end), ``terminateds``
the rows after which the episode has no value (0 beyond them), and ``next_values`` the value of
each row's next observation: at a truncation or a fragment end it is the bootstrap value
``V(x_{s+n})`` (the final observation's value, as GAE bootstraps time limits).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import torch

__all__ = ["VTraceReturns", "vtrace"]


class VTraceReturns(NamedTuple):
    """V-trace's outputs, one per row, detached from the graph (targets, not predictions)."""

    #: ``v_s``: the value targets.
    vs: torch.Tensor
    #: ``rho^pg_s (r_s + gamma v_{s+1} - V(x_s))``: the policy-gradient advantages.
    pg_advantages: torch.Tensor


def vtrace(
    *,
    behaviour_logp: torch.Tensor,
    target_logp: torch.Tensor,
    rewards: torch.Tensor,
    values: torch.Tensor,
    next_values: torch.Tensor,
    terminateds: torch.Tensor,
    ends: torch.Tensor,
    gamma: float,
    lambda_: float = 1.0,
    clip_rho_threshold: float | None,
    clip_pg_rho_threshold: float | None,
    clip_c_threshold: float = 1.0,
) -> VTraceReturns:
    """V-trace targets and policy-gradient advantages of a batch of trajectory pieces.

    Args:
        behaviour_logp: ``log mu(a_s|x_s)``, the log-probability of each action under the
            weights that acted it (stored at sampling time).
        target_logp: ``log pi(a_s|x_s)`` under the policy being learnt.
        rewards: ``r_s``.
        values: ``V(x_s)``.
        next_values: ``V(x_{s+1})``, the value of each row's next observation, as GAE takes
            them (:func:`cairn.algorithms.ppo.learn.next_values`: the next row's value inside a
            piece, the final observation's at a truncation or a fragment end); ignored after a
            termination.
        terminateds: bool, the episode terminated after this row (a true end: value 0 beyond).
        ends: bool, the last row of a piece; every termination is one, and so is the last row.
        gamma: the discount.
        lambda_: the paper's trace-cutting lambda (``c_i = lambda min(c_bar, ratio_i)``).
        clip_rho_threshold: ``rho_bar`` (RLlib's ``vtrace_clip_rho_threshold``); None: no clip.
        clip_pg_rho_threshold: the clip of the policy gradient's ``rho^pg`` (RLlib's
            ``vtrace_clip_pg_rho_threshold``); None: no clip.
        clip_c_threshold: ``c_bar`` (1 in the paper and RLlib).

    ``lambda_`` and ``c_bar`` default to the paper's; the clip thresholds have no default here
    (the config's fields own them: 1.0 in RLlib).

    All inputs are 1-D, one entry per row. No gradient flows through the outputs.
    """
    n = rewards.shape[0]
    for name, x in (("behaviour_logp", behaviour_logp), ("target_logp", target_logp), ("values", values),
                    ("next_values", next_values), ("terminateds", terminateds), ("ends", ends)):
        if x.shape != (n,):
            raise ValueError(f"vtrace: {name} has shape {tuple(x.shape)}, expected ({n},) like rewards; "
                             "pass one entry per row of the batch")
    for name, x in (("terminateds", terminateds), ("ends", ends)):
        if x.dtype != torch.bool:
            raise ValueError(f"vtrace: {name} has dtype {x.dtype}, expected torch.bool (the batch's "
                             "bool column, as from torch.from_numpy)")
    if n and not bool(ends[-1]):
        raise ValueError("vtrace: the last row is not marked in ends; every piece must end "
                         "(SampleBatch marks the fragment's last row), so set ends[-1] = True")
    if bool((terminateds & ~ends).any()):
        raise ValueError(f"vtrace: rows {torch.nonzero(terminateds & ~ends).flatten().tolist()} are "
                         "terminated but not marked in ends; a termination ends its piece: set ends "
                         "= terminateds | truncateds (as SampleBatch does)")
    with torch.no_grad():
        ratios = torch.exp(target_logp - behaviour_logp)
        rhos = _clip(ratios, clip_rho_threshold)
        cs = lambda_ * _clip(ratios, clip_c_threshold)
        continues = (~ends).to(values.dtype)
        # V(x_{s+1}), 0 after a termination whatever next_values holds there.
        value_after = torch.where(terminateds, torch.zeros_like(next_values), next_values)
        deltas = rhos * (rewards + gamma * value_after - values)
        vs = values + _backward_sum(deltas, gamma * cs * continues)
        # v_{s+1}: the next row's target inside a piece; past a piece's end V(x_{s+1}) (the
        # bootstrap value), or 0 after a termination.
        vs_after = torch.where(ends, value_after, vs.roll(-1))
        pg_advantages = _clip(ratios, clip_pg_rho_threshold) * (rewards + gamma * vs_after - values)
    return VTraceReturns(vs=vs, pg_advantages=pg_advantages)


def _clip(ratios: torch.Tensor, threshold: float | None) -> torch.Tensor:
    """``min(threshold, ratios)``; no clip when ``threshold`` is None."""
    return ratios if threshold is None else torch.clamp(ratios, max=threshold)


def _backward_sum(deltas: torch.Tensor, carry: torch.Tensor) -> torch.Tensor:
    """``a_s = delta_s + carry_s a_{s+1}`` from the last row back (``a`` past the end is 0).

    The recursion is sequential; in plain Python floats it costs a fraction of a microsecond a
    row, where indexing a tensor row by row costs several (and on an accelerator a sync each):
    measured ~0.1 us a row, about 2% of an APPO epoch's CPU time (bench/appo_learn_cost.py).
    A parallel scan over log2(n) vectorised steps would sum in another order (other last bits)
    and, in torch, cost more at a few hundred rows. The result goes back through numpy, whose
    list conversion costs a fraction of ``torch.tensor``'s; both round each double to the
    tensor's dtype to nearest.
    """
    deltas_np = deltas.cpu().numpy()
    d, k = deltas_np.tolist(), carry.cpu().numpy().tolist()
    out = [0.0] * len(d)
    acc = 0.0
    for s in range(len(d) - 1, -1, -1):
        acc = d[s] + k[s] * acc
        out[s] = acc
    return torch.from_numpy(np.array(out, dtype=deltas_np.dtype)).to(deltas.device)
