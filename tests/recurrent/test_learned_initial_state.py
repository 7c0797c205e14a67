"""A recurrent model whose initial state is a weight (a learned ``h0``) learns it: the learners run
each sequence that opens an episode from the model's initial state as it is now, with its
gradient, not from the copy the env runner recorded (cairn.algorithms.ppo.recurrent.Sequences)."""

import numpy as np
import pytest
import torch

import cairn
from cairn.algorithms.ppo.recurrent import Sequences
from cairn.envs import make_cue_recall
from tests.recurrent.nets import LearnedStartGRU

MODEL = {"custom_model": LearnedStartGRU, "custom_model_config": {"width": 4, "h0": 0.25}, "max_seq_len": 2}


def _config(algo_name: str) -> cairn.AlgorithmConfig:
    config = cairn.PPOConfig() if algo_name == "PPO" else getattr(cairn, f"{algo_name}Config")()
    return (config.environment(make_cue_recall, env_config={"delay": 2})
            .env_runners(num_envs_per_env_runner=2, rollout_fragment_length=6)
            .training(train_batch_size=24, minibatch_size=8, num_epochs=2, model=MODEL)
            .debugging(seed=0))


@pytest.mark.parametrize("algo_name", ["PPO", "IMPALA", "APPO"])
def test_a_learned_initial_state_is_trained(algo_name):
    """Before, the learners started every sequence from the recorded state, a copy without
    gradient: ``h0`` never changed, while the other weights learnt."""
    algo = _config(algo_name).build()
    try:
        policy = algo.get_policy()
        before = policy.get_weights()
        algo.train()
        after = policy.get_weights()
        assert not np.array_equal(before["gru.weight_hh_l0"], after["gru.weight_hh_l0"])
        assert not np.array_equal(before["h0"], after["h0"])
    finally:
        algo.stop()


def test_sequences_that_open_an_episode_start_from_the_initial_state_now():
    algo = _config("PPO").build()
    try:
        policy = algo.get_policy()
        batch = algo.env_runner_group.local.sample(6)["default_policy"]  # episodes of 3 steps
        weights = policy.get_weights()
        weights["h0"] = np.full(4, -0.5, np.float32)  # the weights move on after the rows were acted
        policy.set_weights(weights)
        seqs = Sequences(batch, policy, torch.from_numpy(batch["obs"]))
        # Pieces of 3 steps cut into sequences of 2 and 1: the first of each opens an episode.
        assert seqs.starts.tolist() == [0, 2, 3, 5, 6, 8, 9, 11]
        recorded = batch["state_in_0"]
        np.testing.assert_array_equal(recorded[seqs.starts[::2]], np.full((4, 4), 0.25, np.float32))
        with torch.no_grad():
            inputs, values, rows = seqs.forward(policy.model, np.arange(len(seqs)))
            for k, start in enumerate(seqs.starts):
                # Step by step: from h0 as it is now at an episode's start, else the recorded state.
                h0_now = policy.model.h0[None]
                h = h0_now if batch["firsts"][start] else torch.from_numpy(recorded[start][None])
                for r in range(start, start + int(seqs.lengths[k])):
                    obs = torch.from_numpy(batch["obs"][r])[None, None]
                    step_inputs, step_value, (h,) = policy.model(obs, [h])
                    at = int(np.flatnonzero(rows.numpy() == r)[0])
                    torch.testing.assert_close(inputs[at], step_inputs[0, 0], atol=1e-6, rtol=0)
                    torch.testing.assert_close(values[at], step_value[0, 0], atol=1e-6, rtol=0)
        assert batch["firsts"][seqs.starts].sum() == 4 and not batch["firsts"][seqs.starts[1::2]].any()
    finally:
        algo.stop()
