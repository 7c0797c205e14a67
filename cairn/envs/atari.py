"""Atari through ale-py, with the usual DQN/PPO preprocessing (``pip install 'cairn-rl[atari]'``).

:func:`make_atari_env` is an env creator (``creator(env_config) -> env``), to pass as
``config.environment(make_atari_env, env_config={"env_id": "ALE/Pong-v5"})``. It wraps the
game as Mnih et al. and SB3's ``make_atari_env`` do: up to ``noop_max`` no-ops at reset, the
action repeated ``frame_skip`` times with the last two frames max-pooled, grey scale, resized
to ``screen_size`` squared (:class:`gymnasium.wrappers.AtariPreprocessing`), rewards clipped to
their sign, and the last ``frame_stack`` frames stacked (:class:`gymnasium.wrappers.
FrameStackObservation`). Observations are ``uint8`` of shape ``(frame_stack, 84, 84)``, which
cairn's CNN reads channels first (``docs/models.md``). In games whose actions include FIRE,
FIRE is pressed after each reset and each lost life (:class:`FireOnReset`), as the usual
Atari wrappers do (SB3's ``FireResetEnv`` after its ``EpisodicLifeEnv``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import gymnasium as gym
import numpy as np

from cairn.errors import ConfigError, EnvError

__all__ = ["make_atari_env", "ATARI_DEFAULTS", "FireOnReset"]

#: ``env_config`` keys of :func:`make_atari_env` and their defaults.
ATARI_DEFAULTS: dict[str, Any] = {
    "env_id": "ALE/Breakout-v5",
    "frame_skip": 4,
    "screen_size": 84,
    "grayscale": True,
    "frame_stack": 4,
    "noop_max": 30,
    "terminal_on_life_loss": False,
    "clip_rewards": True,
    # ALE v5's default (Machado et al. 2018); 0.0 is the NoFrameskip-v4 setting of older papers.
    "repeat_action_probability": 0.25,
    "max_episode_steps": None,
    # Press FIRE after a reset and a lost life where the game has FIRE (see FireOnReset).
    "fire_on_reset": True,
}


class FireOnReset(gym.Wrapper):  # type: ignore[type-arg]
    """Press FIRE after each reset and after each lost life that does not end the episode.

    Breakout and other games wait for FIRE to serve: a policy that has not learnt to press it
    (an untrained one, or a weak greedy one) would wait until ALE's time limit, 108,000 frames,
    in every episode. The extra step is one agent step (``frame_skip`` frames) whose reward is
    added to the step's. The wrapper holds only the lives count, which a reset reads again;
    Atari envs are not part of cairn's exact env state (a restore starts fresh episodes), so
    nothing of it needs saving.
    """

    def __init__(self, env: gym.Env[Any, Any]) -> None:
        super().__init__(env)
        self._fire = env.unwrapped.get_action_meanings().index("FIRE")  # type: ignore[attr-defined]
        self._lives = 0

    def _lives_left(self) -> int:
        return int(self.env.unwrapped.ale.lives())  # type: ignore[attr-defined]

    def reset(self, **kwargs: Any) -> tuple[Any, dict[str, Any]]:
        self.env.reset(**kwargs)
        obs, _, terminated, truncated, info = self.env.step(self._fire)
        if terminated or truncated:  # FIRE ended it (no game does): start once more, unseeded
            obs, info = self.env.reset(options=kwargs.get("options"))
        self._lives = self._lives_left()
        return obs, info

    def step(self, action: Any) -> tuple[Any, Any, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        lives = self._lives_left()
        if lives < self._lives and not (terminated or truncated):
            obs, fire_reward, terminated, truncated, info = self.env.step(self._fire)
            reward = float(reward) + float(fire_reward)
            lives = self._lives_left()
        self._lives = lives
        return obs, reward, terminated, truncated, info


def make_atari_env(env_config: Mapping[str, Any] | None = None) -> gym.Env[Any, Any]:
    """An Atari game with the standard preprocessing; ``env_config`` overrides
    :data:`ATARI_DEFAULTS` (``env_id`` is any ``ALE/...-v5`` ID).

    Raises :class:`~cairn.errors.EnvError` when ale-py is missing or the game does not load,
    :class:`~cairn.errors.ConfigError` for unknown keys.
    """
    options = dict(env_config or {})
    unknown = sorted(set(options) - set(ATARI_DEFAULTS))
    if unknown:
        raise ConfigError(f"Unknown make_atari_env env_config keys {unknown}; "
                          f"allowed: {sorted(ATARI_DEFAULTS)}.")
    cfg = {**ATARI_DEFAULTS, **options}
    try:
        import ale_py
    except ImportError as exc:
        raise EnvError(
            "make_atari_env needs ale-py (it ships the Atari ROMs since 0.9). Fix: pip install "
            "'cairn-rl[atari]'."
        ) from exc
    gym.register_envs(ale_py)
    try:
        # AtariPreprocessing does the frame skipping itself: the game must not skip frames too.
        env = gym.make(cfg["env_id"], frameskip=1,
                       repeat_action_probability=float(cfg["repeat_action_probability"]),
                       max_episode_steps=cfg["max_episode_steps"])
    except gym.error.Error as exc:
        raise EnvError(f"Could not create Atari game {cfg['env_id']!r}: {exc}. "
                       "IDs look like 'ALE/Pong-v5'.") from exc
    env = gym.wrappers.AtariPreprocessing(
        env, noop_max=int(cfg["noop_max"]), frame_skip=int(cfg["frame_skip"]),
        screen_size=int(cfg["screen_size"]), terminal_on_life_loss=bool(cfg["terminal_on_life_loss"]),
        grayscale_obs=bool(cfg["grayscale"]), scale_obs=False,
    )
    if cfg["fire_on_reset"] and "FIRE" in env.unwrapped.get_action_meanings():  # type: ignore[attr-defined]
        env = FireOnReset(env)
    if cfg["clip_rewards"]:
        env = gym.wrappers.TransformReward(env, lambda r: float(np.sign(float(r))))
    if int(cfg["frame_stack"]) > 1:
        env = gym.wrappers.FrameStackObservation(env, int(cfg["frame_stack"]))
    return env
