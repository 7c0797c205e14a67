"""Replay for off-policy algorithms (DQN, SAC): per-policy buffers, their checkpoint
component, and the (n-step) transitions a sample batch adds to them."""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import Any

import numpy as np

from cairn.algorithms.dqn.loss import n_step_returns
from cairn.env_runner.sample_batch import SampleBatch
from cairn.replay import ReplayBuffer, make_replay_buffer
from cairn.rng import seed_sequence

__all__ = ["REPLAY_BUFFER_COMPONENT", "PolicyReplayBuffers", "replay_transitions"]

#: The checkpoint component (``components/replay_buffer/``) holding the replay buffers.
REPLAY_BUFFER_COMPONENT = "replay_buffer"


def replay_transitions(batch: SampleBatch, *, gamma: float, n_step: int) -> dict[str, np.ndarray]:
    """The rows to store for ``batch``: ``obs``, ``actions``, the n-step ``rewards`` and the
    ``next_obs``/``terminateds`` of each window's last step (where the target bootstraps),
    and ``n_steps``, the window lengths (the bootstrap discount is ``gamma ** n_steps``)."""
    if n_step == 1:
        returns, last = batch["rewards"], np.arange(len(batch))
        steps = np.ones(len(batch), dtype=np.int32)
    else:
        returns, last, steps = n_step_returns(batch["rewards"], batch["ends"], gamma=gamma, n=n_step)
    return {
        "obs": batch["obs"],
        "actions": batch["actions"],
        "rewards": returns.astype(np.float32, copy=False),
        "next_obs": batch["next_obs"][last],
        "terminateds": batch["terminateds"][last],
        "n_steps": steps.astype(np.int32, copy=False),
    }


class PolicyReplayBuffers:
    """One replay buffer per policy ID, made on first use from ``replay_buffer_config`` and
    seeded from the algorithm's seed and the policy ID (so a run repeats exactly).

    ``buffers`` maps policy IDs to their buffers. A plain holder of the algorithm's buffers:
    their state goes into checkpoints through :meth:`component`.
    """

    def __init__(self, replay_buffer_config: Mapping[str, Any], seed: int | None) -> None:
        self.replay_buffer_config = dict(replay_buffer_config)
        self.seed = seed
        self.buffers: dict[str, ReplayBuffer] = {}

    def buffer(self, pid: str) -> ReplayBuffer:
        """Policy ``pid``'s buffer, made empty on first use."""
        if pid not in self.buffers:
            self.buffers[pid] = make_replay_buffer(
                self.replay_buffer_config,
                seed=int(seed_sequence(self.seed, 2, pid).generate_state(1)[0]),
            )
        return self.buffers[pid]

    def component(self, *, copy: bool) -> dict[str, Any]:
        """The ``replay_buffer`` checkpoint component: every buffer's state."""
        return {REPLAY_BUFFER_COMPONENT: {
            "policies": {pid: buf.get_state(copy=copy) for pid, buf in self.buffers.items()},
        }}

    def restore(self, components: Mapping[str, Any], policy_ids: Any, *, algorithm: str) -> None:
        """Replace the buffers by those stored in ``components`` (for the policies in
        ``policy_ids``); none stored: empty buffers, with a warning that says how to keep them."""
        stored = components.get(REPLAY_BUFFER_COMPONENT)
        self.buffers = {}
        if stored is None:
            warnings.warn(
                f"This {algorithm} state has no replay buffer, so training continues with empty "
                "buffers (and does not repeat the original run exactly). Save with "
                "config.checkpointing(store_replay_buffer=True) to keep them.",
                stacklevel=5,  # restore <- set_components <- set_algorithm_state <- set_state <- caller
            )
            return
        for pid, buffer_state in stored["policies"].items():
            if pid in policy_ids:
                self.buffer(pid).set_state(buffer_state)
