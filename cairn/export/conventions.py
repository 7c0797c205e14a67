"""The exported model's interface: input and output names, dtypes and shapes.

One input, ``obs``, whose first dimension is the batch:

* Box and MultiBinary observations: float32 ``[batch, *space.shape]``;
* Discrete observations: int64 ``[batch]`` (the raw values, ``start`` included);
* Dict, Tuple and MultiDiscrete observations: float32 ``[batch, flatdim]``, each row the
  :func:`gymnasium.spaces.flatten` of one observation.

Outputs, in this order: ``action`` (the deterministic action, ready for the environment), the
action distribution's inputs (``logits``, or ``mean`` and ``log_std``), and ``value``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np

__all__ = ["BATCH", "TensorSpec", "input_spec", "output_specs", "model_inputs"]

BATCH = "batch"
"""Name of the dynamic first dimension of every input and output."""

Dim = int | str


@dataclass(frozen=True)
class TensorSpec:
    """Name, numpy dtype name, shape (``"batch"`` for the dynamic dimension) and meaning."""

    name: str
    dtype: str
    shape: tuple[Dim, ...]
    description: str

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "dtype": self.dtype,
            "shape": list(self.shape),
            "description": self.description,
        }


def input_spec(observation_space: gym.Space[Any]) -> TensorSpec:
    """The ``obs`` input for observations from ``observation_space``."""
    if isinstance(observation_space, (gym.spaces.Box, gym.spaces.MultiBinary)):
        return TensorSpec(
            "obs", "float32", (BATCH, *observation_space.shape),
            "Raw observations cast to float32 (no normalisation: the model applies the "
            "policy's observation filter itself).",
        )
    if isinstance(observation_space, gym.spaces.Discrete):
        return TensorSpec(
            "obs", "int64", (BATCH,),
            f"Raw Discrete observations in [{observation_space.start}, "
            f"{observation_space.start + observation_space.n}); the model one-hot encodes them.",
        )
    return TensorSpec(
        "obs", "float32", (BATCH, int(gym.spaces.flatdim(observation_space))),
        "Observations flattened with gymnasium.spaces.flatten(observation_space, obs), as "
        "float32 (Discrete parts one-hot, in the space's key/index order).",
    )


def output_specs(action_space: gym.Space[Any]) -> list[TensorSpec]:
    """The outputs for a policy acting in ``action_space``, in the model's output order."""
    value = TensorSpec("value", "float32", (BATCH,), "The value function's estimate V(obs).")
    if isinstance(action_space, gym.spaces.Discrete):
        n, start = int(action_space.n), int(action_space.start)
        return [
            TensorSpec(
                "action", "int64", (BATCH,),
                f"Deterministic action: argmax(logits) + start ({start}).",
            ),
            TensorSpec("logits", "float32", (BATCH, n), "Unnormalised log-probabilities of "
                       "the categorical action distribution."),
            value,
        ]
    if isinstance(action_space, gym.spaces.MultiDiscrete):
        nvec = [int(n) for n in action_space.nvec.reshape(-1)]
        return [
            TensorSpec(
                "action", np.dtype(action_space.dtype).name, (BATCH, *action_space.shape),
                "Deterministic action: per component argmax of its logits + start.",
            ),
            TensorSpec(
                "logits", "float32", (BATCH, sum(nvec)),
                f"Logits of independent categoricals, concatenated in component order "
                f"(sizes {nvec}).",
            ),
            value,
        ]
    if isinstance(action_space, gym.spaces.Box):
        size = int(np.prod(action_space.shape))
        return [
            TensorSpec(
                "action", np.dtype(action_space.dtype).name, (BATCH, *action_space.shape),
                "Deterministic action: the Gaussian mean clipped to the Box bounds.",
            ),
            TensorSpec("mean", "float32", (BATCH, size), "Mean of the diagonal Gaussian "
                       "(flattened, unclipped)."),
            TensorSpec("log_std", "float32", (BATCH, size), "Log standard deviation of the "
                       "diagonal Gaussian."),
            value,
        ]
    raise ValueError(
        f"Unsupported action space {action_space!r}: exported models act in Discrete, "
        "MultiDiscrete and Box spaces."
    )


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
