"""TD3: sample a few steps, store them in replay, take twin-delayed actor-critic gradient steps."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np

from cairn.algorithms.off_policy import OffPolicyAlgorithm
from cairn.algorithms.td3.config import TD3Config
from cairn.algorithms.td3.learn import td3_learn
from cairn.algorithms.td3.td3_policy import TD3Policy
from cairn.config.algorithm_config import AlgorithmConfig
from cairn.policy.policy import Policy
from cairn.registry import register_class
from cairn.replay import ReplayBuffer

__all__ = ["TD3", "LEARNER_STATS"]

#: The learner statistics of each policy, averaged over an iteration's gradient steps
#: (``actor_loss`` over the steps that updated the actor).
LEARNER_STATS = ("critic_loss", "actor_loss", "q_mean", "target_mean")


@register_class
class TD3(OffPolicyAlgorithm):
    """Twin Delayed DDPG (Fujimoto et al. 2018): a deterministic actor, twin Q critics with
    clipped double-Q targets, target policy smoothing, and actor and target updates delayed to
    every ``policy_delay``-th critic update; n-step returns, uniform or prioritized replay;
    single- and multi-agent (one replay buffer per policy).

    Each ``train()`` call repeats, until ``train_batch_size`` env steps are sampled: sample
    ``train_freq`` steps per environment (uniformly random actions until
    ``num_steps_sampled_before_learning_starts``, then the actor's plus Gaussian
    ``exploration_noise``), add them to each policy's replay buffer, then take
    ``gradient_steps`` gradient steps per policy (:func:`~cairn.algorithms.td3.learn.td3_learn`).

    >>> from cairn import TD3Config
    >>> algo = (TD3Config().environment("Pendulum-v1")
    ...         .training(train_batch_size=300, minibatch_size=32, model={"hidden": [32, 32]}).build())
    >>> algo.train()["training_iteration"]
    1
    """

    config_class: ClassVar[type[AlgorithmConfig]] = TD3Config
    config: TD3Config
    default_policy_class: ClassVar[type[Policy]] = TD3Policy

    def learn_on_replay(self, pid: str, buffer: ReplayBuffer) -> list[float]:
        self.trained_policy(pid)  # a TD3Policy, or a TypeError saying what to do
        return self.learn_minibatch(td3_learn, pid, buffer)

    def learner_stats(self, pid: str, history: Sequence[Sequence[float]]) -> dict[str, Any]:
        policy: TD3Policy = self.trained_policy(pid)
        values = np.asarray(history, dtype=np.float64)
        stats: dict[str, Any] = {name: float(np.mean(values[:, i])) for i, name in enumerate(LEARNER_STATS)}
        actor = values[:, LEARNER_STATS.index("actor_loss")]
        actor = actor[~np.isnan(actor)]
        stats["actor_loss"] = float(actor.mean()) if actor.size else float("nan")
        stats.update(num_grad_updates=float(policy.num_grad_updates),
                     replay_buffer_size=float(len(self.replay_buffers[pid])))
        return stats
