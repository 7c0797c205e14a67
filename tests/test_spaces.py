import re
from collections import OrderedDict

import gymnasium as gym
import numpy as np
import pytest

import cairn
from cairn.errors import ObservationSpaceError
from cairn.space_json import space_from_json, space_to_json
from cairn.spaces import ObservationPreprocessor, check_action_space

SPACES = [
    gym.spaces.Box(-1.0, 1.0, (3,), np.float32),
    gym.spaces.Box(low=np.array([-np.inf, 0.0]), high=np.array([np.inf, 1.0]), dtype=np.float64),
    gym.spaces.Box(0, 255, (2, 2), np.uint8),
    gym.spaces.Discrete(5, start=-2),
    gym.spaces.MultiDiscrete([3, 4], start=[1, 0]),
    gym.spaces.MultiBinary(3),
    gym.spaces.Dict({"pos": gym.spaces.Box(-1, 1, (2,)), "mode": gym.spaces.Discrete(3)}),
    gym.spaces.Tuple((gym.spaces.Discrete(2), gym.spaces.Box(0, 1, (1,)))),
]


@pytest.mark.parametrize("space", SPACES, ids=lambda s: type(s).__name__)
def test_json_round_trip(space):
    data = space_to_json(space)
    import json

    json.dumps(data, allow_nan=False)  # strict JSON
    back = space_from_json(data)
    assert space_to_json(back) == data
    assert back == space


@pytest.mark.parametrize(
    "bad",
    [None, {"type": "Nope"}, {"type": "Discrete", "n": 0}, {"type": "Discrete", "n": True},
     {"type": "Box", "shape": [2], "dtype": "float32", "low": [0], "high": [1, 1]},
     {"type": "Box", "shape": [1 << 20, 1 << 20], "dtype": "float32", "low": [], "high": []},
     {"type": "Box", "shape": [1], "dtype": "object", "low": [0], "high": [1]},
     {"type": "Tuple", "spaces": "x"}],
)
def test_rejects_bad_json(bad):
    with pytest.raises(ValueError):
        space_from_json(bad)


def test_preprocessor_shapes():
    box = ObservationPreprocessor(SPACES[0])
    assert box(np.zeros((4, 3))).shape == (4, 3)
    disc = ObservationPreprocessor(SPACES[3])
    out = disc([-2, 2])
    assert out.tolist() == [[1, 0, 0, 0, 0], [0, 0, 0, 0, 1]]
    d = ObservationPreprocessor(SPACES[6])
    sample = SPACES[6].sample()
    assert d([sample, sample]).shape == (2, 5)


def test_preprocessor_rejects_unsupported():
    with pytest.raises(ValueError, match="Unsupported observation space"):
        ObservationPreprocessor(gym.spaces.Text(5))


@pytest.mark.parametrize("build", [
    lambda parts: gym.spaces.Dict(OrderedDict(parts)),
    lambda parts: gym.spaces.Dict(dict(parts), sort_keys=False),
    lambda parts: gym.spaces.Dict(parts),
], ids=["OrderedDict", "sort_keys=False", "pairs"])
def test_json_round_trip_keeps_dict_key_order(build):
    """A Dict's key order is its flattening order (what the network reads where): a restored
    space with its keys sorted would feed a policy's network its inputs in another order."""
    parts = [("z", gym.spaces.Box(-1, 1, (2,))),
             ("a", gym.spaces.Dict(OrderedDict([("y", gym.spaces.Discrete(2)),
                                                ("b", gym.spaces.MultiBinary(1))])))]
    space = build(parts)
    assert list(space.spaces) == ["z", "a"]  # gymnasium keeps this order: so must cairn
    back = space_from_json(space_to_json(space))
    assert list(back.spaces) == ["z", "a"] and list(back["a"].spaces) == ["y", "b"]
    obs = space.sample()
    np.testing.assert_array_equal(gym.spaces.flatten(back, obs), gym.spaces.flatten(space, obs))


@pytest.mark.parametrize("space", [
    gym.spaces.Box(-np.inf, np.inf, (2,), np.int64),  # gymnasium: the int64 range, the usual "unbounded"
    gym.spaces.Box(0, np.iinfo(np.uint64).max, (1,), np.uint64),
    gym.spaces.Box(np.array([0, -(2**53) - 1]), np.array([2**53 + 1, 0]), dtype=np.int64),
], ids=["int64-range", "uint64-range", "beyond-2**53"])
def test_json_round_trip_keeps_integer_box_bounds_exact(space):
    """Integer bounds went through float64: the int64 maximum came back as the minimum (the
    restored space differed from the env's, and Algorithm.from_checkpoint refused its own
    checkpoint), integers beyond 2**53 as their neighbours."""
    import json

    back = space_from_json(json.loads(json.dumps(space_to_json(space), allow_nan=False)))
    assert back.dtype == space.dtype
    np.testing.assert_array_equal(back.low, space.low)
    np.testing.assert_array_equal(back.high, space.high)
    assert space_to_json(back) == space_to_json(space)


