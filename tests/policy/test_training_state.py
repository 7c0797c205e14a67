"""A policy's training state has one owner, PolicyTrainingState: the policy's optimizer, filter,
generators and counters are its, and its get_state/set_state carry them exactly."""

import gymnasium as gym
import numpy as np
import pytest
import torch

import cairn
from cairn.policy.training_state import PolicyTrainingState

OBS = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)
BATCH = np.random.default_rng(0).uniform(-1, 1, (8, 4)).astype(np.float32)


def _trained(seed: int) -> cairn.Policy:
    policy = cairn.Policy(OBS, gym.spaces.Discrete(2), {"observation_filter": "MeanStdFilter"}, seed=seed)
    policy.process_observations(BATCH, update=True)
    policy.optimizer.zero_grad()
    policy.model.action_inputs(torch.from_numpy(BATCH)).sum().backward()
    policy.optimizer.step()
    policy.num_grad_updates += 1
    policy.global_timestep += 8
    policy.compute_actions(BATCH)  # draws from np_random
    return policy


def test_the_policy_s_training_attributes_are_its_training_state_s():
    policy = _trained(0)
    training = policy.training
    assert isinstance(training, PolicyTrainingState)
    assert policy.optimizer is training.built_optimizer
    acting_filter = policy.observation_input.observation_filter
    assert policy.observation_filter is training.observation_filter is acting_filter
    assert (training.num_grad_updates, training.global_timestep) == (1, 8)
    rng = np.random.default_rng(5)
    policy.np_random = rng  # what remote env runners do
    assert training.np_random is rng and policy.generator is training.generator


def test_training_state_round_trip_continues_identically():
    source, target = _trained(0), _trained(1)
    state = source.training.get_state(source.make_optimizer, lr=3e-4, copy=True, exploration={})
    assert list(state) == ["optimizer", "observation_filter", "counters", "exploration", "rng"]
    target.set_weights(source.get_weights())
    target.training.set_state(state, list(target.model.parameters()), adopt=False)
    assert (target.num_grad_updates, target.global_timestep) == (1, 8)
    np.testing.assert_array_equal(target.process_observations(BATCH, update=False),
                                  source.process_observations(BATCH, update=False))
    np.testing.assert_array_equal(target.compute_actions(BATCH), source.compute_actions(BATCH))
    for a, b in zip(source.optimizer.state.values(), target.optimizer.state.values()):
        np.testing.assert_array_equal(a["exp_avg"].numpy(), b["exp_avg"].numpy())


def test_policy_state_keeps_the_format_s_key_order():
    """Checkpoint JSON is written in the tree's order: the layout of format section 5."""
    assert list(_trained(0).get_state()) == ["spec", "weights", "optimizer", "observation_filter",
                                              "counters", "exploration", "rng"]


def test_a_state_with_another_filter_is_refused():
    policy = _trained(0)
    state = cairn.Policy(OBS, gym.spaces.Discrete(2), seed=0).get_state()
    with pytest.raises(ValueError, match="observation filter 'NoFilter'"):
        policy.training.set_state(state, list(policy.model.parameters()), adopt=False)


def test_a_refused_state_leaves_the_policy_as_it_was():
    # Before, Policy.set_state loaded the weights and only then refused the filter: the policy
    # was left half-restored (another policy's weights, its own filter and optimizer).
    policy, other = _trained(0), _trained(1)
    state = other.get_state()
    unfiltered = cairn.Policy(OBS, gym.spaces.Discrete(2), seed=0)
    state["observation_filter"] = unfiltered.get_state()["observation_filter"]
    before = policy.get_state()
    with pytest.raises(ValueError, match="observation filter 'NoFilter'"):
        policy.set_state(state)
    after = policy.get_state()
    assert all(np.array_equal(after["weights"][k], before["weights"][k]) for k in before["weights"])
    assert after["counters"] == before["counters"]
