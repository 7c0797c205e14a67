"""An environment creator gets its own copy of ``env_config``, nested dicts and lists too: with a
shallow copy, a creator that changed a nested value changed the config's, so each later env saw
the change (the evaluation env another layout than training's) and ``to_dict()`` and every
checkpoint stored it."""

from __future__ import annotations

from typing import Any

import gymnasium as gym

from cairn.env_runner.make_env import create_env
from tests.helpers import small_ppo

#: What each call of :func:`_changing_creator` found in ``env_config["seen"]``.
SEEN: list[list[int]] = []


def _changing_creator(env_config: dict[str, Any]) -> gym.Env:
    """A creator that changes the env_config it is given, nested values too."""
    SEEN.append(list(env_config["seen"]))
    env_config["seen"].append(len(env_config["seen"]))
    env_config["options"]["changed"] = True
    env_config.setdefault("added", True)
    return gym.make("CartPole-v1")


def test_a_creator_that_changes_its_env_config_changes_neither_the_config_nor_later_envs():
    SEEN.clear()
    given = {"seen": [], "options": {"size": (3, [4])}}
    algo = (small_ppo().environment(_changing_creator, env_config=given)
            .evaluation(evaluation_duration=1).build())
    try:
        algo.train()
        algo.evaluate()  # creates the evaluation env, after the probe env of the build
        assert len(SEEN) >= 2 and all(seen == [] for seen in SEEN)
        assert algo.config.env_config == {"seen": [], "options": {"size": (3, [4])}}
        assert algo.config.to_dict()["env_config"] == {"seen": [], "options": {"size": (3, [4])}}
    finally:
        algo.stop()


class _Marker(dict):
    """A dict subclass in env_config: passed on as it is, not turned into a plain dict."""


def test_the_creators_copy_keeps_other_objects_as_they_are():
    marker, token = _Marker(a=1), object()
    got: dict[str, Any] = {}

    def creator(env_config: dict[str, Any]) -> gym.Env:
        got.update(env_config)
        return gym.make("CartPole-v1")

    create_env(creator, {"marker": marker, "token": token, "nested": [{"x": [1]}]}).close()
    assert got["marker"] is marker and got["token"] is token and got["nested"] == [{"x": [1]}]
