"""A config that a checkpoint cannot hold is refused by ``build()`` (``validate()``), not by the
first save after hours of training: a non-str key or an object in ``env_config``, an object in a
policy's config. The test is the save's own
(:func:`cairn.checkpoint.writer_files.encode_state`), so that everything a save stores is still
accepted and nothing it refuses gets through."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

import cairn
from cairn.checkpoint.writer import write_algorithm_checkpoint
from cairn.checkpoint.writer_files import encode_state
from cairn.errors import CheckpointError, ConfigError
from tests.helpers import small_ma_ppo, small_ppo


def _creator(env_config: dict[str, Any]) -> gym.Env:
    """CartPole, whatever the env_config holds (module level: the checkpoint stores its path)."""
    return gym.make("CartPole-v1")


class _Thing:
    """A user's object, which a checkpoint cannot hold."""


def _nested(depth: int) -> list[Any]:
    """A list ``depth`` levels deep."""
    value: list[Any] = []
    for _ in range(depth):
        value = [value]
    return value


#: env_config values a save refuses, with what the error names besides the setting.
REFUSED: list[tuple[str, dict[Any, Any], str]] = [
    ("int key", {1: 2}, "dict key 1 at 'config/env_config' is not a str"),
    ("nested tuple key", {"grid": {(0, 1): "wall"}}, "dict key (0, 1) at 'config/env_config/grid'"),
    ("str subclass key", {np.str_("k"): 1}, "dict key np.str_('k')"),
    ("object", {"thing": _Thing()}, "_Thing object at"),
    ("object in a list", {"layers": [1, _Thing()]}, "'config/env_config/layers/1' has type _Thing"),
    ("set", {"ids": {1, 2}}, "has type set"),
    ("bytes", {"raw": b"x"}, "has type bytes"),
    ("class", {"cls": _Thing}, "has type type"),
    ("complex", {"z": 1j}, "has type complex"),
    ("str array", {"names": np.array(["a", "b"])}, "has dtype <U1"),
    ("reserved key", {"__array__": "x"}, "'__array__' at 'config/env_config' is reserved"),
]
if np.dtype(np.longdouble).itemsize > 8:  # float128 where numpy has it (x86): no safetensors dtype
    REFUSED.append(("float128 array", {"a": np.zeros(2, np.longdouble)}, "dtype float128"))

#: env_config values a save stores (restored as JSON gives them back: tuples as lists).
ACCEPTED: list[tuple[str, dict[str, Any]]] = [
    ("plain", {"size": 3, "name": "x", "rate": 0.5, "flag": True, "none": None}),
    ("nested", {"a": {"b": [1, {"c": None}], "d": []}}),
    ("tuple", {"sizes": (3, 4), "pairs": [(1, "a")]}),
    ("numpy scalars", {"f": np.float32(1.5), "i": np.int64(3), "b": np.bool_(True),
                       "ld": np.longdouble(2.0)}),
    ("numpy arrays", {"goal": np.arange(3), "grid": np.zeros((2, 2), np.float32),
                      "big_endian": np.arange(3, dtype=">i4"), "strided": np.arange(10)[::2]}),
    ("non-finite floats", {"low": float("-inf"), "nan": float("nan")}),
    ("str subclass value", {"k": np.str_("v")}),
    ("import path and name strings", {"opponent": "package.module:Name", "env": "CartPole-v1"}),
    ("large int", {"i": 10**30}),
]


def _config(env_config: dict[Any, Any]) -> cairn.PPOConfig:
    return small_ppo().environment(_creator, env_config=env_config)  # type: ignore[return-value]


