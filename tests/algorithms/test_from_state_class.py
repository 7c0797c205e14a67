"""from_state builds the stored class, checked against the class it is called on (no injected
base class): Algorithm builds every algorithm, a subclass only its own kind."""

from __future__ import annotations

import pytest

import cairn
from cairn.checkpoint import CheckpointClassMismatchError
from tests.helpers import small_ppo


def test_algorithm_from_state_builds_the_stored_class_and_a_subclass_only_its_own():
    algo = small_ppo().build()
    state = algo.get_state()
    assert type(cairn.Algorithm.from_state(state)) is cairn.PPO
    assert type(cairn.PPO.from_state(state)) is cairn.PPO
    with pytest.raises(CheckpointClassMismatchError, match="DQN.from_state builds only DQN"):
        cairn.DQN.from_state(state)


def test_set_state_restores_the_generator_in_place():
    algo = small_ppo().build()
    rng = algo.rng
    state = algo.get_state()
    algo.rng.random(5)
    algo.set_state(state)
    assert algo.rng is rng
    assert cairn.Algorithm.from_state(state).rng.random() == algo.rng.random()
