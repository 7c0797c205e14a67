"""The exported model's interface: its inputs, and raw observations -> those inputs.

The first input is ``obs``, whose first dimension is the batch (:func:`input_spec`):

* Box and MultiBinary observations: float32 ``[batch, *space.shape]``;
* Discrete observations: int64 ``[batch]`` (the raw values, ``start`` included);
* Dict, Tuple and MultiDiscrete observations: float32 ``[batch, flatdim]``, each row the
  :func:`gymnasium.spaces.flatten` of one observation.

A policy with an action mask (a Dict observation with an ``"action_mask"`` key, Discrete or
MultiDiscrete actions; docs/models.md) has a second input, ``action_mask`` (float32
``[batch, mask_size]``), and its ``obs`` is the observation without the mask
(``policy.network_observation_space``: the Dict without ``"action_mask"``, or its
``"observation"`` part when that is the only other key). :func:`model_feeds` builds every input
from raw observations.

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

from cairn.errors import ObservationSpaceError
from cairn.policy.action_mask_input import ACTION_MASK_INPUT
from cairn.policy.action_masking import (
    ACTION_MASK_KEY,
    MaskedObservationPreprocessor,
    action_mask_size,
    action_sizes,
    check_masks,
    network_observation_space,
    network_observations,
)
from cairn.policy.export_hook import BATCH, TensorSpec
from cairn.policy.observation_path import input_spec
from cairn.spaces import ObservationPreprocessor

__all__ = ["BATCH", "TensorSpec", "input_spec", "model_inputs", "model_feeds"]


def _read(preprocessor: ObservationPreprocessor | MaskedObservationPreprocessor,
          obs_batch: Sequence[Any] | np.ndarray) -> np.ndarray:
    """The policy's own reading of ``obs_batch``, so that what it refuses is refused here too:
    a reshape or :func:`gymnasium.spaces.flatten` alone would read transposed observations, rows
    of another size or Discrete parts out of their ranges as other, valid-looking inputs."""
    try:
        return preprocessor(obs_batch)
    except ObservationSpaceError as exc:
        raise ObservationSpaceError(
            f"cairn.export.model_inputs takes a batch of observations, as compute_actions does: {exc}"
        ) from exc


def _obs_input(observation_space: gym.Space[Any], obs_batch: Sequence[Any] | np.ndarray) -> np.ndarray:
    rows = _read(ObservationPreprocessor(observation_space), obs_batch)
    if isinstance(observation_space, (gym.spaces.Box, gym.spaces.MultiBinary)):
        return rows.reshape((-1, *observation_space.shape))
    if isinstance(observation_space, gym.spaces.Discrete):
        return np.asarray(obs_batch, dtype=np.int64).reshape(-1)  # raw values: the model one-hot encodes
    return rows


def model_inputs(observation_space: gym.Space[Any], obs_batch: Sequence[Any] | np.ndarray, *,
                 action_space: gym.Space[Any] | None = None) -> np.ndarray:
    """Raw observations -> the exported model's ``obs`` input (numpy, batch first).

    Give the policy's ``action_space`` for a policy whose observations may carry an action
    mask: a masked policy's ``obs`` leaves the mask out (:func:`model_feeds` gives the mask
    too). Without it, every observation is read whole, as an unmasked policy reads it.

    >>> space = gym.spaces.Discrete(3, start=1)
    >>> model_inputs(space, [1, 3]).tolist()
    [1, 3]
    """
    mask_size = 0 if action_space is None else action_mask_size(observation_space, action_space)
    if mask_size:  # the observations, their masks included, checked as the policy checks them
        _read(MaskedObservationPreprocessor(observation_space, mask_size), obs_batch)  # type: ignore[arg-type]
        return _obs_input(network_observation_space(observation_space),
                          network_observations(observation_space, obs_batch))  # type: ignore[arg-type]
    return _obs_input(observation_space, obs_batch)


def model_feeds(observation_space: gym.Space[Any], action_space: gym.Space[Any],
                obs_batch: Sequence[Any] | np.ndarray) -> dict[str, np.ndarray]:
    """Raw observations -> every input of the model exported from a policy with these spaces,
    by name, in the model's input order: ``{"obs": ...}``, plus ``"action_mask"`` (float32
    ``[batch, mask_size]``) for a masked policy.

    Raises :class:`~cairn.errors.ObservationSpaceError` for observations the policy refuses
    (:func:`model_inputs`), and :class:`~cairn.errors.ActionMaskError` for a mask that allows
    no action (of some sub-action), as the policy does.

    Pass it to onnxruntime as it is (``session.run(None, feeds)``), or to the torch program
    positionally (``program(*map(torch.from_numpy, feeds.values()))``).

    >>> obs_space = gym.spaces.Dict({"observation": gym.spaces.Box(0, 1, (2,)),
    ...                              "action_mask": gym.spaces.MultiBinary(3)})
    >>> feeds = model_feeds(obs_space, gym.spaces.Discrete(3),
    ...                     [{"observation": np.ones(2), "action_mask": np.array([1, 0, 1])}])
    >>> {name: value.tolist() for name, value in feeds.items()}
    {'obs': [[1.0, 1.0]], 'action_mask': [[1.0, 0.0, 1.0]]}
    """
    feeds = {"obs": model_inputs(observation_space, obs_batch, action_space=action_space)}
    size = action_mask_size(observation_space, action_space)
    if size:
        masks = [np.asarray(o[ACTION_MASK_KEY], dtype=np.float32).reshape(-1) for o in obs_batch]
        feeds[ACTION_MASK_INPUT] = np.stack(masks) if masks else np.zeros((0, size), np.float32)
        # The model returns some action for a row that allows none; the policy refuses it.
        check_masks(feeds[ACTION_MASK_INPUT], action_sizes(action_space))
    return feeds
