"""DQN: sample a little, store it in replay, learn from replayed minibatches, sync a target."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np

from cairn.algorithms.dqn.config import DQNConfig
from cairn.algorithms.dqn.dqn_policy import DQNPolicy
from cairn.algorithms.dqn.learn import dqn_learn, numpy_dqn_learn
from cairn.algorithms.dqn.numpy_update import numpy_update_unsupported
from cairn.algorithms.off_policy import OffPolicyAlgorithm
from cairn.algorithms.replay_buffers import REPLAY_BUFFER_COMPONENT
from cairn.config.algorithm_config import AlgorithmConfig
from cairn.errors import ConfigError
from cairn.policy.policy import Policy
from cairn.registry import register_class
from cairn.replay import ReplayBuffer

__all__ = ["DQN", "REPLAY_BUFFER_COMPONENT"]


@register_class
class DQN(OffPolicyAlgorithm):
    """Deep Q-Network (Mnih et al. 2015) with double Q-learning, dueling heads, n-step
    returns and uniform or prioritized replay; single- and multi-agent.

    Each ``train()`` call repeats, until ``train_batch_size`` env steps are sampled: sample
    ``rollout_fragment_length`` steps per environment, add them to each policy's replay
    buffer, then (after ``num_steps_sampled_before_learning_starts``) run the gradient updates
    that ``training_intensity`` calls for and sync target networks that are due.

    ``update_backend`` picks who runs each gradient update (numpy or torch autograd, see
    :class:`~cairn.algorithms.dqn.config.DQNConfig`); each policy's learner stats name the
    one that ran as ``"update_backend"``.

    >>> from cairn import DQNConfig
    >>> algo = DQNConfig().environment("CartPole-v1").training(train_batch_size=100).build()
    >>> algo.train()["training_iteration"]
    1
    """

    config_class: ClassVar[type[AlgorithmConfig]] = DQNConfig
    config: DQNConfig
    default_policy_class: ClassVar[type[Policy]] = DQNPolicy

    def check_policies(self) -> None:
        super().check_policies()
        if self.config.update_backend == "numpy":  # refuse what numpy cannot train now, not later
            for pid in self.policies_to_train:
                self._update_backend(pid, self.trained_policy(pid))

    # ---------------------------------------------------------------------------- training
    def training_step(self) -> dict[str, dict[str, Any]]:
        self._backends: dict[str, str] = {}  # asked once per policy and iteration
        return super().training_step()

    def gradient_updates_due(self, pid: str, rows: int) -> int:
        """``training_intensity``'s share of ``rows`` new transitions; None: one per round."""
        if self.config.training_intensity is None:
            return 1 if rows else 0
        return self.replay_ratio.due(pid, rows)

    def learn_on_replay(self, pid: str, buffer: ReplayBuffer) -> list[float]:
        policy: DQNPolicy = self.trained_policy(pid)
        if pid not in self._backends:  # once per iteration: a few microseconds
            self._backends[pid] = self._update_backend(pid, policy)
        # torch: here, on the learner's device, or on the DDP learners; numpy: only here.
        return self.learn_minibatch(numpy_dqn_learn if self._backends[pid] == "numpy" else dqn_learn,
                                    pid, buffer)

    def sync_target(self, pid: str) -> None:
        """Copy the Q-network into the target network once ``target_network_update_freq``
        of the policy's steps were sampled since the last copy."""
        policy: DQNPolicy = self.trained_policy(pid)
        if policy.global_timestep - policy.last_target_update >= self.config.target_network_update_freq:
            self.sync_learners([pid])  # a write of the training state: the learners give it back
            policy.update_target()

    def learner_stats(self, pid: str, history: Sequence[Sequence[float]]) -> dict[str, Any]:
        policy: DQNPolicy = self.trained_policy(pid)
        means = np.mean(history, axis=0).tolist()
        names = ("loss", "q_mean", "target_mean", "td_error_abs_mean")
        stats: dict[str, Any] = dict(zip(names, means, strict=True))
        stats.update(num_grad_updates=float(policy.num_grad_updates), epsilon=policy.epsilon,
                     replay_buffer_size=float(len(self.replay_buffers[pid])),
                     update_backend=self._backends[pid])
        return stats

    def _update_backend(self, pid: str, policy: DQNPolicy) -> str:
        """``"numpy"`` or ``"torch"``: who runs ``policy``'s updates, per ``update_backend``.

        Asked again in every iteration, so a network or optimizer replaced between two
        ``train()`` calls is seen.
        """
        chosen = self.config.update_backend
        group = self.learner_group  # learning on DDP learners or an accelerator: only torch's runs
        if chosen == "torch" or (group is not None and group.learner is not None):
            return "torch"
        reason = numpy_update_unsupported(policy.model, policy.optimizer)
        if reason is None:
            return "numpy"
        if chosen == "numpy":
            raise ConfigError(
                f"update_backend='numpy' cannot train policy {pid!r}: {reason}. The numpy update "
                "covers a QNetwork with relu or tanh, trained by torch.optim.Adam (one param group, "
                "no weight_decay, amsgrad, maximize, differentiable or capturable) on float32 CPU "
                "parameters. Use update_backend='auto' (numpy where it applies, else torch) or 'torch'."
            )
        return "torch"
