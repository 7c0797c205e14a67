"""What DQN and SAC share as off-policy algorithms: per-policy replay buffers fed with n-step
transitions, the replay ratio's carried-over credit, and the replay checkpoint component."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from cairn.algorithms.algorithm import Algorithm
from cairn.algorithms.replay_buffers import PolicyReplayBuffers, ReplayRatio
from cairn.config.algorithm_config import AlgorithmConfig
from cairn.replay import ReplayBuffer

__all__ = ["OffPolicyAlgorithm"]


class OffPolicyAlgorithm(Algorithm):
    """An :class:`Algorithm` that learns from replay (the base of DQN and SAC).

    Its config has ``replay_buffer_config``, ``gamma``, ``n_step``, ``training_intensity``
    (None or a replay ratio), ``minibatch_size`` and ``store_replay_buffer``. It holds
    ``replay`` (:class:`~cairn.algorithms.replay_buffers.PolicyReplayBuffers`) and a
    :class:`~cairn.algorithms.replay_buffers.ReplayRatio`, whose credit is its extra state
    (``update_credit``); with ``store_replay_buffer`` the buffers are the ``replay_buffer``
    component of its state and checkpoints.
    """

    def __init__(self, config: AlgorithmConfig, **kwargs: Any) -> None:
        super().__init__(config, **kwargs)
        cfg: Any = self.config
        self.replay = PolicyReplayBuffers(cfg.replay_buffer_config, cfg.seed, gamma=cfg.gamma, n_step=cfg.n_step)
        self.replay_ratio = ReplayRatio(cfg.training_intensity or 1.0, cfg.minibatch_size)

    @property
    def replay_buffers(self) -> dict[str, ReplayBuffer]:
        """The replay buffer of each policy that has sampled."""
        return self.replay.buffers

    def get_extra_state(self) -> dict[str, Any]:
        return {"update_credit": self.replay_ratio.get_state()}

    def set_extra_state(self, state: Mapping[str, Any]) -> None:
        self.replay_ratio.set_state(state.get("update_credit"))

    def get_components(self, *, copy: bool) -> dict[str, Any]:
        """The replay buffers, when ``store_replay_buffer`` is set: in checkpoints as the
        ``replay_buffer`` component, and in :meth:`get_state` (as a copy) likewise."""
        if not getattr(self.config, "store_replay_buffer", False):
            return {}
        return self.replay.component(copy=copy)

    def set_components(self, components: Mapping[str, Any]) -> None:
        self.replay.restore(components, self.policies, algorithm=type(self).__name__)
