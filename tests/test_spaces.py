from collections import OrderedDict

import gymnasium as gym
import numpy as np
import pytest

from cairn.spaces import ObservationPreprocessor, space_from_json, space_to_json

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
