"""Tasks that need memory, for recurrent policies' tests and benchmarks (docs/ppo.md).

* :class:`CueRecall`: a cue (left or right) is shown at the first step only; after ``delay``
  blank steps the agent is asked, and is rewarded +1 for naming the cue, -1 otherwise. A
  feed-forward policy sees the same observation whatever the cue was, so its best expected
  return is 0; a policy that remembers the cue gets 1.
* :class:`StatelessCartPole`: CartPole-v1 with the two velocities hidden (position and angle
  only), sb3-contrib's ``CartPoleNoVel``: a policy must infer velocities from successive
  observations.

Both take part in exact resume (docs/checkpoints.md): CueRecall through the environment state
protocol (``get_state`` / ``set_state``), StatelessCartPole as a wrapped classic-control env.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

from cairn.rng import make_rng, rng_state

__all__ = ["CueRecall", "make_cue_recall", "StatelessCartPole", "make_stateless_cartpole"]


class CueRecall(gym.Env[np.ndarray, np.int64]):
    """Observation ``[cue_left, cue_right, asked]`` (float32), actions ``Discrete(2)``; the episode
    lasts ``delay + 1`` steps, and only the last action (when ``asked`` is 1) is rewarded."""

    def __init__(self, delay: int = 4) -> None:
        self.delay = int(delay)
        self.observation_space = gym.spaces.Box(0.0, 1.0, (3,), np.float32)
        self.action_space = gym.spaces.Discrete(2)
        self._cue = 0
        self._t = 0

    def _obs(self) -> np.ndarray:
        obs = np.zeros(3, dtype=np.float32)
        if self._t == 0:
            obs[self._cue] = 1.0
        if self._t == self.delay:
            obs[2] = 1.0
        return obs

    def reset(self, *, seed: int | None = None,
              options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        self._cue = int(self.np_random.integers(2))
        self._t = 0
        return self._obs(), {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        if self._t == self.delay:
            reward = 1.0 if int(action) == self._cue else -1.0
            self._t += 1
            return np.zeros(3, dtype=np.float32), reward, True, False, {}
        self._t += 1
        return self._obs(), 0.0, False, False, {}

    def get_state(self) -> dict[str, Any]:
        """The cue, the step and the generator (exact resume)."""
        return {"cue": self._cue, "t": self._t, "rng": rng_state(self.np_random)}

    def set_state(self, state: dict[str, Any]) -> None:
        """Restore :meth:`get_state`."""
        self._cue, self._t = int(state["cue"]), int(state["t"])
        self.np_random = make_rng(state["rng"])


def make_cue_recall(env_config: dict[str, Any]) -> CueRecall:
    """An env creator: ``env_config={"delay": k}`` (default 4)."""
    return CueRecall(int(env_config.get("delay", 4)))


class StatelessCartPole(gym.ObservationWrapper[np.ndarray, Any, np.ndarray]):
    """CartPole-v1 observing ``[cart position, pole angle]`` only."""

    def __init__(self, env: gym.Env[Any, Any] | None = None) -> None:
        super().__init__(env if env is not None else gym.make("CartPole-v1"))
        high = np.array([4.8, 0.42], dtype=np.float32)
        self.observation_space = gym.spaces.Box(-high, high, dtype=np.float32)

    def observation(self, observation: np.ndarray) -> np.ndarray:
        return np.asarray(observation, dtype=np.float32)[[0, 2]]


def make_stateless_cartpole(env_config: dict[str, Any]) -> StatelessCartPole:
    """An env creator for :class:`StatelessCartPole`; ``env_config`` may give ``render_mode``
    (``cairn evaluate --render`` does)."""
    return StatelessCartPole(gym.make("CartPole-v1", render_mode=env_config.get("render_mode")))