def test_integer_box_bounds_written_as_floats_by_earlier_versions_are_read_exactly():
    """Checkpoints written before bounds were exact ints hold the int64 range as +-2**63 in
    float64; reading them gives the range back instead of wrapping around."""
    data = {"type": "Box", "shape": [2], "dtype": "int64", "low": [-9.223372036854776e18, 0.0],
            "high": [9.223372036854776e18, 10.0]}
    back = space_from_json(data)
    np.testing.assert_array_equal(back.low, [np.iinfo(np.int64).min, 0])
    np.testing.assert_array_equal(back.high, [np.iinfo(np.int64).max, 10])


@pytest.mark.parametrize("bound", [2**63, -(2**63) - 1, 1.5, "inf"])
def test_integer_box_bounds_outside_the_dtype_are_refused(bound):
    with pytest.raises(ValueError, match="int64"):
        space_from_json({"type": "Box", "shape": [1], "dtype": "int64", "low": [0], "high": [bound]})


@pytest.mark.parametrize("observations", [
    [2.7], np.array([1.0, 0.5]), [np.float32(3.25)], np.array([np.nan])])
def test_discrete_observations_with_a_fraction_are_refused(observations):
    # Cast to int64 unchecked, 2.7 was read as 2 (and NaN as a huge negative index).
    preprocessor = ObservationPreprocessor(gym.spaces.Discrete(5))
    with pytest.raises(ObservationSpaceError, match="whole numbers|integers"):
        preprocessor(observations)
    policy = cairn.Policy(gym.spaces.Discrete(5), gym.spaces.Discrete(2), seed=0)
    with pytest.raises(ObservationSpaceError):
        policy.compute_actions(observations, explore=False)


def test_discrete_observations_as_whole_floats_or_bools_are_read_as_before():
    preprocessor = ObservationPreprocessor(gym.spaces.Discrete(3, start=1))
    expected = preprocessor([1, 3, 2])
    np.testing.assert_array_equal(preprocessor([1.0, 3.0, np.float32(2.0)]), expected)
    np.testing.assert_array_equal(preprocessor(np.array([1.0, 3.0, 2.0])), expected)
    flags = ObservationPreprocessor(gym.spaces.Discrete(2))([True, False])
    np.testing.assert_array_equal(flags, [[0, 1], [1, 0]])


@pytest.mark.parametrize(("space", "fix"), [
    (gym.spaces.MultiBinary(3), r"MultiBinary\(3,\) is MultiDiscrete\(np.full\(\(3,\), 2\)\)"),
    (gym.spaces.Tuple([gym.spaces.Discrete(2), gym.spaces.Discrete(3)]), "one MultiDiscrete of their sizes"),
    (gym.spaces.Dict({"a": gym.spaces.Box(-1.0, 1.0, (2,))}), "one flat Box"),
    (gym.spaces.Box(0, 10, (2,), np.int64), r"MultiDiscrete space \(nvec = high - low \+ 1, start = low\)"),
])
def test_unsupported_action_spaces_are_refused_naming_a_fix(space: gym.Space, fix: str) -> None:
    with pytest.raises(ValueError, match="Fix: ") as info:
        check_action_space(space)
    assert re.search(fix, str(info.value)), str(info.value)
    with pytest.raises(cairn.errors.ConfigError, match=fix):
        cairn.Policy(gym.spaces.Box(-1.0, 1.0, (3,)), space, seed=0)


INTEGER_PARTS = gym.spaces.Dict({"count": gym.spaces.Box(0, 100, (2,), np.int8),
                                 "flags": gym.spaces.MultiBinary(2),
                                 "speed": gym.spaces.Box(-1.0, 1.0, (1,))})


@pytest.mark.parametrize(("part", "value"), [
    # gymnasium.spaces.flatten casts each part to its dtype: 0.7 became 0 and 300 became 44.
    ("count", np.array([0.7, 3.0])), ("count", np.array([300, 3])), ("count", [300, 3]),
    ("flags", np.array([0.5, 1.0])), ("count", np.array([np.nan, 1.0]))])
def test_integer_parts_the_cast_would_change_are_refused(part, value):
    good = {"count": np.array([7, 3], np.int8), "flags": np.array([1, 0], np.int8),
            "speed": np.array([0.5], np.float32)}
    preprocessor = ObservationPreprocessor(INTEGER_PARTS)
    # (A Python int beyond the dtype: numpy's own OverflowError, "out of bounds for int8".)
    with pytest.raises(ObservationSpaceError, match="cannot hold|out of bounds for int8"):
        preprocessor([good, {**good, part: value}])
    policy = cairn.Policy(INTEGER_PARTS, gym.spaces.Discrete(2), seed=0)
    with pytest.raises(ObservationSpaceError):
        policy.compute_actions([{**good, part: value}], explore=False)


def test_integer_parts_given_as_whole_floats_or_other_int_dtypes_are_read_as_before():
    preprocessor = ObservationPreprocessor(INTEGER_PARTS)
    exact = {"count": np.array([7, 3], np.int8), "flags": np.array([1, 0], np.int8),
             "speed": np.array([0.5], np.float32)}
    expected = preprocessor([exact])
    np.testing.assert_array_equal(expected, [[7, 3, 1, 0, 0.5]])
    for other in ({"count": np.array([7.0, 3.0]), "flags": [True, False]},
                  {"count": [7, 3], "flags": np.array([1, 0], np.int64)}):
        np.testing.assert_array_equal(preprocessor([{**exact, **other}]), expected)
