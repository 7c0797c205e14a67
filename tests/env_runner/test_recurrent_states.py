"""The env runner's recurrent states (cairn.env_runner.recurrent_state): each trajectory starts
from its own policy's initial state as it is now."""

import gymnasium as gym
import numpy as np

import cairn
from cairn.env_runner import recurrent_state
from cairn.env_runner.recurrent_state import RecurrentStates
from cairn.envs import make_cue_recall
from tests.recurrent.nets import LearnedStartGRU

BOX = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)


def learned_start_policy(h0: float, width: int = 4) -> cairn.Policy:
    model = {"custom_model": LearnedStartGRU, "custom_model_config": {"width": width, "h0": h0}}
    return cairn.Policy(BOX, gym.spaces.Discrete(2), {"model": model}, seed=0)


def act(states: RecurrentStates, policy: cairn.Policy, keys: list) -> list[np.ndarray]:
    obs = np.zeros((len(keys), 3), np.float32)
    _, _, state_in = states.act(policy, obs, keys, explore=False, policy_id="p",
                                origin=lambda r: (keys[r][1], keys[r][0], 0))
    assert state_in is not None
    return state_in


def test_a_policy_is_never_served_another_policys_initial_state(monkeypatch):
    """Before, the initial state was cached by id(policy): once a policy was freed (e.g.
    remove_policy then add_policy), the next policy given its id started every trajectory from
    the freed one's state. The id is made to collide here, as CPython does on reuse."""
    monkeypatch.setattr(recurrent_state, "id", lambda obj: 0, raising=False)
    states = RecurrentStates()
    first, second = learned_start_policy(0.25), learned_start_policy(-0.5)
    np.testing.assert_array_equal(act(states, first, [(0, "a")])[0], np.full((1, 4), 0.25, np.float32))
    np.testing.assert_array_equal(act(states, second, [(1, "b")])[0], np.full((1, 4), -0.5, np.float32))
    wider = learned_start_policy(1.0, width=6)  # another state size under the same (reused) id
    np.testing.assert_array_equal(act(states, wider, [(2, "c")])[0], np.ones((1, 6), np.float32))


def test_an_episode_starts_from_the_initial_state_after_set_weights():
    """A model may compute its initial state from its weights: after set_weights, each new
    trajectory starts from the new one (before, the first one was cached for the runner's life)."""
    algo = (cairn.PPOConfig().environment(make_cue_recall, env_config={"delay": 2})
            .env_runners(num_envs_per_env_runner=2)
            .training(train_batch_size=12, minibatch_size=6, num_epochs=1,
                      model={"custom_model": LearnedStartGRU,
                             "custom_model_config": {"width": 4, "h0": 0.25}, "max_seq_len": 3})
            .debugging(seed=0).build())
    try:
        runner, policy = algo.env_runner_group.local, algo.get_policy()
        batch = runner.sample(3)["default_policy"]  # episodes of 3 steps: each env's first
        np.testing.assert_array_equal(batch["state_in_0"][[0, 3]], np.full((2, 4), 0.25, np.float32))
        weights = policy.get_weights()
        weights["h0"] = np.full(4, -0.75, np.float32)
        policy.set_weights(weights)
        batch = runner.sample(3)["default_policy"]  # each env's second episode
        np.testing.assert_array_equal(batch["state_in_0"][[0, 3]], np.full((2, 4), -0.75, np.float32))
        assert not np.array_equal(batch["state_in_0"][1], np.full(4, -0.75, np.float32))  # carried on
    finally:
        algo.stop()
