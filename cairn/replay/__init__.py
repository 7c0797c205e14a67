"""Replay buffers: preallocated numpy storage, uniform or prioritized sampling, and exact state.

>>> import numpy as np
>>> from cairn.replay import ReplayBuffer
>>> buffer = ReplayBuffer(capacity=100, seed=0)
>>> slots = buffer.add({"obs": np.zeros((3, 4), np.float32), "actions": np.arange(3)})
>>> len(buffer), sorted(buffer.sample(2))
(3, ['actions', 'batch_indexes', 'obs'])
"""

from cairn.replay.factory import REPLAY_BUFFER_TYPES, make_replay_buffer, replay_buffer_from_state
from cairn.replay.prioritized import PrioritizedReplayBuffer
from cairn.replay.sum_tree import SumTree
from cairn.replay.uniform import ReplayBuffer

__all__ = [
    "ReplayBuffer",
    "PrioritizedReplayBuffer",
    "SumTree",
    "REPLAY_BUFFER_TYPES",
    "make_replay_buffer",
    "replay_buffer_from_state",
]
