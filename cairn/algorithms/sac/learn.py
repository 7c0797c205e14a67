"""SAC's learn function: one gradient step (temperature, critics, actor, target critics), run
by a learner alone or as one rank of the DDP learners (:mod:`cairn.learners.sync`)."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import torch

from cairn.algorithms.sac.config import SACConfig
from cairn.algorithms.sac.loss import (
    actor_loss,
    alpha_loss,
    critic_loss,
    soft_q_targets,
    squashed_gaussian_sample,
)
from cairn.algorithms.sac.sac_policy import SACPolicy
from cairn.learners import GradientSync, LearnOutput
from cairn.learners.sync import ShardedSample

__all__ = ["sac_learn"]


def sac_learn(config: SACConfig, policy: SACPolicy, sync: GradientSync, *,
              sample: Mapping[str, np.ndarray]) -> LearnOutput:
    """One gradient step of a SAC ``policy`` on a replayed ``sample``, in Stable-Baselines3's
    order: the temperature and the critics (one backward, disjoint parameters), the actor
    against the updated critics, then the target critics (``tau``).

    Every learner draws the noise of the whole minibatch from the policy's generator (so the
    generator moves as it would alone) and uses its shard's rows; each loss is a mean over rows,
    weighted by the shard's share, and each phase's gradients are all-reduced before clipping.
    Returns the shard's statistics weighted by its share of the rows (this learner's parts of
    the minibatch's, summed by the learner group) and its TD errors as ``rows``.

    ``policy.num_grad_updates`` counts the step once the critics stepped: an exception from the
    actor's phase (a model raising) leaves it equal to the critics' optimizer steps, with the
    actor's and the targets' update of that step not made (docs/fault-tolerance.md).
    """
    model, optimizer = policy.model, policy.optimizer
    groups: dict[str, list[torch.nn.Parameter]] = {g["name"]: g["params"] for g in optimizer.param_groups}
    device = model.log_alpha.device
    rows = ShardedSample(sync, sample, device)
    share, empty = rows.share, rows.empty
    shape = (rows.n, policy.action_size)
    noise = torch.randn(shape, generator=policy.generator)[rows.rows].to(device)
    next_noise = torch.randn(shape, generator=policy.generator)[rows.rows].to(device)
    obs, actions, next_obs = rows("obs"), rows("actions"), rows("next_obs")
    weights = rows.weights()
    alpha = model.log_alpha.detach().exp()  # this step's temperature, before alpha moves

    # The actor's reparameterised actions at s, for the alpha and actor losses.
    if not empty:
        mean, log_std = model.actor(obs)
        actions_pi, log_prob = squashed_gaussian_sample(mean, log_std, noise)
        loss_alpha = alpha_loss(model.log_alpha, log_prob, policy.target_entropy)
        with torch.no_grad():
            next_mean, next_log_std = model.actor(next_obs)
            next_actions, next_log_prob = squashed_gaussian_sample(next_mean, next_log_std, next_noise)
            targets = soft_q_targets(
                rows("rewards"), rows.discounts(config.gamma), rows("terminateds"),
                model.target_critic(next_obs, next_actions), next_log_prob, alpha)
        q_values = model.critic(obs, actions)
        loss_critic, td_errors = critic_loss(q_values, targets, weights)

    # Alpha and the critics have disjoint parameters: one backward, one optimizer step.
    sync.optimizer_step(optimizer, None if empty else (loss_critic + loss_alpha) * share, groups["critic"],
                        grad_clip=config.grad_clip, also_reduce=groups["alpha"])
    # Counted once the critics stepped: a model raising in the actor's phase leaves the counter
    # equal to the critics' steps (the actor and the targets then miss this step's update).
    policy.num_grad_updates += 1
    # The actor against the updated critics; their weights are detached, so gradients
    # reach only the actor.
    loss_actor = None if empty else actor_loss(log_prob, model.critic(obs, actions_pi, detach=True), alpha)
    sync.optimizer_step(optimizer, None if loss_actor is None else loss_actor * share, groups["actor"],
                        grad_clip=config.grad_clip)

    model.update_targets(config.tau)
    if loss_actor is None:
        return LearnOutput([], np.zeros(0, dtype=np.float32))
    stats = [float(loss_critic.detach()), float(loss_actor.detach()), float(loss_alpha.detach()),
             float(q_values.detach().mean()), float(targets.mean()), float(log_prob.detach().mean())]
    # Every statistic is a mean over rows: weighted by the shard's share, the learners' parts
    # sum to the minibatch's (join_outputs; alone the weight is exactly 1).
    return LearnOutput([value * share for value in stats], td_errors.cpu().numpy(), summed=range(len(stats)))

