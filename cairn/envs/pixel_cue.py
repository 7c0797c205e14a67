"""PixelCue: a tiny image task that a CNN policy learns in seconds, for tests and benches.

Each step shows a grey ``uint8`` image (``(channels, size, size)``, black) with a bright
square in its left or right half; the agent earns 1 for naming the side (action 0: left,
1: right; with ``continuous=True`` the action is a number in [-1, 1] whose sign names it and
the reward is ``-(action - target)^2`` for ``target`` -1 or +1). Episodes last ``length``
steps. The only way to score is to read the pixels, and the answer is independent of
history, so a working CNN path learns it fast while a broken one stays at chance.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import gymnasium as gym
import numpy as np

__all__ = ["PixelCue", "make_pixel_cue"]


class PixelCue(gym.Env[np.ndarray, Any]):
    """See the module docstring. ``channels_last=True`` gives ``(size, size, channels)``."""

    def __init__(self, *, size: int = 16, channels: int = 1, channels_last: bool = False,
                 continuous: bool = False, length: int = 16) -> None:
        shape = (size, size, channels) if channels_last else (channels, size, size)
        self.channels = channels
        self.observation_space = gym.spaces.Box(0, 255, shape, np.uint8)
        self.action_space: gym.Space[Any] = (
            gym.spaces.Box(-1.0, 1.0, (1,), np.float32) if continuous else gym.spaces.Discrete(2))
        self.size, self.channels_last, self.continuous, self.length = size, channels_last, continuous, length
        self._side = 0
        self._t = 0

    def _observe(self) -> np.ndarray:
        self._side = int(self.np_random.integers(2))
        image = np.zeros((self.size, self.size), np.uint8)
        half = self.size // 2
        side = max(2, self.size // 4)
        row = int(self.np_random.integers(0, self.size - side + 1))
        col = int(self.np_random.integers(0, half - side + 1)) + (half if self._side else 0)
        image[row: row + side, col: col + side] = 255
        axis = -1 if self.channels_last else 0
        return np.repeat(np.expand_dims(image, axis), self.channels, axis=axis)

    def reset(self, *, seed: int | None = None,
              options: Mapping[str, Any] | None = None) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        self._t = 0
        return self._observe(), {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        if self.continuous:
            target = 1.0 if self._side else -1.0
            reward = -float((float(np.asarray(action).reshape(-1)[0]) - target) ** 2)
        else:
            reward = float(int(action) == self._side)
        self._t += 1
        return self._observe(), reward, False, self._t >= self.length, {}


def make_pixel_cue(env_config: Mapping[str, Any] | None = None) -> PixelCue:
    """Env creator: ``PixelCue(**env_config)`` (for ``config.environment(make_pixel_cue, ...)``)."""
    return PixelCue(**dict(env_config or {}))