@pytest.mark.parametrize("name, env_config, names", REFUSED, ids=[r[0] for r in REFUSED])
def test_build_refuses_an_env_config_that_a_save_would_refuse(
        name: str, env_config: dict[Any, Any], names: str) -> None:
    config = _config(env_config)
    with pytest.raises(CheckpointError):  # the save's own test refuses it (as a save would)
        encode_state({"config": config.to_dict()})
    with pytest.raises(ConfigError, match="Config 'env_config' cannot be saved in a checkpoint") as err:
        config.build()
    message = str(err.value)
    assert names in message, message
    assert "Fix:" in message and "str keys" in message, message
    config.environment(env_config={"fixed": [1, 2]})  # a refused build leaves the config usable
    config.validate()


@pytest.mark.parametrize("name, env_config", ACCEPTED, ids=[a[0] for a in ACCEPTED])
def test_everything_a_save_stores_is_still_accepted(
        name: str, env_config: dict[str, Any], tmp_path: Path) -> None:
    algo = _config(env_config).build()
    try:
        path = algo.save(str(tmp_path / "ckpt"))
    finally:
        algo.stop()
    restored = cairn.Algorithm.from_checkpoint(path)
    restored.stop()
    assert set(restored.config.env_config) == set(env_config)


def test_the_deepest_env_config_a_save_stores_is_accepted_and_one_level_more_refused(tmp_path: Path) -> None:
    # The check runs the save's test on the setting where the save puts it (the depth limit
    # counts from the algorithm state's root): one level off either way would be caught here.
    algo = _config({"deep": _nested(61)}).build()
    try:
        state = algo.get_state()
        write_algorithm_checkpoint(str(tmp_path / "ckpt"), state)  # a save takes 61 levels
        state["config"]["env_config"]["deep"] = _nested(62)
        with pytest.raises(CheckpointError, match="nested deeper than 64 levels at 'config/env_config/deep"):
            write_algorithm_checkpoint(str(tmp_path / "deeper"), state)  # and refuses 62
    finally:
        algo.stop()
    with pytest.raises(ConfigError, match="'env_config' cannot be saved.*nested deeper than 64 levels"):
        _config({"deep": _nested(62)}).build()


def test_a_policy_config_holding_an_object_is_refused_at_build() -> None:
    config = small_ma_ppo()
    config.multi_agent(policies={"p0": cairn.PolicySpec(config={"note": _Thing()}), "p1": cairn.PolicySpec()})
    with pytest.raises(ConfigError, match="Config 'policies' cannot be saved") as err:
        config.build()
    assert "'config/policies/p0/config/note' has type _Thing" in str(err.value)


def test_add_policy_refuses_a_spec_a_save_would_refuse_and_changes_nothing(tmp_path: Path) -> None:
    algo = small_ma_ppo().build()
    try:
        spec = cairn.PolicySpec(observation_space=algo.get_policy("p0").observation_space,
                                action_space=algo.get_policy("p0").action_space, config={"note": {1, 2}})
        with pytest.raises(ConfigError,
                           match="Config 'policies' cannot be saved.*'config/policies/p2/config/note'"):
            algo.add_policy("p2", spec)
        assert sorted(algo.policies) == ["p0", "p1"] and sorted(algo.config.policies) == ["p0", "p1"]
        algo.train()
        algo.save(str(tmp_path / "ckpt"))  # the algorithm still trains and saves
    finally:
        algo.stop()


@pytest.mark.skipif(np.dtype(np.longdouble).itemsize <= 8, reason="numpy's longdouble is float64 here")
def test_a_save_refuses_an_array_safetensors_cannot_store_before_writing_a_file(tmp_path: Path) -> None:
    # Before, encode_state's dtype test was missing: the save wrote the arrays file partly and
    # raised a SafetensorsError, a ValueError that no caller expects of a save.
    from cairn.checkpoint.writer_files import UnsaveableStateError, write_state_files

    with pytest.raises(UnsaveableStateError, match="'goal' has dtype float128"):
        write_state_files(tmp_path, "state.json", "arrays.safetensors",
                          {"goal": np.zeros(2, np.longdouble)}, {})
    assert list(tmp_path.iterdir()) == []
