"""A masked environment for the action-masking tests: every step offers a random subset of the
actions; the observation says which legal one pays. Illegal actions are counted, not punished,
so that a test can assert that none was ever taken."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

from cairn.rng import make_rng, rng_state


class PickLegal(gym.Env[dict[str, np.ndarray], int]):
    """``Discrete(n)`` actions; ``{"observation": one-hot of the paying action, "action_mask": ...}``.

    ``env_config``: ``n`` (actions), ``length`` (steps per episode), ``empty_mask_at`` (a step
    at which the mask is all zeros, to test the error).
    """

    def __init__(self, env_config: dict[str, Any] | None = None) -> None:
        config = dict(env_config or {})
        self.n = int(config.get("n", 6))
        self.length = int(config.get("length", 10))
        self.empty_mask_at = config.get("empty_mask_at")
        self.observation_space = gym.spaces.Dict({
            "observation": gym.spaces.Box(0.0, 1.0, (self.n,), np.float32),
            "action_mask": gym.spaces.Box(0, 1, (self.n,), np.int8),
        })
        self.action_space = gym.spaces.Discrete(self.n)
        self.illegal = 0
        self.steps = 0
        self._t = 0

    def _observe(self) -> dict[str, np.ndarray]:
        mask = np.zeros(self.n, dtype=np.int8)
        legal = self.np_random.choice(self.n, size=int(self.np_random.integers(1, self.n)), replace=False)
        mask[legal] = 1
        self._mask, self._pays = mask, int(self.np_random.choice(legal))
        if self.empty_mask_at is not None and self._t == int(self.empty_mask_at):
            self._mask = mask = np.zeros(self.n, dtype=np.int8)
        observation = np.zeros(self.n, dtype=np.float32)
        observation[self._pays] = 1.0
        return {"observation": observation, "action_mask": mask.copy()}

    def reset(self, *, seed: int | None = None, options: Any = None) -> tuple[dict[str, np.ndarray], dict]:
        super().reset(seed=seed)
        self._t = 0
        return self._observe(), {}

    def step(self, action: int) -> tuple[dict[str, np.ndarray], float, bool, bool, dict]:
        self.steps += 1
        if not self._mask[int(action)]:
            self.illegal += 1
        reward = float(int(action) == self._pays)
        self._t += 1
        return self._observe(), reward, False, self._t >= self.length, {}


    # The environment state protocol (cairn.env_runner.env_state): exact resume mid-episode.
    def get_state(self) -> dict[str, Any]:
        return {"t": self._t, "mask": self._mask.copy(), "pays": self._pays, "rng": rng_state(self.np_random),
                "illegal": self.illegal, "steps": self.steps}

    def set_state(self, state: dict[str, Any]) -> None:
        self._t, self._pays = int(state["t"]), int(state["pays"])
        self._mask = np.asarray(state["mask"], dtype=np.int8).copy()
        self._np_random = make_rng(state["rng"])
        self.illegal, self.steps = int(state["illegal"]), int(state["steps"])


def make_pick_legal(env_config: dict[str, Any]) -> PickLegal:
    return PickLegal(env_config)
