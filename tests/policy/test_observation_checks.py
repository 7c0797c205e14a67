"""Observations that do not fit a policy's space give a cairn error naming both shapes; image
observations fed to an MLP give one warning when the policy is made (not when restored)."""

from __future__ import annotations

import warnings

import gymnasium as gym
import numpy as np
import pytest

import cairn
from cairn.algorithms.dqn.dqn_policy import DQNPolicy
from cairn.errors import CairnError, ImageObservationWarning, ObservationSpaceError
from cairn.spaces import is_image_space
from tests.helpers import small_ppo

CARTPOLE_OBS = gym.make("CartPole-v1").observation_space  # Box(4,)
IMAGE = gym.spaces.Box(0, 255, (84, 84, 3), np.uint8)
COLOUR_STACK = gym.spaces.Box(0, 255, (4, 84, 84, 3), np.uint8)  # 4 stacked RGB frames


@pytest.fixture(scope="module")
def cartpole_policy():
    return cairn.Policy(CARTPOLE_OBS, gym.spaces.Discrete(2), seed=0)


def test_error_class_is_a_cairn_error_and_a_value_error():
    assert issubclass(ObservationSpaceError, CairnError)
    assert issubclass(ObservationSpaceError, ValueError)


def test_single_action_with_wrong_size_names_space_and_shapes(cartpole_policy):
    with pytest.raises(ObservationSpaceError) as info:
        cartpole_policy.compute_single_action([0.0, 0.1])
    message = str(info.value)
    assert "Box(" in message and "(4,)" in message  # the expected space and shape
    assert "shape (2,)" in message  # what was received
    assert "Fix:" in message


@pytest.mark.parametrize(
    ("batch", "received"),
    [(np.zeros((3, 2)), "(3, 2)"),  # rows of the wrong size
     (np.zeros((2, 4, 1)), "(2, 4, 1)"),  # the right size, the wrong rank
     (np.zeros((2, 8)), "(2, 8)")],  # as many numbers as two rows, in the wrong layout
)
def test_batch_of_the_wrong_shape(cartpole_policy, batch, received):
    with pytest.raises(ObservationSpaceError,
                       match=r"expected each observation to have shape \(4,\)") as info:
        cartpole_policy.compute_actions(batch)
    assert received in str(info.value)


def test_one_observation_given_as_a_batch_says_so(cartpole_policy):
    with pytest.raises(ObservationSpaceError, match="compute_single_action"):
        cartpole_policy.compute_actions(np.zeros(4))


def test_a_batch_given_as_one_observation_says_so(cartpole_policy):
    with pytest.raises(ObservationSpaceError, match=r"use compute_actions\(batch\)"):
        cartpole_policy.compute_single_action(np.zeros((3, 4)))


def test_ragged_rows(cartpole_policy):
    with pytest.raises(ObservationSpaceError, match="could not be read"):
        cartpole_policy.compute_actions([[0.0, 0.1, 0.2, 0.3], [0.0, 0.1]])


def test_fitting_observations_still_work(cartpole_policy):
    rows = [np.zeros(4, np.float32), np.ones(4, np.float32)]
    assert cartpole_policy.compute_actions(rows).shape == (2,)
    assert cartpole_policy.compute_actions(np.zeros((5, 4))).shape == (5,)
    assert cartpole_policy.compute_single_action([0.0, 0.1, 0.0, -0.1]) in (0, 1)
    assert cartpole_policy.process_observations([], update=False).shape == (0, 4)


def test_algorithm_compute_single_action_gives_the_same_error():
    algo = small_ppo().build()
    try:
        with pytest.raises(ObservationSpaceError, match=r"shape \(2,\)"):
            algo.compute_single_action([0.0, 0.1])
    finally:
        algo.stop()


def test_discrete_observations_of_the_wrong_shape_or_range():
    policy = cairn.Policy(gym.spaces.Discrete(3), gym.spaces.Discrete(2), seed=0)
    with pytest.raises(ObservationSpaceError, match=r"Discrete\(3\).*shape \(2,\)"):
        policy.compute_single_action([1, 2])
    with pytest.raises(ObservationSpaceError, match=r"outside \[0, 2\]"):
        policy.compute_single_action(5)
    assert policy.compute_single_action(2) in (0, 1)


@pytest.mark.parametrize("value", [-1, -3], ids=["just-below", "n-below"])
def test_discrete_observations_below_the_space_are_refused(value):
    """A value below ``start`` indexed the one-hot row from its end (numpy's negative indices):
    -1 in Discrete(3) was read as 2, with no error (an exported model reads it as all zeros)."""
    policy = cairn.Policy(gym.spaces.Discrete(3), gym.spaces.Discrete(2), seed=0)
    with pytest.raises(ObservationSpaceError, match=r"outside \[0, 2\]"):
        policy.compute_single_action(value)
    shifted = cairn.Policy(gym.spaces.Discrete(3, start=-2), gym.spaces.Discrete(2), seed=0)
    with pytest.raises(ObservationSpaceError, match=r"outside \[-2, 0\]"):
        shifted.compute_actions([0, value - 2])
    assert shifted.compute_single_action(-2) in (0, 1)  # the next call works


