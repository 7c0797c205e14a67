"""SAC: sample a few steps, store them in replay, take soft actor-critic gradient steps."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np
import torch

from cairn.algorithms.off_policy import OffPolicyAlgorithm
from cairn.algorithms.replay_buffers import REPLAY_BUFFER_COMPONENT
from cairn.algorithms.sac.config import SACConfig
from cairn.algorithms.sac.loss import (
    actor_loss,
    alpha_loss,
    critic_loss,
    soft_q_targets,
    squashed_gaussian_sample,
)
from cairn.algorithms.sac.sac_policy import SACPolicy
from cairn.config.algorithm_config import AlgorithmConfig
from cairn.policy.policy import Policy
from cairn.policy.torch_utils import clip_grad_norm
from cairn.registry import register_class
from cairn.replay import PrioritizedReplayBuffer, ReplayBuffer

__all__ = ["SAC", "REPLAY_BUFFER_COMPONENT", "LEARNER_STATS"]

#: The learner statistics of each policy, averaged over an iteration's gradient steps.
LEARNER_STATS = ("critic_loss", "actor_loss", "alpha_loss", "q_mean", "target_mean", "log_prob_mean")


@register_class
class SAC(OffPolicyAlgorithm):
    """Soft Actor-Critic (Haarnoja et al. 2018): a squashed-Gaussian actor, twin Q critics
    with Polyak-averaged targets, and automatic entropy tuning; n-step returns, uniform or
    prioritized replay; single- and multi-agent (one replay buffer per policy).

    Each ``train()`` call repeats, until ``train_batch_size`` env steps are sampled: sample
    ``train_freq`` steps per environment (uniformly random actions until
    ``num_steps_sampled_before_learning_starts``), add them to each policy's replay buffer,
    then take ``gradient_steps`` gradient steps per policy. Each gradient step, on one
    minibatch and in Stable-Baselines3's order: the temperature (``alpha_loss``), the critics
    towards the soft n-step target (``critic_loss``), the actor against the updated critics
    (``actor_loss``), then the target critics (``tau``).

    >>> from cairn import SACConfig
    >>> algo = (SACConfig().environment("Pendulum-v1")
    ...         .training(train_batch_size=300, minibatch_size=32, model={"hidden": [32, 32]}).build())
    >>> algo.train()["training_iteration"]
    1
    """

    config_class: ClassVar[type[AlgorithmConfig]] = SACConfig
    config: SACConfig
    default_policy_class: ClassVar[type[Policy]] = SACPolicy

    def check_policies(self) -> None:
        for pid in self.policies:
            # A restored policy keeps its Adam moments but takes the config's learning
            # rates (config_overrides={"actor_lr": ...} on restore).
            self._sac_policy(pid).set_group_learning_rates(self.config.policy_config(pid))

    def _sac_policy(self, pid: str) -> SACPolicy:
        policy: SACPolicy = self.trained_policy(pid)
        return policy

    # ---------------------------------------------------------------------------- training
    def gradient_updates_due(self, pid: str, rows: int) -> int:
        """Gradient steps for ``pid`` after a round that sampled ``rows`` of its transitions:
        none without new ones, else ``training_intensity``'s share or ``gradient_steps``."""
        if not rows:
            return 0
        if self.config.training_intensity is not None:
            return self.replay_ratio.due(pid, rows)
        return rows if self.config.gradient_steps == -1 else self.config.gradient_steps

    def learn_on_replay(self, pid: str, buffer: ReplayBuffer) -> list[float]:
        return self._learn(self._sac_policy(pid), buffer)

    def learner_stats(self, pid: str, history: Sequence[Sequence[float]]) -> dict[str, Any]:
        policy = self._sac_policy(pid)
        stats: dict[str, Any] = dict(zip(LEARNER_STATS, np.mean(history, axis=0).tolist(), strict=True))
        stats.update(alpha=policy.alpha, num_grad_updates=float(policy.num_grad_updates),
                     replay_buffer_size=float(len(self.replay_buffers[pid])))
        return stats

    def _learn(self, policy: SACPolicy, buffer: ReplayBuffer) -> list[float]:
        """One gradient step of ``policy`` on a minibatch from ``buffer``."""
        cfg = self.config
        sample = buffer.sample(cfg.minibatch_size)
        model, optimizer = policy.model, policy.optimizer
        groups: dict[str, list[torch.nn.Parameter]] = {g["name"]: g["params"] for g in optimizer.param_groups}
        obs, actions = torch.from_numpy(sample["obs"]), torch.from_numpy(sample["actions"])
        next_obs = torch.from_numpy(sample["next_obs"])
        weights = sample.get("weights")
        shape = (obs.shape[0], policy.action_size)

        # The actor's reparameterised actions at s, for the alpha and actor losses.
        mean, log_std = model.actor(obs)
        noise = torch.randn(shape, generator=policy.generator)
        actions_pi, log_prob = squashed_gaussian_sample(mean, log_std, noise)
        alpha = model.log_alpha.detach().exp()  # this step's temperature, before alpha moves
        loss_alpha = alpha_loss(model.log_alpha, log_prob, policy.target_entropy)

        with torch.no_grad():
            next_mean, next_log_std = model.actor(next_obs)
            next_noise = torch.randn(shape, generator=policy.generator)
            next_actions, next_log_prob = squashed_gaussian_sample(next_mean, next_log_std, next_noise)
            discounts = torch.from_numpy(cfg.gamma ** sample["n_steps"].astype(np.float32))
            targets = soft_q_targets(
                torch.from_numpy(sample["rewards"]), discounts, torch.from_numpy(sample["terminateds"]),
                model.target_critic(next_obs, next_actions), next_log_prob, alpha)
        q_values = model.critic(obs, actions)
        loss_critic, td_errors = critic_loss(
            q_values, targets, None if weights is None else torch.from_numpy(weights))

        # Alpha and the critics have disjoint parameters: one backward, one optimizer step.
        _clear_grads(groups)
        (loss_critic + loss_alpha).backward()
        if cfg.grad_clip is not None:
            clip_grad_norm(groups["critic"], cfg.grad_clip)
        optimizer.step()

        # The actor against the updated critics; their weights are detached, so gradients
        # reach only the actor (and the critics' stale gradients are cleared first).
        loss_actor = actor_loss(log_prob, model.critic(obs, actions_pi, detach=True), alpha)
        _clear_grads(groups)
        loss_actor.backward()
        if cfg.grad_clip is not None:
            clip_grad_norm(groups["actor"], cfg.grad_clip)
        optimizer.step()

        model.update_targets(cfg.tau)
        policy.num_grad_updates += 1
        if isinstance(buffer, PrioritizedReplayBuffer):
            buffer.update_priorities(sample["batch_indexes"], td_errors.numpy())
        return [float(loss_critic.detach()), float(loss_actor.detach()), float(loss_alpha.detach()),
                float(q_values.detach().mean()), float(targets.mean()), float(log_prob.detach().mean())]



def _clear_grads(groups: dict[str, list[torch.nn.Parameter]]) -> None:
    # The optimizer's groups hold every parameter with a gradient (the target critics have
    # none): walking them is cheaper than walking the model's modules.
    for params in groups.values():
        for param in params:
            param.grad = None
