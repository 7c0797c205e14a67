"""PPO's learner for recurrent policies: the clipped surrogate over whole sequences.

A batch of a recurrent policy (:mod:`cairn.env_runner.recurrent_state`) holds, per row, the
state the policy acted from (``state_in_<k>``). The learner

1. cuts the batch's trajectory pieces (``ends``: episode and fragment ends) into sequences of at
   most ``model.max_seq_len`` steps, each starting from the recorded state of its first row;
2. runs the network over the padded sequences (padding at the end of a sequence: steps are
   causal, so it never reaches a real step) to get the values (the old log-probabilities are
   the batch's ``action_logp``, recorded as the rows were acted), and
   the value of each bootstrapped piece end from the state after its last step;
3. computes GAE over the whole trajectory pieces, as the feed-forward learner does;
4. shuffles whole sequences each epoch and groups them into minibatches of about
   ``minibatch_size`` env steps (a sequence joins the minibatch its first step falls in, so
   ``minibatch_size`` need not be a multiple of ``max_seq_len``); padded steps are left out of
   every mean of the loss.

No burn-in: each sequence starts from the state the policy had when it acted, which is the
state at sampling time (R2D2's "stored state"), stale by at most one iteration of updates.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch import nn

from cairn.algorithms.ppo.learn import behaviour_logp, update_stats
from cairn.algorithms.ppo.loss import compute_gae, ppo_loss
from cairn.env_runner.sample_batch import SampleBatch, batch_states
from cairn.errors import ConfigError
from cairn.learners import GradientSync, LearnOutput
from cairn.policy.policy import Policy
from cairn.policy.recurrent_config import recurrent_settings

__all__ = ["learn_recurrent", "sequence_count", "sequence_starts", "padded_rows", "bootstrap_values"]


def sequence_starts(ends: np.ndarray, max_seq_len: int) -> tuple[np.ndarray, np.ndarray]:
    """``(starts, lengths)`` of the sequences that cut a batch's rows: a new sequence after each
    piece end (``ends``) and every ``max_seq_len`` steps within a piece.

    >>> sequence_starts(np.array([0, 0, 0, 1, 0, 1], bool), 2)
    (array([0, 2, 4]), array([2, 2, 2]))
    """
    n = len(ends)
    piece_start = np.concatenate([[0], np.flatnonzero(ends[:-1]) + 1])
    piece_id = np.zeros(n, dtype=np.int64)
    piece_id[piece_start[1:]] = 1
    piece_id = np.cumsum(piece_id)
    offset = np.arange(n) - piece_start[piece_id]
    starts = np.flatnonzero(offset % max_seq_len == 0)
    lengths = np.diff(np.concatenate([starts, [n]]))
    return starts, lengths


def padded_rows(starts: np.ndarray, lengths: np.ndarray, steps: int) -> tuple[np.ndarray, np.ndarray]:
    """``(rows [S, steps], mask [S, steps])``: the batch row of each step of each sequence, and
    which steps are real; padded steps point at the sequence's first row."""
    offsets = np.arange(steps)
    mask = offsets[None, :] < lengths[:, None]
    rows = np.where(mask, starts[:, None] + offsets[None, :], starts[:, None])
    return rows, mask


def bootstrap_values(model: nn.Module, batch: SampleBatch, obs: torch.Tensor, states: list[torch.Tensor],
                      starts: np.ndarray, lengths: np.ndarray, values: np.ndarray) -> np.ndarray:
    """``V(next_obs)`` of each row for GAE: the next row's value inside a piece, 0 at terminal
    steps, and at a truncated episode or fragment end the value of ``next_obs`` from the state
    after the piece's last step (its sequence run again with ``next_obs`` appended)."""
    ends, terminateds = batch["ends"], batch["terminateds"]
    next_values = np.zeros_like(values)
    next_values[:-1] = values[1:]
    next_values[ends] = 0.0
    last_rows = starts + lengths - 1
    boot = np.flatnonzero(ends[last_rows] & ~terminateds[last_rows])  # sequences to bootstrap
    if boot.size:
        device = obs.device
        seq_len = int(lengths[boot].max()) + 1
        rows, _ = padded_rows(starts[boot], lengths[boot], seq_len)
        seq_obs = obs[torch.from_numpy(rows).to(device)].clone()
        at = (torch.arange(len(boot), device=device), torch.from_numpy(lengths[boot]).to(device))
        seq_obs[at] = torch.from_numpy(batch["next_obs"][last_rows[boot]]).to(device)
        _, seq_values, _ = model(seq_obs, [s[torch.from_numpy(starts[boot]).to(device)] for s in states])
        next_values[last_rows[boot]] = seq_values[at].cpu().numpy()
    return next_values


