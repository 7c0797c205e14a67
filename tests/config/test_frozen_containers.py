"""A built algorithm's config refuses in-place writes into its dict- and list-valued settings as
it refuses setting them: ``algo.config.model["hidden"] = [8]`` (or ``env_config[...]``,
``policies[...]``, ``policies_to_train.append(...)``, DQN's ``epsilon``...) went past the freeze,
so training kept the built networks while ``to_dict()`` and every checkpoint stored the changed
value. Reading, copying, JSON, ``from_dict`` and checkpoints work as before."""

from __future__ import annotations

import copy
import json
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

import cairn
from cairn import APPOConfig, DQNConfig, IMPALAConfig, PPOConfig, SACConfig, TD3Config
from cairn.config.algorithm_config import AlgorithmConfig
from cairn.config.fields import Field
from cairn.config.read_only import ReadOnlyDict, ReadOnlyList
from cairn.errors import ConfigError
from cairn.policy.spec import PolicySpec
from tests.helpers import assert_resumes_exactly, small_ma_ppo, small_ppo

CONFIG_CLASSES = [PPOConfig, IMPALAConfig, APPOConfig, DQNConfig, SACConfig, TD3Config]


def _refused(change: Any, config: AlgorithmConfig, key: str) -> None:
    """``change(config)`` raises the frozen-setting error naming ``key`` and the fix, and
    changes nothing."""
    before = json.dumps(config.to_dict(), sort_keys=True, default=repr)
    with pytest.raises(ConfigError, match=f"Config {key!r} cannot change after the algorithm was built "
                                          r"\(not in place either") as err:
        change(config)
    assert "Fix:" in str(err.value) and "algo.config.copy()" in str(err.value)
    assert json.dumps(config.to_dict(), sort_keys=True, default=repr) == before


