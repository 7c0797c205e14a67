"""Exact resume of recurrent PPO saved mid-episode: the env runners' in-flight states are saved."""

import numpy as np
import pytest

import cairn
from cairn.envs import make_cue_recall, make_stateless_cartpole
from cairn.errors import CheckpointFormatError
from tests.helpers import assert_trains_identically, assert_trees_equal, small_ma_ppo

LSTM = {"use_lstm": True, "lstm_cell_size": 8, "max_seq_len": 5}


def _saved_states(state):
    return state["env_runners"][0]["recurrent_states"] if "env_runners" in state else None


def test_single_agent_resume_mid_episode_is_exact(tmp_path):
    config = (cairn.PPOConfig().environment(make_stateless_cartpole).env_runners(num_envs_per_env_runner=2)
              .training(train_batch_size=64, minibatch_size=24, num_epochs=2, model=LSTM).debugging(seed=0))
    algo = config.build()
    for _ in range(2):
        algo.train()
    runner_state = algo.env_runner_group.local.get_state()
    # Both envs mid-episode with a state (in the order their episodes began: seed-dependent).
    assert sorted(e["env"] for e in runner_state["recurrent_states"]) == [0, 1]
    assert all(np.abs(e["state"][0]).sum() > 0 for e in runner_state["recurrent_states"])  # mid-episode
    path = algo.save(tmp_path / "c")
    restored = cairn.Algorithm.from_checkpoint(path)
    assert_trees_equal(restored.env_runner_group.local.get_state(), runner_state)
    assert restored.get_policy().config["model"]["lstm_cell_size"] == 8  # the spec says so, as data
    # Same states after restore, then the same weights, batches' results and states: bit for bit.
    assert_trains_identically(algo, restored, iterations=2)
    a, b = algo.env_runner_group.local.sample(7), restored.env_runner_group.local.sample(7)
    assert_trees_equal(dict(a["default_policy"]), dict(b["default_policy"]))


def test_without_the_saved_states_the_resumed_run_would_differ(tmp_path):
    """The test above can fail: dropping the in-flight states changes the continued run."""
    config = (cairn.PPOConfig().environment(make_cue_recall, env_config={"delay": 4})
              .env_runners(num_envs_per_env_runner=2)
              .training(train_batch_size=64, minibatch_size=32, num_epochs=1, model=LSTM).debugging(seed=0))
    algo = config.build()
    algo.train()
    state = algo.get_state()
    state["env_runners"][0]["recurrent_states"] = []
    other = cairn.Algorithm.from_state(state)
    a, b = algo.env_runner_group.local.sample(3), other.env_runner_group.local.sample(3)
    assert not np.array_equal(a["default_policy"]["state_in_0"], b["default_policy"]["state_in_0"])


def test_multi_agent_resume_is_exact(tmp_path):
    algo = small_ma_ppo(2, model=LSTM, train_batch_size=60, minibatch_size=25).build()
    algo.train()
    assert len(algo.env_runner_group.local.recurrent_states.states) == 2
    restored = cairn.Algorithm.from_checkpoint(algo.save(tmp_path / "c"))
    assert_trains_identically(algo, restored, iterations=2)


def test_in_flight_states_that_do_not_fit_the_policy_are_refused():
    """A state of the wrong shape (an edited checkpoint, another model's run) or one for an
    agent of a feed-forward policy is refused when restored, naming the agent and the shapes,
    instead of failing inside the LSTM at the next step."""
    algo = small_ma_ppo(2, model=LSTM, train_batch_size=60, minibatch_size=25).build()
    plain = small_ma_ppo(2, model={"hidden": [8]}, train_batch_size=60, minibatch_size=25).build()
    try:
        algo.train()
        state = algo.get_state()
        wrong = list(state["env_runners"][0]["recurrent_states"])
        wrong[0] = {**wrong[0], "state": [np.zeros(8, np.float32), wrong[0]["state"][1]]}
        bad = {**state, "env_runners": [{**state["env_runners"][0], "recurrent_states": wrong}]}
        expected = r"shapes \[\(8,\), \(16,\)\] for agent .* expects \[\(16,\), \(16,\)\]"
        with pytest.raises(CheckpointFormatError, match=expected):
            cairn.Algorithm.from_state(bad)
        plain.train()
        runner_state = plain.env_runner_group.local.get_state()
        runner_state["recurrent_states"] = state["env_runners"][0]["recurrent_states"]
        with pytest.raises(CheckpointFormatError, match="not a recurrent policy's agent"):
            plain.env_runner_group.local.set_state(runner_state)
    finally:
        algo.stop()
        plain.stop()
