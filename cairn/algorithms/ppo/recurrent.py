"""PPO's learner for recurrent policies: the clipped surrogate over whole sequences.

A batch of a recurrent policy (:mod:`cairn.env_runner.recurrent_state`) holds, per row, the
state the policy acted from (``state_in_<k>``). The learner

1. cuts the batch's trajectory pieces (``ends``: episode and fragment ends) into sequences of at
   most ``model.max_seq_len`` steps, each starting from the recorded state of its first row
   (one that opens an episode, ``firsts``: from the model's initial state now, so that an
   initial state computed from weights learns);
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

from cairn.algorithms.ppo.learn import ppo_learn
from cairn.algorithms.ppo.sequences import (
    Minibatch,
    Sequences,
    bootstrap_values,
    epoch_permutations,
    minibatches,
    padded_rows,
    sequence_count,
    sequence_starts,
)

__all__ = ["learn_recurrent", "minibatches", "Minibatch", "sequence_count", "epoch_permutations",
           "sequence_starts", "padded_rows", "bootstrap_values", "Sequences"]

#: :func:`~cairn.algorithms.ppo.learn.ppo_learn`, which learns a recurrent policy over its
#: batch's sequences (:mod:`cairn.algorithms.ppo.sequences`); the recurrent learner's own name.
learn_recurrent = ppo_learn