def _plain(value: Any) -> bool:
    """Whether ``value`` holds no read-only container, however deep."""
    if isinstance(value, (ReadOnlyDict, ReadOnlyList)):
        return False
    if isinstance(value, dict):
        return all(_plain(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return all(_plain(v) for v in value)
    if isinstance(value, PolicySpec):
        return value.read_only_refusal is None and _plain(value.config)
    return True


@pytest.fixture
def algo():
    built = small_ppo(lr=1e-3).environment(env_config={"max_episode_steps": 200}).build()
    yield built
    built.stop()


@pytest.mark.parametrize("change, key", [
    (lambda c: c.model.__setitem__("hidden", [8]), "model"),
    (lambda c: c.model["hidden"].append(8), "model"),
    (lambda c: c.model["hidden"].__setitem__(0, 8), "model"),
    (lambda c: c.model.update(activation="relu"), "model"),
    (lambda c: c.model.pop("activation"), "model"),
    (lambda c: c.env_config.__setitem__("max_episode_steps", 5), "env_config"),
    (lambda c: c.env_config.clear(), "env_config"),
    (lambda c: c.policies.__setitem__("other", PolicySpec()), "policies"),
    (lambda c: c.policies.pop("default_policy"), "policies"),
    (lambda c: setattr(c.policies["default_policy"], "config", {"lr": 1.0}), "policies"),
    (lambda c: setattr(c.policies["default_policy"], "observation_space", None), "policies"),
])
def test_an_in_place_write_is_refused_and_the_run_resumes_exactly(algo, tmp_path, change, key):
    algo.train()
    _refused(change, algo.config, key)
    # Before, model["hidden"] = [8] trained on 64 units while the checkpoint's config said 8.
    assert algo.config.model["hidden"] == [64, 64] and algo.config.env_config == {"max_episode_steps": 200}
    assert_resumes_exactly(algo, tmp_path / "ckpt", iterations=1)


def test_multi_agent_settings_are_refused_in_place():
    config = small_ma_ppo().multi_agent(
        policies={"p0": PolicySpec(config={"lr": 1e-3, "model": {"hidden": [16]}}), "p1": PolicySpec()},
        policy_mapping_fn={"agent_0": "p0", "agent_1": "p1"}, policies_to_train=["p0"])
    algo = config.build()
    try:
        _refused(lambda c: c.policies_to_train.append("p1"), algo.config, "policies_to_train")
        _refused(lambda c: c.policies_to_train.remove("p0"), algo.config, "policies_to_train")
        _refused(lambda c: c.policy_mapping_fn.__setitem__("agent_1", "p0"), algo.config, "policy_mapping_fn")
        _refused(lambda c: c.policies["p0"].config.__setitem__("lr", 1.0), algo.config, "policies")
        _refused(lambda c: c.policies["p0"].config["model"]["hidden"].append(8), algo.config, "policies")
        with pytest.raises(ConfigError, match="Config 'policies_to_train' cannot change"):
            algo.config.policies_to_train += ["p1"]
        assert algo.config.policies_to_train == ["p0"]
        assert algo.get_policy("p0").config["lr"] == 1e-3
    finally:
        algo.stop()


def test_dqn_replay_and_epsilon_settings_are_refused_in_place():
    algo = DQNConfig().environment("CartPole-v1").debugging(seed=0).build()
    try:
        _refused(lambda c: c.replay_buffer_config.__setitem__("capacity", 7), algo.config,
                 "replay_buffer_config")
        _refused(lambda c: c.epsilon[1].__setitem__(1, 0.5), algo.config, "epsilon")
        _refused(lambda c: c.epsilon.append([9000, 0.0]), algo.config, "epsilon")
    finally:
        algo.stop()


def _containers(value: Any) -> list[dict[Any, Any] | list[Any]]:
    """Every dict and list in ``value`` (through dicts, lists and PolicySpec configs)."""
    found: list[dict[Any, Any] | list[Any]] = []
    if isinstance(value, dict):
        found.append(value)
        for item in value.values():
            found += _containers(item)
    elif isinstance(value, list):
        found.append(value)
        for item in value:
            found += _containers(item)
    elif isinstance(value, PolicySpec):
        found += _containers(value.config)
    return found


@pytest.mark.parametrize("config_cls", CONFIG_CLASSES)
def test_every_dict_and_list_of_every_frozen_config_is_read_only(config_cls):
    config = config_cls().environment(env_config={"nested": {"sizes": [1, 2]}}).league(
        opponents={"rnd": "random_legal"}).multi_agent(
        policies={"main": PolicySpec(config={"model": {"hidden": [8]}})}, policies_to_train=["main"])
    config.freeze()
    checked = set()
    for key, field in config_cls.FIELDS.items():
        if field.section in AlgorithmConfig.LIVE_SECTIONS:
            continue
        for container in _containers(getattr(config, key)):
            checked.add(key)
            write = ((lambda c=container: c.__setitem__("x", 1)) if isinstance(container, dict)
                     else (lambda c=container: c.append(1)))
            with pytest.raises(ConfigError, match=f"Config {key!r} cannot change"):
                write()
    expected = {"env_config", "model", "policies", "policies_to_train", "league_config"}
    if config_cls is DQNConfig:
        expected |= {"replay_buffer_config", "epsilon"}
    if config_cls in (SACConfig, TD3Config):
        expected |= {"replay_buffer_config"}
    assert checked == expected


class _LiveDictConfig(PPOConfig):
    """A config with a dict-valued checkpointing setting (none of cairn's has one yet)."""

    algo_class_name = None  # not registered as PPO's config class
    FIELDS = {**PPOConfig.FIELDS,
              "extra_files": Field("checkpointing", {}, lambda key, value: None, "Files to add.")}


def test_the_dicts_of_live_sections_stay_changeable():
    config = _LiveDictConfig().checkpointing(extra_files={"a": ["x"]})
    config.freeze()
    config.extra_files["b"] = ["y"]
    config.extra_files["a"].append("z")
    config.checkpointing(extra_files={"c": []})
    assert config.extra_files == {"c": []}
    with pytest.raises(ConfigError, match="Config 'model' cannot change"):
        config.model["hidden"] = [8]


def test_to_dict_json_from_dict_copy_and_deepcopy_of_a_frozen_config(algo):
    frozen = algo.config
    assert isinstance(frozen.model, dict) and isinstance(frozen.model["hidden"], list)  # reads as before
    assert frozen.model == algo.config.copy().model and frozen.model["hidden"] == [64, 64]
    data = frozen.to_dict()
    assert _plain(data)  # the caller's to change
    data["model"]["hidden"].append(8)
    assert frozen.model["hidden"] == [64, 64]
    assert json.loads(json.dumps(frozen.to_dict())) == frozen.to_dict()

    loaded = AlgorithmConfig.from_dict(frozen.to_dict())
    assert not loaded.is_frozen and loaded.to_dict() == frozen.to_dict()
    loaded.model["hidden"] = [8]

    deep = copy.deepcopy(frozen)
    assert deep.is_frozen and deep.to_dict() == frozen.to_dict()
    _refused(lambda c: c.model["hidden"].append(8), deep, "model")
    _refused(lambda c: setattr(c.policies["default_policy"], "config", {}), deep, "policies")

    thawed = frozen.copy()
    assert not thawed.is_frozen and thawed.to_dict() == frozen.to_dict()
    assert all(_plain(getattr(thawed, key)) for key in thawed.FIELDS)
    thawed.model["hidden"] = [8]
    thawed.env_config["max_episode_steps"] = 50
    thawed.policies["default_policy"].config = {"lr": 1e-4}
    assert frozen.model["hidden"] == [64, 64] and frozen.env_config == {"max_episode_steps": 200}
    assert frozen.policies["default_policy"].config is None
    other = thawed.build()
    try:
        assert other.get_policy().get_weights()["actor.0.weight"].shape[0] == 8
        assert other.config.is_frozen and not thawed.is_frozen
    finally:
        other.stop()


def test_a_checkpoint_of_a_frozen_config_restores_it_unchanged_and_frozen(algo, tmp_path):
    algo.train()
    path = algo.save(tmp_path / "ckpt")
    restored = cairn.Algorithm.from_checkpoint(path)
    try:
        assert restored.config.to_dict() == algo.config.to_dict()
        _refused(lambda c: c.model["hidden"].append(8), restored.config, "model")
    finally:
        restored.stop()
    assert_resumes_exactly(algo, tmp_path / "again", iterations=1)


def test_restoring_a_state_with_a_new_policy_adds_it_to_a_new_frozen_config(tmp_path):
    algo, other = small_ma_ppo().build(), small_ma_ppo(num_agents=3).build()
    try:
        other.set_state(algo.get_state())  # p0, p1 replaced in place; other had p2 too
        algo.set_state(other.get_state())  # p2 added: the built config's policies are read-only
        assert sorted(algo.config.policies) == ["p0", "p1", "p2"] and algo.config.is_frozen
        _refused(lambda c: c.policies.pop("p2"), algo.config, "policies")
        algo.train()
        restored = cairn.Algorithm.from_checkpoint(algo.save(tmp_path / "ckpt"))
        assert sorted(restored.config.policies) == ["p0", "p1", "p2"]
        restored.stop()
    finally:
        algo.stop()
        other.stop()



#: What each env creation of :func:`_goal_creator` found in ``env_config["goal"]``.
GOALS: list[list[float]] = []


def _goal_creator(env_config: dict[str, Any]) -> Any:
    """An env creator that records and then changes (its copy of) ``env_config["goal"]``."""
    GOALS.append(env_config["goal"].tolist())
    env_config["goal"][0] = -1.0
    return gym.make("CartPole-v1")


def test_a_numpy_array_in_a_frozen_setting_is_a_read_only_copy(tmp_path):
    # Before, algo.config.env_config["goal"][1] = 50.0 was accepted: the envs kept goal [1, 2]
    # while to_dict(), every checkpoint and each env created later (evaluation) had [1, 50].
    GOALS.clear()
    goal = np.array([1.0, 2.0])
    algo = (small_ppo().environment(_goal_creator, env_config={"goal": goal, "deep": [{"a": np.arange(3)}]})
            .evaluation(evaluation_duration=1).build())
    try:
        with pytest.raises(ValueError, match="read-only"):
            algo.config.env_config["goal"][1] = 50.0
        with pytest.raises(ValueError, match="read-only"):
            algo.config.env_config["deep"][0]["a"] += 1
        assert algo.config.env_config["goal"].tolist() == [1.0, 2.0]
        assert algo.config.env_config["deep"][0]["a"].tolist() == [0, 1, 2]
        goal[1] = 7.0  # the caller's array is neither frozen nor the config's
        assert algo.config.env_config["goal"].tolist() == [1.0, 2.0]
        algo.evaluate()  # a creator called after the freeze still gets a copy it may change
        assert GOALS and all(seen == [1.0, 2.0] for seen in GOALS)
        thawed = algo.config.copy()
        thawed.env_config["goal"][1] = 3.0  # a copy is changeable again
        assert algo.config.env_config["goal"].tolist() == [1.0, 2.0]
        path = algo.save(tmp_path / "ckpt")
        restored = cairn.Algorithm.from_checkpoint(path)
        try:
            assert restored.config.env_config["goal"].tolist() == [1.0, 2.0]
            with pytest.raises(ValueError, match="read-only"):
                restored.config.env_config["goal"][0] = 0.0
        finally:
            restored.stop()
    finally:
        algo.stop()


def test_the_spaces_of_a_frozen_config_are_read_only_copies_of_the_policies_spaces(tmp_path):
    # Before, the frozen config's PolicySpec held the policy's own space objects (the env's,
    # for an inferred one): action_space.low[0] = 1.5 was accepted, the policy still clipped
    # actions at -2 while its checkpoints (and to_dict()) stored low 1.5, so a restore clipped
    # at 1.5.
    given = gym.spaces.Box(-2.0, 2.0, (1,), np.float32)
    algo = (cairn.PPOConfig().environment("Pendulum-v1")
            .training(train_batch_size=64, minibatch_size=32, num_epochs=1)
            .multi_agent(policies={"default_policy": PolicySpec(action_space=given)})
            .debugging(seed=0).build())
    try:
        policy, spec = algo.get_policy(), algo.config.policies["default_policy"]
        assert spec.action_space is not policy.action_space
        assert spec.observation_space is not policy.observation_space
        assert spec.action_space == policy.action_space and spec.observation_space == policy.observation_space
        before = algo.config.to_dict()
        with pytest.raises(ValueError, match="read-only"):
            spec.action_space.low[0] = 1.5
        with pytest.raises(ValueError, match="read-only"):
            spec.observation_space.high[0] = 99.0
        assert algo.config.to_dict() == before
        assert policy.action_space.low.tolist() == [-2.0] and policy.observation_space.high[0] == 1.0
        assert policy.get_state()["spec"]["action_space"]["low"] == [-2.0]
        given.low[0] = -1.0  # the caller's space is neither frozen nor the config's
        assert spec.action_space.low.tolist() == [-2.0]
        thawed = algo.config.copy()
        thawed.policies["default_policy"].action_space.low[0] = -1.0  # a copy is changeable
        assert spec.action_space.low.tolist() == [-2.0]
        restored = cairn.Algorithm.from_checkpoint(algo.save(tmp_path / "ckpt"))
        try:
            restored_spec = restored.config.policies["default_policy"]
            assert restored_spec.action_space == policy.action_space
            with pytest.raises(ValueError, match="read-only"):
                restored_spec.action_space.high[0] = 0.0
        finally:
            restored.stop()
    finally:
        algo.stop()


def test_a_dict_observation_space_of_a_frozen_config_refuses_a_new_subspace():
    obs = gym.spaces.Dict({"x": gym.spaces.Box(-1.0, 1.0, (2,), np.float32)})
    frozen = small_ppo().multi_agent(policies={"default_policy": PolicySpec(observation_space=obs)})
    frozen.freeze()
    space = frozen.policies["default_policy"].observation_space
    with pytest.raises(ConfigError, match="Config 'policies' cannot change"):
        space["y"] = gym.spaces.Discrete(2)
    with pytest.raises(ValueError, match="read-only"):
        space["x"].low[1] = 0.0
    assert space == obs and space is not obs
    obs["y"] = gym.spaces.Discrete(2)  # the caller's stays changeable
    assert list(space.keys()) == ["x"]
