"""The exported model's interface: its input, and raw observations -> that input.

One input, ``obs``, whose first dimension is the batch (:func:`input_spec`):

* Box and MultiBinary observations: float32 ``[batch, *space.shape]``;
* Discrete observations: int64 ``[batch]`` (the raw values, ``start`` included);
* Dict, Tuple and MultiDiscrete observations: float32 ``[batch, flatdim]``, each row the
  :func:`gymnasium.spaces.flatten` of one observation.

The outputs are the policy's own (:meth:`cairn.Policy.export_graph`): the environment-ready
deterministic action first, then what the policy adds (``logits``/``mean`` + ``log_std``, and
``value`` when asked for with ``extra_outputs=["value"]``, for actor-critic policies;
``q_values`` for DQN).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import numpy as np

from cairn.policy.export_hook import BATCH, TensorSpec
from cairn.policy.observation_path import input_spec

__all__ = ["BATCH", "TensorSpec", "input_spec", "model_inputs"]


def model_inputs(observation_space: gym.Space[Any], obs_batch: Sequence[Any] | np.ndarray) -> np.ndarray:
    """Raw observations -> the exported model's ``obs`` input (numpy, batch first).

    >>> space = gym.spaces.Discrete(3, start=1)
    >>> model_inputs(space, [1, 3]).tolist()
    [1, 3]
    """
    spec = input_spec(observation_space)
    if isinstance(observation_space, (gym.spaces.Box, gym.spaces.MultiBinary)):
        arr = np.asarray(obs_batch, dtype=np.float32)
        return arr.reshape((-1, *observation_space.shape))
    if isinstance(observation_space, gym.spaces.Discrete):
        return np.asarray(obs_batch, dtype=np.int64).reshape(-1)
    rows = [np.asarray(gym.spaces.flatten(observation_space, o), dtype=np.float32) for o in obs_batch]
    if not rows:
        return np.zeros((0, *spec.shape[1:]), dtype=np.float32)  # type: ignore[arg-type]
    return np.stack(rows)
