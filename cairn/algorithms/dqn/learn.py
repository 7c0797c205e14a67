"""DQN's targets and its torch learn function, run by a learner alone or as one rank of the
DDP learners (:mod:`cairn.learners.sync`); the numpy update (numpy_update.py) is the
in-process CPU fast path of the same step."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import torch

from cairn.algorithms.dqn.config import DQNConfig
from cairn.algorithms.dqn.dqn_policy import DQNPolicy, QValueModel
from cairn.algorithms.dqn.loss import dqn_loss, q_targets
from cairn.algorithms.dqn.numpy_update import numpy_dqn_update
from cairn.learners import GradientSync, LearnOutput
from cairn.learners.sync import ShardedSample
from cairn.numpy_acting import evaluating
from cairn.policy.action_masking import legal_action_table

__all__ = ["dqn_targets", "dqn_learn", "numpy_dqn_learn"]


def _q_values(model: QValueModel, obs: np.ndarray) -> np.ndarray:
    device = next(model.parameters()).device
    if device.type == "cpu":
        # In numpy on views of the live parameters: for a minibatch of 64 that skips dozens
        # of torch operator dispatches, which cost more than the arithmetic on a CPU.
        return model.numpy_q_values(obs)
    # In eval mode, as numpy_q_values runs a user's network on the CPU (cairn.numpy_acting.in_torch):
    # a target is what the deployed network gives, on every device alike.
    with torch.no_grad(), evaluating(model):
        return model(torch.from_numpy(obs).to(device)).cpu().numpy()  # type: ignore[no-any-return]


def dqn_targets(config: DQNConfig, policy: DQNPolicy, sample: Mapping[str, np.ndarray]) -> np.ndarray:
    """The bootstrapped targets of a replayed minibatch (double-Q when configured); they need
    no gradient. A masked policy's targets read the next observations' masks: the maximum runs
    over legal actions, and a next state without one bootstraps nothing (:func:`q_targets`)."""
    next_obs = sample["next_obs"]
    next_q_target = _q_values(policy.target_model, next_obs)
    next_q_online = _q_values(policy.model, next_obs) if config.double_q else None
    next_legal = legal_action_table(next_obs, policy.preprocessor.size) if policy.action_mask_size else None
    return q_targets(
        sample["rewards"], config.gamma ** sample["n_steps"].astype(np.float32),
        sample["terminateds"], next_q_target, next_q_online, double_q=config.double_q,
        next_legal=next_legal,
    )


def dqn_learn(config: DQNConfig, policy: DQNPolicy, sync: GradientSync, *,
              sample: Mapping[str, np.ndarray]) -> LearnOutput:
    """One gradient update of a DQN ``policy`` on a replayed ``sample`` in torch: targets
    over the whole minibatch, the TD loss of this learner's shard weighted by its share of the
    rows, gradients all-reduced, then clipped. Returns the loss statistics of the shard weighted
    by its share of the rows (this learner's parts of the minibatch's, summed by the learner
    group) and its TD errors as ``rows``."""
    targets = dqn_targets(config, policy, sample)
    device = next(policy.model.parameters()).device
    rows = ShardedSample(sync, sample, device)
    stats: list[float] = []
    td_errors = np.zeros(0, dtype=np.float32)
    loss: torch.Tensor | None = None
    if not rows.empty:
        loss, td, loss_stats = dqn_loss(
            policy.model(rows("obs")), rows("actions"),
            torch.from_numpy(targets[rows.rows]).to(device), loss_fn=config.td_error_loss_fn,
            weights=rows.weights(),
        )
        # A mean over rows: weighted by the shard's share, the learners' gradients sum to the
        # minibatch's (alone the weight is exactly 1).
        share = rows.share
        loss = loss * share
        # Every statistic is a mean over rows: weighted alike, the learners' parts sum to the
        # minibatch's (join_outputs).
        stats, td_errors = [value * share for value in loss_stats.values()], td.numpy()
    sync.optimizer_step(policy.optimizer, loss, list(policy.model.parameters()), grad_clip=config.grad_clip)
    policy.num_grad_updates += 1
    return LearnOutput(stats, td_errors, summed=range(len(stats)))


def numpy_dqn_learn(config: DQNConfig, policy: DQNPolicy, sync: GradientSync, *,
                    sample: Mapping[str, np.ndarray]) -> LearnOutput:
    """:func:`dqn_learn`'s step written over numpy views (numpy_update.py), by a learner alone
    in this process (``update_backend``): the same statistics and TD errors as ``rows``."""
    result = numpy_dqn_update(  # refuses a network that is not exactly a QNetwork (replaced since)
        policy.model, policy.optimizer, sample["obs"], sample["actions"],
        dqn_targets(config, policy, sample), loss_fn=config.td_error_loss_fn,
        grad_clip=config.grad_clip, weights=sample.get("weights"),
    )
    policy.num_grad_updates += 1
    return LearnOutput(result.stats, result.td_errors)
