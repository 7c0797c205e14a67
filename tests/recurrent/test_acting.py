"""The acting API of recurrent policies (docs/ppo.md, "Recurrent policies") and its refusals."""

import gymnasium as gym
import numpy as np
import pytest

import cairn
from cairn.errors import ConfigError, ObservationSpaceError

LSTM = {"use_lstm": True, "lstm_cell_size": 8, "max_seq_len": 4}
BOX4 = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)


def lstm_policy(action_space=gym.spaces.Discrete(2), seed=0):
    return cairn.Policy(BOX4, action_space, {"model": LSTM}, seed=seed)


def test_initial_state_is_h_and_c_of_the_cell_size():
    state = lstm_policy().get_initial_state()
    assert [s.shape for s in state] == [(16,), (16,)]  # the actor's LSTM's 8 units, then the critic's
    assert all(s.dtype == np.float32 and not s.any() for s in state)


def test_single_action_threads_the_state_and_the_state_changes_the_action_inputs():
    policy = lstm_policy()
    obs = np.array([0.5, -0.2, 0.1, 0.3], np.float32)
    action, state = policy.compute_single_action(obs, state=policy.get_initial_state(), explore=False)
    assert action in (0, 1) and [s.shape for s in state] == [(16,), (16,)]
    assert np.abs(state[0]).sum() > 0  # the LSTM wrote into h
    # Same observation, other state: other network output (the state is an input).
    _, again = policy.compute_single_action(obs, state=state, explore=False)
    assert not np.array_equal(again[1], state[1])


def test_batched_actions_match_single_ones_row_by_row():
    policy = lstm_policy(gym.spaces.Box(-1.0, 1.0, (2,), np.float32))
    rng = np.random.default_rng(0)
    obs = rng.normal(size=(3, 4)).astype(np.float32)
    h, c = rng.normal(size=(3, 16)).astype(np.float32), rng.normal(size=(3, 16)).astype(np.float32)
    actions, (h_out, c_out) = policy.compute_actions(obs, state=[h, c], explore=False)
    assert actions.shape == (3, 2) and h_out.shape == (3, 16) and c_out.shape == (3, 16)
    for i in range(3):
        action, (h_i, c_i) = policy.compute_single_action(obs[i], state=[h[i], c[i]], explore=False)
        np.testing.assert_allclose(action, actions[i], atol=1e-6)
        np.testing.assert_allclose(h_i, h_out[i], atol=1e-6)
        np.testing.assert_allclose(c_i, c_out[i], atol=1e-6)


def test_wrong_state_shapes_and_missing_state_are_refused():
    policy = lstm_policy()
    with pytest.raises(ObservationSpaceError, match="state has shapes"):
        policy.compute_actions(np.zeros((2, 4), np.float32), state=[np.zeros((1, 8))] * 2)
    with pytest.raises(TypeError, match="state="):
        policy.compute_actions(np.zeros((2, 4), np.float32))



def test_algorithm_compute_single_action_takes_and_returns_the_state():
    """As RLlib's: ``algo.compute_single_action(obs, state=...)`` -> ``(action, state_out)``,
    greedy by default; without ``state`` the error says how to pass it there."""
    from cairn.envs import make_cue_recall

    algo = (cairn.PPOConfig().environment(make_cue_recall, env_config={"delay": 2})
            .training(train_batch_size=32, minibatch_size=16, num_epochs=1, model=LSTM)
            .debugging(seed=0).build())
    try:
        policy = algo.get_policy()
        state = expected = policy.get_initial_state()
        for obs in ([1, 0, 0], [0, 0, 1], [0, 0, 1]):
            action, state = algo.compute_single_action(np.array(obs, np.float32), state=state)
            want, expected = policy.compute_single_action(np.array(obs, np.float32), state=expected,
                                                          explore=False)
            assert action == want
            for got, wanted in zip(state, expected, strict=True):
                np.testing.assert_array_equal(got, wanted)
        fix = r"get_initial_state\(\): compute_single_action\(obs, state=state\)"
        with pytest.raises(TypeError, match=fix):
            algo.compute_single_action(np.array([1, 0, 0], np.float32))
    finally:
        algo.stop()

def test_feed_forward_policy_is_unchanged_and_has_no_state():
    policy = cairn.Policy(BOX4, gym.spaces.Discrete(2), seed=0)
    actions = policy.compute_actions(np.zeros((2, 4), np.float32))
    assert isinstance(actions, np.ndarray) and actions.shape == (2,)
    assert policy.compute_single_action(np.zeros(4, np.float32)) in (0, 1)
    with pytest.raises(TypeError, match="not recurrent"):
        policy.get_initial_state()


