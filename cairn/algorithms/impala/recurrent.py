"""IMPALA's and APPO's learner for recurrent policies: V-trace and the loss over whole sequences.

As PPO's recurrent learner (:mod:`cairn.algorithms.ppo.recurrent`, docs/ppo.md), it

1. cuts the batch's trajectory pieces (episode and fragment ends) into sequences of at most
   ``model.max_seq_len`` steps, each run from the state recorded with its first row (from the
   model's initial state now where it opens an episode; no
   burn-in; the state is the one the behaviour policy acted from);
2. per epoch, runs the network over the padded sequences for the values ``V(x_s)``, the
   bootstrap values at piece ends (from the state after the piece's last step) and, for IMPALA,
   the target policy's log-probabilities; APPO's target network runs over the sequences once per
   call; V-trace (:func:`~cairn.algorithms.impala.vtrace.vtrace`) then works on the rows as for
   a feed-forward policy;
3. shuffles whole sequences each epoch and groups them into minibatches of about
   ``minibatch_size`` env steps (None: all of them), a sequence joining the minibatch its first
   step falls in; padded steps are left out of every mean of the loss.

DDP learners are refused by the config (``num_learners`` with ``use_lstm``) and here.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from cairn.algorithms.impala.config import IMPALAConfig
from cairn.algorithms.impala.learn import (
    BatchTensors,
    explain_non_finite_loss,
    require_target_network,
    rows_loss,
)
from cairn.algorithms.impala.vtrace import VTraceReturns, vtrace
from cairn.algorithms.ppo.learn import update_stats
from cairn.algorithms.ppo.recurrent import Sequences
from cairn.env_runner.sample_batch import SampleBatch
from cairn.errors import ConfigError, NonFiniteLossError
from cairn.learners import GradientSync, LearnOutput
from cairn.numpy_acting import evaluating
from cairn.policy.policy import Policy

__all__ = ["vtrace_learn_recurrent", "sequences_vtrace"]


def sequences_vtrace(config: IMPALAConfig, policy: Policy, data: BatchTensors, seqs: Sequences, *,
                     target_logp_rows: torch.Tensor | None) -> tuple[VTraceReturns, np.ndarray]:
    """:func:`~cairn.algorithms.impala.learn.batch_vtrace` for a recurrent policy: V-trace's
    targets and advantages of the whole batch under the network's current weights (run over
    ``seqs``), and the values ``V(x_s)`` (numpy). ``target_logp_rows``: APPO's target
    policy's log-probabilities of the batch's actions (None: IMPALA, the network itself)."""
    with evaluating(policy.model):  # targets, in eval mode as learn.batch_vtrace's say why
        inputs, values, next_values = seqs.values_and_next(policy.model)
    if target_logp_rows is None:
        with torch.no_grad():
            target_logp_rows = policy.dist.logp(inputs, data.actions)
    returns = vtrace(behaviour_logp=data.behaviour_logp, target_logp=target_logp_rows, rewards=data.rewards,
                     values=values, next_values=next_values, terminateds=data.terminateds, ends=data.ends,
                     gamma=config.gamma, clip_rho_threshold=config.vtrace_clip_rho_threshold,
                     clip_pg_rho_threshold=config.vtrace_clip_pg_rho_threshold)
    return returns, values.cpu().numpy()


def vtrace_learn_recurrent(config: IMPALAConfig, policy: Policy, sync: GradientSync, *, batch: SampleBatch,
                           permutations: Sequence[np.ndarray], appo: bool) -> LearnOutput:
    """One IMPALA (``appo`` False) or APPO (``appo`` True) update of a recurrent ``policy`` on
    ``batch``: one epoch per array of ``permutations`` (the order of the batch's sequences in
    that epoch, drawn by the algorithm: :func:`~cairn.algorithms.ppo.recurrent.sequence_count`
    of them). Returns the feed-forward learner's statistics and ``num_sequences``."""
    if sync.world_size > 1:
        raise ConfigError("recurrent policies learn in one learner: config.learners(num_learners=0).")
    model = policy.model
    device = next(model.parameters()).device
    data = BatchTensors(batch, policy, device)
    seqs = Sequences(batch, policy, data.obs)
    old_logp = None
    if appo:  # frozen until the call returns: once per call (learn.target_logp says why)
        target_model = require_target_network(policy).target_model
        with evaluating(target_model):  # a target: as a deployed model gives it
            old_logp = seqs.logp(target_model, policy.dist, data.actions)
    size = len(batch) if config.minibatch_size is None else config.minibatch_size
    params = list(model.parameters())
    history: list[torch.Tensor] = []
    stats: dict[str, torch.Tensor] = {}
    returns: torch.Tensor | None = None
    values_np: np.ndarray | None = None
    for perm in permutations:
        targets, values_now = sequences_vtrace(config, policy, data, seqs, target_logp_rows=old_logp)
        if returns is None:  # the first epoch's: the value function before this update
            returns, values_np = targets.vs, values_now
        for mb_seqs in seqs.minibatches(perm, size):
            inputs, values, rows = seqs.forward(model, mb_seqs)
            loss, stats = rows_loss(config, policy, data, targets, rows, old_logp, inputs, values)
            try:
                sync.optimizer_step(policy.optimizer, loss, params, grad_clip=config.grad_clip)
            except NonFiniteLossError as exc:
                raise explain_non_finite_loss(exc, policy, data, rows, old_logp, inputs.detach()) from exc
            policy.num_grad_updates += 1
            history.append(torch.stack(list(stats.values())))
    assert returns is not None and values_np is not None  # num_epochs >= 1 (a positive_int field)
    out = update_stats(list(stats), history, returns, values_np, policy)
    out["num_sequences"] = float(len(seqs))
    return LearnOutput(out)
