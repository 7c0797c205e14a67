"""``model_inputs``/``model_feeds`` accept exactly the observations the policy accepts.

They build an exported model's inputs from raw observations (docs/export.md, *Inputs*). Where
the policy refuses an observation (``ObservationSpaceError``), a reshape or
``gymnasium.spaces.flatten`` would otherwise build a valid-looking input from it: transposed
images as other pixels, rows of twice the size as twice the batch, a Discrete part out of its
range as another value of its neighbour, and the model acts on that without a word.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import pytest

import cairn
from cairn.errors import ActionMaskError, ObservationSpaceError
from cairn.export import model_feeds, model_inputs

BOX = gym.spaces.Box(-1.0, 1.0, (3, 2))
PARTS = gym.spaces.Dict({"a": gym.spaces.Discrete(2), "b": gym.spaces.Discrete(3)})
GRID = gym.spaces.MultiDiscrete([2, 3])
CELL = gym.spaces.Discrete(3, start=1)
MASKED = gym.spaces.Dict({"observation": gym.spaces.Box(-1.0, 1.0, (2,)),
                          "action_mask": gym.spaces.MultiBinary(3)})

BAD: dict[str, tuple[gym.Space[Any], Any]] = {
    # Observations of shape (2, 3) for a (3, 2) space: the same number of values, transposed.
    "transposed": (BOX, list(np.arange(12, dtype=np.float32).reshape(2, 2, 3))),
    # Rows of 8 numbers for Box(4,): a reshape reads 3 observations as 6.
    "wide rows": (gym.spaces.Box(-1.0, 1.0, (4,)), list(np.zeros((3, 8), np.float32))),
    # Discrete parts below and above their ranges: flatten puts the 1 into another entry.
    "dict part below": (PARTS, [{"a": -1, "b": 0}]),
    "multidiscrete above": (GRID, [np.array([2, 0])]),
    "multidiscrete below": (GRID, [np.array([-1, 0])]),
    # A Discrete observation outside [start, start + n), and a 2-D batch of them.
    "discrete above": (CELL, [1, 4]),
    "discrete 2-D": (CELL, np.array([[1, 2], [3, 1]])),
    # A fraction: the cast to integers read 2.5 as 2.
    "discrete fraction": (CELL, [1.0, 2.5]),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_observations_the_policy_refuses_are_refused(case: str) -> None:
    space, observations = BAD[case]
    policy = cairn.Policy(space, gym.spaces.Discrete(2), seed=0)
    with pytest.raises(ObservationSpaceError):
        policy.compute_actions(observations, explore=False)
    with pytest.raises(ObservationSpaceError, match="model_inputs"):
        model_inputs(space, observations)
    with pytest.raises(ObservationSpaceError, match="model_inputs"):
        model_feeds(space, gym.spaces.Discrete(2), observations)


def test_masked_observations_are_checked_as_the_policy_checks_them() -> None:
    good = {"observation": np.zeros(2, np.float32), "action_mask": np.ones(3, np.int8)}
    wrong_part = {"observation": np.zeros(3, np.float32), "action_mask": np.ones(3, np.int8)}
    wrong_mask = {"observation": np.zeros(2, np.float32), "action_mask": np.ones(4, np.int8)}
    policy = cairn.Policy(MASKED, gym.spaces.Discrete(3), seed=0)
    for bad in (wrong_part, wrong_mask):
        with pytest.raises(ObservationSpaceError):
            policy.compute_actions([good, bad], explore=False)
        with pytest.raises(ObservationSpaceError, match="model_inputs|action_mask"):
            model_feeds(MASKED, gym.spaces.Discrete(3), [good, bad])


@pytest.mark.parametrize("space", [BOX, PARTS, GRID, CELL, MASKED], ids=str)
def test_valid_observations_give_the_same_inputs_as_before(space: gym.Space[Any]) -> None:
    """The inputs of valid observations are unchanged: Box rows reshaped, Discrete values raw,
    the rest ``gymnasium.spaces.flatten``; an empty batch stays possible."""
    space.seed(0)
    observations: list[Any] = [space.sample() for _ in range(5)]
    feeds = model_feeds(space, gym.spaces.Discrete(3), observations)
    if space is MASKED:
        expected = np.stack([o["observation"] for o in observations]).astype(np.float32)
        np.testing.assert_array_equal(feeds["action_mask"],
                                      np.stack([o["action_mask"] for o in observations]).astype(np.float32))
    elif space is BOX:
        expected = np.stack(observations).astype(np.float32)
    elif space is CELL:
        expected = np.asarray(observations, np.int64)
    else:
        flat = [np.asarray(gym.spaces.flatten(space, o)) for o in observations]
        expected = np.stack(flat).astype(np.float32)
    assert feeds["obs"].dtype == expected.dtype
    np.testing.assert_array_equal(feeds["obs"], expected)
    empty = model_feeds(space, gym.spaces.Discrete(3), [])
    assert empty["obs"].shape == (0, *expected.shape[1:])


@pytest.mark.parametrize("action_space", [gym.spaces.Discrete(3), gym.spaces.MultiDiscrete([1, 2])],
                         ids=["discrete", "multidiscrete"])
def test_a_mask_without_a_legal_action_is_refused_as_by_the_policy(action_space: gym.Space[Any]) -> None:
    """The exported model returns some action for a row whose mask (or one sub-action's part of
    it) allows nothing (docs/export.md); the policy raises ActionMaskError, and so does
    model_feeds, instead of handing such a row to the model."""
    legal = {"observation": np.zeros(2, np.float32), "action_mask": np.array([1, 1, 0], np.int8)}
    none = {"observation": np.zeros(2, np.float32), "action_mask": np.array([0, 1, 1], np.int8)
            if isinstance(action_space, gym.spaces.MultiDiscrete) else np.zeros(3, np.int8)}
    policy = cairn.Policy(MASKED, action_space, seed=0)
    with pytest.raises(ActionMaskError, match=r"row\(s\) \[1\]"):
        policy.compute_actions([legal, none], explore=False)
    with pytest.raises(ActionMaskError, match=r"row\(s\) \[1\]"):
        model_feeds(MASKED, action_space, [legal, none])
    feeds = model_feeds(MASKED, action_space, [legal])
    np.testing.assert_array_equal(feeds["action_mask"], [[1.0, 1.0, 0.0]])
