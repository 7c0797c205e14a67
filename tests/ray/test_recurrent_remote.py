"""Recurrent PPO with a remote Ray env runner: the runner carries the LSTM states, and the
learner trains on its sequences."""

import numpy as np
import pytest

import cairn
from cairn.envs import make_cue_recall

pytestmark = pytest.mark.ray


def test_remote_runner_samples_recurrent_sequences(ray_cluster):
    config = (cairn.PPOConfig().environment(make_cue_recall, env_config={"delay": 4})
              .training(train_batch_size=128, minibatch_size=40, num_epochs=1,
                        model={"use_lstm": True, "lstm_cell_size": 8, "max_seq_len": 5})
              .env_runners(num_env_runners=1, num_envs_per_env_runner=2).debugging(seed=0))
    algo = config.build()
    try:
        result = algo.train()
        assert result["num_healthy_env_runners"] == 1
        # Per env 64 steps: 12 episodes of 5 steps and 4 steps of a 13th (in flight at the end).
        assert result["learners"]["default_policy"]["num_sequences"] == 2 * 13
        import ray

        runner_state = ray.get(algo.env_runner_group.remote_actors()[0].get_state.remote())
        states = runner_state["recurrent_states"]
        # The actor's and the critic's LSTM, 8 units each.
        assert [e["env"] for e in states] == [0, 1] and states[0]["state"][0].shape == (16,)
    finally:
        algo.stop()
    assert np.isfinite(result["episode_return_mean"])
