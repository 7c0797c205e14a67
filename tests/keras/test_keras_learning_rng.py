"""Keras' global ``SeedGenerator`` in learn calls: a Keras layer calling ``keras.random.*`` with no
``seed`` draws from it, so each learn call of a Keras policy installs one seeded from the policy's
training state (cairn.learners.actor.learning) and hands the caller's back after it: a seeded run
repeats whatever the process drew before, and a restored run goes on as the uninterrupted one.
Unseeded ``Dropout`` (torch's generator, seeded per learn call) and layers with a seed or a
``SeedGenerator`` of their own (``GaussianNoise``; its state is a variable, saved with the
weights) ride along in the same model. A user's builder runs with one seeded from the policy's
seed too, so an initializer drawing from it starts a seeded policy from the same weights."""

from __future__ import annotations

import random

import gymnasium as gym
import numpy as np
import pytest

import cairn
from tests.helpers import small_ppo, weights_digest

MODEL = {"framework": "keras", "keras_model": "tests.keras.builders:global_noise_actor_critic"}


def _keras():
    from cairn.policy.keras_backend import import_keras

    return import_keras()


def _other_draws() -> None:
    """What a user's code, or another algorithm, draws between runs: Keras' global generator,
    Python's ``random``."""
    _keras().random.normal((5,))
    random.random()


def _config(algorithm: str) -> cairn.AlgorithmConfig:
    if algorithm == "ppo":
        return small_ppo(model=MODEL, num_epochs=1)
    model = {"framework": "keras", "keras_model": "tests.keras.builders:global_noise_q_network"}
    return (cairn.DQNConfig().environment("CartPole-v1")
            .training(train_batch_size=32, num_steps_sampled_before_learning_starts=32, model=model)
            .checkpointing(store_replay_buffer=True).debugging(seed=0))


def _trained_digest(algorithm: str, iterations: int) -> str:
    algo = _config(algorithm).build()
    try:
        for _ in range(iterations):
            algo.train()
        return weights_digest(algo)
    finally:
        algo.stop()


@pytest.mark.parametrize("algorithm", ["ppo", "dqn"])
def test_a_seeded_run_drawing_from_keras_global_seed_generator_repeats(algorithm):
    """Before, the custom layer's noise came from whatever Keras' global generator held (seeded
    from Python's ``random`` when first used, moved by every unseeded draw since): two runs with
    ``debugging(seed=0)`` ended with other weights, with no error."""
    first = _trained_digest(algorithm, 2)
    _other_draws()
    assert _trained_digest(algorithm, 2) == first


@pytest.mark.parametrize("algorithm", ["ppo", "dqn"])
def test_a_restored_run_drawing_from_keras_global_seed_generator_goes_on_as_the_uninterrupted_one(
        algorithm, tmp_path):
    want = _trained_digest(algorithm, 2)
    algo = _config(algorithm).build()
    try:
        algo.train()
        path = algo.save(tmp_path / "c")
    finally:
        algo.stop()
    _other_draws()  # the global generator moved since: the restored run must not read it
    restored = cairn.Algorithm.from_checkpoint(path)
    try:
        restored.train()
        assert weights_digest(restored) == want
    finally:
        restored.stop()


def _global_generator():
    from cairn._compat.keras_internals import global_seed_generator

    return global_seed_generator()


@pytest.mark.parametrize("raises", [False, True])
def test_learning_hands_back_keras_global_generator_and_leaves_python_and_numpy_alone(raises):
    from cairn.learners.actor import learning

    keras = _keras()
    policy = cairn.Policy(gym.spaces.Box(-1, 1, (4,)), gym.spaces.Discrete(2), {"model": MODEL}, seed=0)
    keras.random.normal((1,))  # Keras has made its global generator
    before = _global_generator()
    state = keras.ops.convert_to_numpy(before.state.value).copy()
    python_state, numpy_state = random.getstate(), np.random.get_state()
    draws = []
    for _ in range(2):  # the same training state: the same draws
        try:
            with learning(policy):
                assert _global_generator() is not before
                draws.append(keras.ops.convert_to_numpy(keras.random.normal((4,))))
                if raises:
                    raise KeyError("a learn function raising")
        except KeyError:
            assert raises
        assert _global_generator() is before
    np.testing.assert_array_equal(draws[0], draws[1])
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(before.state.value), state)
    assert random.getstate() == python_state
    np.testing.assert_array_equal(np.random.get_state()[1], numpy_state[1])
    policy.num_grad_updates += 1  # the next learn call draws other noise
    with learning(policy):
        assert not np.array_equal(keras.ops.convert_to_numpy(keras.random.normal((4,))), draws[0])


def test_a_builder_drawing_from_keras_global_seed_generator_starts_alike_under_the_same_seed():
    """A builder whose initializer calls ``keras.random.normal(shape)`` draws from Keras' global
    generator: before, two policies with ``seed=0`` started from other weights (the second
    continued the generator the first moved), with no error. The builder now runs with one
    seeded from the policy's seed, and the process's is handed back unmoved."""
    keras = _keras()
    model = {"model": {"framework": "keras",
                       "keras_model": "tests.keras.builders:global_draw_initialized_actor_critic"}}
    space, actions = gym.spaces.Box(-1, 1, (4,)), gym.spaces.Discrete(2)
    keras.random.normal((1,))  # Keras has made its global generator
    before = _global_generator()
    state = keras.ops.convert_to_numpy(before.state.value).copy()
    first = cairn.Policy(space, actions, model, seed=0).get_weights()
    assert _global_generator() is before
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(before.state.value), state)
    _other_draws()
    again = cairn.Policy(space, actions, model, seed=0).get_weights()
    assert all(np.array_equal(first[k], v) for k, v in again.items())
    other = cairn.Policy(space, actions, model, seed=1).get_weights()
    assert not all(np.array_equal(first[k], v) for k, v in other.items())


def test_the_reseeded_generator_draws_what_a_new_one_draws_also_with_a_block_inside_a_block():
    """Each block reuses the thread's generator, its state set to the seed's: it must draw what a
    new ``SeedGenerator(seed)`` draws, however far the last block moved it, and a block inside a
    block (a Keras builder running inside a learn call) must not move the outer block's."""
    from cairn._compat.keras_internals import seeded_global_seed_generator

    keras = _keras()

    def draws(seed, count):
        """What a new ``SeedGenerator(seed)`` as Keras' global one draws (Keras' internals: it
        draws unordered, as no ``seed=`` argument can)."""
        from keras.src.backend.common import global_state
        from keras.src.random.seed_generator import GLOBAL_SEED_GENERATOR

        previous = global_state.get_global_attribute(GLOBAL_SEED_GENERATOR)
        global_state.set_global_attribute(GLOBAL_SEED_GENERATOR, keras.random.SeedGenerator(seed))
        try:
            return [normal() for _ in range(count)]
        finally:
            global_state.set_global_attribute(GLOBAL_SEED_GENERATOR, previous)

    def normal():
        return keras.ops.convert_to_numpy(keras.random.normal((3,)))

    for seed in (5, 2**31 - 1, 5):
        with seeded_global_seed_generator(seed):
            got = [normal() for _ in range(3)]  # moves the generator the next block reuses
        np.testing.assert_array_equal(np.stack(got), np.stack(draws(seed, 3)))
    with seeded_global_seed_generator(5):
        first = normal()
        with seeded_global_seed_generator(9):
            inner = normal()
        second = normal()
    np.testing.assert_array_equal(np.stack([first, second]), np.stack(draws(5, 2)))
    np.testing.assert_array_equal(inner, draws(9, 1)[0])
