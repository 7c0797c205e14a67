"""cairn.envs.atari: Breakout through ale-py with the standard preprocessing, read by the CNN."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import cairn
from cairn.envs.atari import make_atari_env
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