def sequence_count(batch: SampleBatch, policy: Policy) -> int:
    """How many sequences :func:`learn_recurrent` cuts ``batch`` of ``policy`` into (the
    algorithm draws a permutation of them per epoch)."""
    max_seq_len = int(recurrent_settings(policy.config["model"])["max_seq_len"])
    return len(sequence_starts(batch["ends"], max_seq_len)[0])


def learn_recurrent(config: Any, policy: Policy, sync: GradientSync, *, batch: SampleBatch,
                    rewards: np.ndarray, permutations: Sequence[np.ndarray]) -> LearnOutput:
    """One PPO update of a recurrent ``policy`` on ``batch`` (``rewards``: the learner's, maybe
    normalised) with PPO's ``config``: one epoch per array of ``permutations`` (the order of
    the sequences in that epoch, drawn by the algorithm). Runs wherever the policy's learner
    is (``config.learners``: in the driver, or on its device); the batch moves to the device
    once. DDP learners (``sync`` of several ranks) are refused by the config. Returns the same
    statistics as the feed-forward learner."""
    cfg = config
    if sync.world_size > 1:
        raise ConfigError("recurrent policies learn in one learner: config.learners(num_learners=0).")
    model, dist = policy.model, policy.dist
    device = next(model.parameters()).device
    max_seq_len = int(recurrent_settings(policy.config["model"])["max_seq_len"])
    starts, lengths = sequence_starts(batch["ends"], max_seq_len)
    obs = torch.from_numpy(batch["obs"]).to(device)
    actions = torch.from_numpy(batch["actions"]).to(device)
    states = [torch.from_numpy(s).to(device) for s in batch_states(batch)]
    rows, mask = padded_rows(starts, lengths, int(lengths.max()))
    rows_t, mask_t = torch.from_numpy(rows).to(device), torch.from_numpy(mask).to(device)
    old_logp = behaviour_logp(batch, policy, device)  # as the rows were acted (docs/ppo.md)
    with torch.no_grad():
        _, values_p, _ = model(obs[rows_t], [s[torch.from_numpy(starts).to(device)] for s in states])
        # Sequences cover the rows in order, so the real steps, read row-major, are rows 0..n-1.
        values = values_p[mask_t]
        values_np = values.cpu().numpy()
        next_values = bootstrap_values(model, batch, obs, states, starts, lengths, values_np)
    advantages = compute_gae(rewards, values_np, next_values, batch["terminateds"], batch["ends"],
                             gamma=cfg.gamma, lambda_=cfg.lambda_)
    adv_t = torch.from_numpy(advantages).to(device)
    returns = adv_t + values
    params = list(model.parameters())
    history: list[torch.Tensor] = []
    for perm in permutations:
        # A sequence joins the minibatch in which its first step falls.
        group = (np.cumsum(lengths[perm]) - lengths[perm]) // cfg.minibatch_size
        for g in range(int(group[-1]) + 1):
            seqs_np = perm[group == g]
            if not len(seqs_np):  # a sequence longer than minibatch_size fills more than one group
                continue
            steps = int(lengths[seqs_np].max())
            seqs = torch.from_numpy(seqs_np).to(device)
            mb_mask = mask_t[seqs, :steps]
            mb_rows = rows_t[seqs, :steps][mb_mask]
            mb_adv = adv_t[mb_rows]
            if cfg.normalize_advantages and len(mb_rows) > 1:
                mb_adv = (mb_adv - mb_adv.mean()) / (mb_adv.std() + 1e-8)
            seq_starts = torch.from_numpy(starts[seqs_np]).to(device)
            mb_inputs, mb_values, _ = model(obs[rows_t[seqs, :steps]], [s[seq_starts] for s in states])
            mb_inputs, mb_values = mb_inputs[mb_mask], mb_values[mb_mask]
            loss, stats = ppo_loss(
                dist.logp(mb_inputs, actions[mb_rows]), old_logp[mb_rows], mb_adv, mb_values,
                values[mb_rows], returns[mb_rows], dist.entropy(mb_inputs),
                clip_param=cfg.clip_param, vf_coeff=cfg.vf_coeff,
                entropy_coeff=cfg.entropy_coeff, vf_clip_param=cfg.vf_clip_param,
            )
            grad_norm = sync.optimizer_step(policy.optimizer, loss, params, grad_clip=cfg.grad_clip)
            if grad_norm is not None:
                stats["grad_norm"] = grad_norm
            policy.num_grad_updates += 1
            history.append(torch.stack(list(stats.values())))
    out = update_stats(list(stats), history, returns, values_np, policy)
    out["num_sequences"] = float(len(starts))
    return LearnOutput(out)
