"""An environment creator gets its own copy of ``env_config``, nested dicts and lists too: with a
shallow copy, a creator that changed a nested value changed the config's, so each later env saw
the change (the evaluation env another layout than training's) and ``to_dict()`` and every
checkpoint stored it."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

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


#: What each call of :func:`_array_creator` found in ``env_config["goal"]``.
GOALS: list[list[float]] = []


def _array_creator(env_config: dict[str, Any]) -> gym.Env:
    """A creator that changes a numpy array of the env_config it is given, in place."""
    GOALS.append(env_config["goal"].tolist())
    env_config["goal"][0] += 1.0
    env_config["nested"][0]["goal"][1] += 1.0
    return gym.make("CartPole-v1")


def test_a_creator_that_changes_a_numpy_array_in_place_changes_neither_the_config_nor_later_envs():
    # The copy went through dicts, lists and tuples only: an array was shared, so the second env
    # got goal [2, 2] where the first got [1, 2], and the checkpoint stored [3, 2].
    GOALS.clear()
    goal, nested = np.array([1.0, 2.0]), [{"goal": np.array([5.0, 6.0])}]
    algo = (small_ppo().environment(_array_creator, env_config={"goal": goal, "nested": nested})
            .env_runners(num_envs_per_env_runner=2).build())
    try:
        assert len(GOALS) >= 2 and all(seen == [1.0, 2.0] for seen in GOALS)
        assert algo.config.env_config["goal"].tolist() == [1.0, 2.0]
        assert algo.config.env_config["nested"][0]["goal"].tolist() == [5.0, 6.0]
        assert goal.tolist() == [1.0, 2.0] and nested[0]["goal"].tolist() == [5.0, 6.0]
    finally:
        algo.stop()
