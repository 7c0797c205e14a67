"""cairn.envs.atari: Breakout through ale-py with the standard preprocessing, read by the CNN."""

from __future__ import annotations

import warnings

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.wrappers import AtariPreprocessing

import cairn
from cairn.envs.atari import FireOnReset, make_atari_env
from cairn.errors import ConfigError, ImageObservationWarning

pytest.importorskip("ale_py")
pytest.importorskip("cv2")


def test_breakout_gives_stacked_grey_frames_that_the_cnn_reads():
    env = make_atari_env({"noop_max": 0})
    try:
        obs, _ = env.reset(seed=0)
        assert env.observation_space.shape == (4, 84, 84) and env.observation_space.dtype == np.uint8
        assert obs.shape == (4, 84, 84) and obs.dtype == np.uint8 and obs.max() > 0
        rewards = [env.step(env.action_space.sample())[1] for _ in range(8)]
        assert set(rewards) <= {-1.0, 0.0, 1.0}  # clipped to their sign
        with warnings.catch_warnings():
            warnings.simplefilter("error", ImageObservationWarning)
            policy = cairn.Policy(env.observation_space, env.action_space, seed=0)
        assert policy.model.encoder.parts["0"].layout == "CHW"
        assert 0 <= policy.compute_single_action(obs) < env.action_space.n
    finally:
        env.close()


def test_unknown_keys_are_refused():
    with pytest.raises(ConfigError, match="Unknown make_atari_env env_config keys \\['frameskip'\\]"):
        make_atari_env({"frameskip": 4})


def _game_over_within(env, limit):
    """Whether NOOP (never FIRE) ends the game within ``limit`` agent steps."""
    env.reset(seed=0)
    for _ in range(limit):
        _, _, terminated, truncated, _ = env.step(0)
        if terminated or truncated:
            return bool(terminated)
    return False


def test_breakout_serves_after_reset_and_each_lost_life():
    """A policy that never presses FIRE (a weak greedy one) still plays Breakout to its end;
    without FIRE the ball is never served and the episode lasts until ALE's time limit (27,000
    agent steps), which made `cairn evaluate` of such a policy run for minutes in silence."""
    env = make_atari_env({"noop_max": 0, "repeat_action_probability": 0.0})
    try:
        assert _game_over_within(env, 3000), "the ball was not served after a reset or a lost life"
        assert env.unwrapped.ale.lives() == 0
    finally:
        env.close()
    env = make_atari_env({"noop_max": 0, "repeat_action_probability": 0.0, "fire_on_reset": False})
    try:
        env.reset(seed=0)
        for _ in range(300):
            env.step(0)
        assert env.unwrapped.ale.lives() == 5  # without it: no serve, no lost life
    finally:
        env.close()
    freeway = make_atari_env({"env_id": "ALE/Freeway-v5"})  # no FIRE among its actions: nothing to press
    try:
        layer, wrappers = freeway, []
        while isinstance(layer, gym.Wrapper):
            wrappers.append(type(layer))
            layer = layer.env
        assert FireOnReset not in wrappers and AtariPreprocessing in wrappers
    finally:
        freeway.close()
