"""TD3's learn function: one critic update and, every ``policy_delay`` of them, an actor update
and the targets' Polyak step; run by a learner alone or as one rank of the DDP learners
(:mod:`cairn.learners.sync`)."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import torch

from cairn.algorithms.td3.config import TD3Config
from cairn.algorithms.td3.loss import (
    actor_loss,
    clipped_double_q_targets,
    critic_loss,
    smoothed_target_actions,
)
from cairn.algorithms.td3.td3_policy import TD3Policy
from cairn.learners import GradientSync, LearnOutput
from cairn.learners.sync import ShardedSample

__all__ = ["td3_learn", "actor_update_due"]


def actor_update_due(num_grad_updates: int, policy_delay: int) -> bool:
    """Whether gradient step number ``num_grad_updates + 1`` (counted from 1) updates the actor
    and the targets: every ``policy_delay``-th, as SB3 counts (``_n_updates % policy_delay == 0``)."""
    return (num_grad_updates + 1) % policy_delay == 0


def td3_learn(config: TD3Config, policy: TD3Policy, sync: GradientSync, *,
              sample: Mapping[str, np.ndarray]) -> LearnOutput:
    """One gradient step of a TD3 ``policy`` on a replayed ``sample`` (Algorithm 1 of
    Fujimoto et al. 2018, in SB3's order): the critics towards the clipped double-Q target of
    the smoothed target action; then, on every ``policy_delay``-th step, the actor against the
    updated critics and both targets (``tau``).

    Every learner draws the smoothing noise of the whole minibatch from the policy's generator
    (so the generator moves as it would alone) and uses its shard's rows; each loss is a mean
    over rows, weighted by the shard's share, and each phase's gradients are all-reduced before
    clipping. Returns ``[critic_loss, actor_loss (nan on a step without one), q_mean,
    target_mean]`` of the shard, weighted by its share of the rows (this learner's parts of the
    minibatch's, summed by the learner group), and its TD errors as ``rows``.

    ``policy.num_grad_updates`` counts the step once the critics stepped: an exception from the
    actor's phase (a model raising) leaves it equal to the critics' optimizer steps; that step's
    actor and target update is not made, and the next one is due by the schedule as usual.
    """
    model, optimizer = policy.model, policy.optimizer
    groups: dict[str, list[torch.nn.Parameter]] = {g["name"]: g["params"] for g in optimizer.param_groups}
    device = next(model.critic.parameters()).device
    rows = ShardedSample(sync, sample, device)
    share, empty = rows.share, rows.empty
    noise = torch.randn((rows.n, policy.action_size), generator=policy.generator)[rows.rows].to(device)
    obs = rows("obs")
    if not empty:
        weights = rows.weights()
        with torch.no_grad():
            next_obs = rows("next_obs")
            next_actions = smoothed_target_actions(model.target_actor(next_obs), noise,
                                                   noise_std=config.target_policy_noise,
                                                   noise_clip=config.target_noise_clip)
            targets = clipped_double_q_targets(rows("rewards"), rows.discounts(config.gamma),
                                               rows("terminateds"),
                                               model.target_critic(next_obs, next_actions))
        q_values = model.critic(obs, rows("actions"))
        loss_critic, td_errors = critic_loss(q_values, targets, weights)

    actor_due = actor_update_due(policy.num_grad_updates, config.policy_delay)
    sync.optimizer_step(optimizer, None if empty else loss_critic * share, groups["critic"],
                        grad_clip=config.grad_clip)
    # Counted once the critics stepped: a model raising in the actor's phase leaves the counter
    # equal to the critics' steps, and the policy_delay schedule (which reads it) goes on from
    # the next step, live and after a restore alike.
    policy.num_grad_updates += 1
    loss_actor: torch.Tensor | None = None
    if actor_due:
        # The actor against the updated first critic; its weights are detached, so gradients
        # reach only the actor. Q_2 is not computed: it would add only zeros to the gradient.
        if not empty:
            loss_actor = actor_loss(model.critic.first_q(obs, model.actor(obs), detach=True))
        sync.optimizer_step(optimizer, None if loss_actor is None else loss_actor * share, groups["actor"],
                            grad_clip=config.grad_clip)
        model.update_targets(config.tau)
    if empty:
        return LearnOutput([], np.zeros(0, dtype=np.float32))
    stats = [float(loss_critic.detach()), float("nan") if loss_actor is None else float(loss_actor.detach()),
             float(q_values.detach().mean()), float(targets.mean())]
    # Every statistic is a mean over rows: weighted by the shard's share, the learners' parts
    # sum to the minibatch's (join_outputs; alone the weight is exactly 1).
    return LearnOutput([value * share for value in stats], td_errors.cpu().numpy(), summed=range(len(stats)))

