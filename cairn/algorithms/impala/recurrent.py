"""IMPALA's and APPO's learner (:func:`~cairn.algorithms.impala.learn.vtrace_learn`) for recurrent
policies: V-trace and the loss over whole sequences.

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

import numpy as np
import torch

from cairn.algorithms.impala.config import IMPALAConfig
from cairn.algorithms.impala.learn import BatchTensors, batch_vtrace, vtrace_learn
from cairn.algorithms.impala.vtrace import VTraceReturns
from cairn.algorithms.ppo.sequences import Sequences
from cairn.policy.policy import Policy

__all__ = ["vtrace_learn_recurrent", "sequences_vtrace"]

#: :func:`~cairn.algorithms.impala.learn.vtrace_learn`, which learns a recurrent policy over its
#: batch's sequences; the recurrent learner's own name.
vtrace_learn_recurrent = vtrace_learn


def sequences_vtrace(config: IMPALAConfig, policy: Policy, data: BatchTensors, seqs: Sequences, *,
                     target_logp_rows: torch.Tensor | None) -> tuple[VTraceReturns, np.ndarray]:
    """:func:`~cairn.algorithms.impala.learn.batch_vtrace` for a recurrent policy: V-trace's
    targets and advantages of the whole batch under the network's current weights (run over
    ``seqs``), and the values ``V(x_s)`` (numpy). ``target_logp_rows``: APPO's target
    policy's log-probabilities of the batch's actions (None: IMPALA, the network itself)."""
    return batch_vtrace(config, policy, data, target_logp_rows=target_logp_rows, seqs=seqs)
