"""SAC: sample a few steps, store them in replay, take soft actor-critic gradient steps."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np

from cairn.algorithms.off_policy import OffPolicyAlgorithm
from cairn.algorithms.replay_buffers import REPLAY_BUFFER_COMPONENT
from cairn.algorithms.sac.config import SACConfig
from cairn.algorithms.sac.learn import sac_learn
from cairn.algorithms.sac.sac_policy import SACPolicy
from cairn.config.algorithm_config import AlgorithmConfig
from cairn.policy.policy import Policy
from cairn.registry import register_class
from cairn.replay import ReplayBuffer

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

    # ---------------------------------------------------------------------------- training
    def learn_on_replay(self, pid: str, buffer: ReplayBuffer) -> list[float]:
        self.trained_policy(pid)  # a SACPolicy, or a TypeError saying what to do
        return self.learn_minibatch(sac_learn, pid, buffer)

    def learner_stats(self, pid: str, history: Sequence[Sequence[float]]) -> dict[str, Any]:
        policy: SACPolicy = self.trained_policy(pid)
        stats: dict[str, Any] = dict(zip(LEARNER_STATS, np.mean(history, axis=0).tolist(), strict=True))
        stats.update(alpha=policy.alpha, num_grad_updates=float(policy.num_grad_updates),
                     replay_buffer_size=float(len(self.replay_buffers[pid])))
        return stats