@pytest.mark.parametrize("make, match", [
    (lambda: cairn.DQNConfig().environment("CartPole-v1").training(model=LSTM).build(), "only PPO"),
    (lambda: cairn.SACConfig().environment("Pendulum-v1").training(model=LSTM).build(), "only PPO"),
    (lambda: cairn.PPOConfig().training(model={**LSTM, "lstm_cell_size": 0}), "lstm_cell_size"),
    (lambda: cairn.PPOConfig().training(model={**LSTM, "max_seq_len": 1.5}), "max_seq_len"),
    (lambda: cairn.PPOConfig().training(model={**LSTM, "use_lstm": "yes"}), "use_lstm"),
    (lambda: cairn.PPOConfig().training(model={**LSTM, "framework": "keras"}), "torch"),
    (lambda: cairn.PPOConfig().environment("CartPole-v1").training(model=LSTM)
     .learners(num_learners=1).build(), "recurrent"),
])
def test_configs_that_cannot_use_an_lstm_are_config_errors(make, match):
    with pytest.raises(ConfigError, match=match):
        make()


def test_action_masks_and_lstm_are_refused():
    space = gym.spaces.Dict({"observation": BOX4, "action_mask": gym.spaces.Box(0, 1, (2,), np.int8)})
    with pytest.raises(ConfigError, match="action_mask"):
        cairn.Policy(space, gym.spaces.Discrete(2), {"model": LSTM}, seed=0)


def test_turn_based_environments_refuse_recurrent_policies():
    pytest.importorskip("pettingzoo")
    from tests.env_runner.test_aec_envs import TakeTurns

    config = (cairn.PPOConfig().environment(lambda _cfg: TakeTurns())
              .training(model=LSTM, train_batch_size=64, minibatch_size=32)
              .multi_agent(policies={"shared"}, policy_mapping_fn=lambda agent_id, **kwargs: "shared"))
    with pytest.raises(ConfigError, match="turn-based"):
        config.build()


def test_a_recurrent_policy_added_to_a_turn_based_run_is_refused_and_nothing_changes():
    """add_policy checks it as build does: otherwise the policy was added, and the next train()
    failed inside the runner with "LSTMActorCritic is recurrent: call forward(obs, state)"."""
    pytest.importorskip("pettingzoo")
    from cairn.policy.spec import PolicySpec
    from tests.env_runner.test_aec_envs import TakeTurns

    algo = (cairn.PPOConfig().environment(lambda _cfg: TakeTurns())
            .training(train_batch_size=32, minibatch_size=16, num_epochs=1)
            .multi_agent(policies={"shared"}, policy_mapping_fn=lambda agent_id, **kwargs: "shared")
            .debugging(seed=0).build())
    try:
        shared = algo.get_policy("shared")
        spec = PolicySpec(observation_space=shared.observation_space, action_space=shared.action_space,
                          config={"model": LSTM})
        with pytest.raises(ConfigError, match=r"\['mem'\].*turn-based"):
            algo.add_policy("mem", spec, policy_mapping_fn=lambda agent_id, **kwargs: "mem")
        assert set(algo.policies) == {"shared"} and set(algo.config.policies) == {"shared"}
        assert algo.train()["learners"]["shared"]["num_grad_updates"] > 0
    finally:
        algo.stop()


def test_numpy_acting_step_matches_the_torch_forward_also_after_an_update():
    import torch

    policy = cairn.Policy(BOX4, gym.spaces.Box(-1.0, 1.0, (2,), np.float32),
                          {"model": {**LSTM, "hidden": [6]}}, seed=0)
    rng = np.random.default_rng(1)
    obs = rng.normal(size=(5, 4)).astype(np.float32)
    state = [rng.normal(size=(5, 16)).astype(np.float32) for _ in range(2)]

    def compare():
        inputs, (h, c) = policy.model.numpy_step(obs, state)
        with torch.no_grad():
            tensors = [torch.from_numpy(s) for s in state]
            t_inputs, _, (t_h, t_c) = policy.model(torch.from_numpy(obs)[:, None], tensors)
        np.testing.assert_allclose(inputs, t_inputs[:, 0].numpy(), atol=1e-6, rtol=0)
        np.testing.assert_allclose(h, t_h.numpy(), atol=1e-6, rtol=0)
        np.testing.assert_allclose(c, t_c.numpy(), atol=1e-6, rtol=0)

    compare()
    loss = sum(p.sum() for p in policy.model.parameters())  # any gradient: every weight moves
    policy.optimizer.zero_grad()
    loss.backward()
    policy.optimizer.step()
    compare()  # the numpy views see the optimizer's in-place update