def test_dict_observation_missing_a_key():
    space = gym.spaces.Dict({"pos": gym.spaces.Box(-1, 1, (2,)), "mode": gym.spaces.Discrete(3)})
    policy = cairn.Policy(space, gym.spaces.Discrete(2), seed=0)
    with pytest.raises(ObservationSpaceError, match="Dict.*could not be flattened.*'mode'"):
        policy.compute_single_action({"pos": np.zeros(2, np.float32)})


# ------------------------------------------------------------------------------ image inputs
@pytest.mark.parametrize(
    ("space", "image"),
    [(IMAGE, True),
     (gym.spaces.Box(0.0, 1.0, (3, 64, 64), np.float32), True),  # channels first, rescaled
     (gym.spaces.Box(0, 255, (84, 84), np.uint8), True),  # grey frames
     (gym.spaces.Box(0, 255, (4, 84, 84), np.uint8), True),  # a stack of grey frames
     (gym.spaces.Box(0, 255, (7, 7, 3), np.uint8), False),  # MiniGrid-sized: fine for an MLP
     (gym.spaces.Box(-1.0, 1.0, (2, 3, 4), np.float32), False),  # a small feature tensor
     (gym.spaces.Box(-1.0, 1.0, (16, 16, 16), np.float32), False),  # no channel axis
     (CARTPOLE_OBS, False),
     (gym.spaces.Discrete(4), False)],
    ids=lambda v: str(getattr(v, "shape", v)),
)
def test_which_spaces_count_as_images(space, image):
    assert is_image_space(space) is image


def test_new_policy_on_images_the_cnn_cannot_read_warns_once_with_the_fix():
    # The CNN reads rank 2 and 3 images; a stack of colour frames (rank 4) is left to the MLP.
    with pytest.warns(ImageObservationWarning) as record:
        cairn.Policy(COLOUR_STACK, gym.spaces.Discrete(2), {"model": {"hidden": [8]}}, seed=0)
    assert len(record) == 1
    message = str(record[0].message)
    assert "84672 inputs" in message and "(4, 84, 84, 3)" in message
    assert "merge the stacked frames into the channel axis" in message and "'conv_filters': []" in message
    assert record[0].filename == __file__  # points at the line that built the policy


def test_dqn_policy_on_images_the_cnn_cannot_read_warns_too():
    with pytest.warns(ImageObservationWarning):
        DQNPolicy(COLOUR_STACK, gym.spaces.Discrete(2), {"model": {"hidden": [8]}}, seed=0)


def test_restoring_a_policy_on_images_does_not_warn():
    with pytest.warns(ImageObservationWarning):
        policy = cairn.Policy(COLOUR_STACK, gym.spaces.Discrete(2), {"model": {"hidden": [8]}}, seed=0)
    state = policy.get_state()
    with warnings.catch_warnings():
        warnings.simplefilter("error", ImageObservationWarning)
        cairn.Policy.from_state(state)
        cairn.Policy.from_state(state, copy=False)


def test_images_the_cnn_reads_vector_observations_and_own_models_do_not_warn():
    class OwnModel(cairn.Policy):
        def make_model(self):  # not the built-in network: no warning
            return super().make_model()

    small_cnn = {"hidden": [8], "conv_filters": [[4, 8, 8]], "conv_dense": 8}
    with warnings.catch_warnings():
        warnings.simplefilter("error", ImageObservationWarning)
        cairn.Policy(CARTPOLE_OBS, gym.spaces.Discrete(2), seed=0)
        cairn.Policy(IMAGE, gym.spaces.Discrete(2), {"model": small_cnn}, seed=0)  # read by the CNN
        # conv_filters=[]: flattening into the MLP on purpose
        cairn.Policy(COLOUR_STACK, gym.spaces.Discrete(2), {"model": {"hidden": [8], "conv_filters": []}},
                     seed=0)
        OwnModel(COLOUR_STACK, gym.spaces.Discrete(2), {"model": {"hidden": [8]}}, seed=0)


@pytest.mark.parametrize(("space", "bad"), [
    (gym.spaces.MultiDiscrete([3, 2]), np.array([0, -1])),  # read as two values for the first part
    (gym.spaces.MultiDiscrete([3, 2]), np.array([3, 0])),  # read as the second part's first value
    (gym.spaces.MultiDiscrete([3, 2], start=[1, 5]), np.array([1, 4])),
    (gym.spaces.MultiDiscrete([3]), np.array([-1])),  # read as 2
    (gym.spaces.Dict({"a": gym.spaces.Discrete(3), "b": gym.spaces.Box(-1, 1, (2,))}),
     {"a": -1, "b": np.zeros(2, np.float32)}),  # read as 2
    (gym.spaces.Tuple((gym.spaces.Box(-1, 1, (1,)), gym.spaces.MultiDiscrete([2, 2]))),
     (np.zeros(1, np.float32), np.array([2, 0]))),
], ids=["md-below", "md-above", "md-start", "md-one", "dict-discrete", "tuple-md"])
def test_flattened_observations_with_discrete_values_outside_their_range_are_refused(space, bad):
    """gymnasium.spaces.flatten writes a one-hot entry without checking the value: one below the
    range lands at the end of the row (numpy's negative index) and one above it in the next
    part's entries, a plausible input with no error. Every one-hot group must hold one 1."""
    policy = cairn.Policy(space, gym.spaces.Discrete(2), seed=0)
    good = space.sample()
    with pytest.raises(ObservationSpaceError, match="outside"):
        policy.compute_actions([good, bad])
    assert policy.compute_single_action(good) in (0, 1)  # the next call works
