"""A user's recurrent model (cairn.models.RecurrentActorCriticModel) trains, acts and restores."""

import numpy as np

import cairn
from cairn.envs import make_cue_recall
from tests.helpers import assert_trains_identically
from tests.recurrent.nets import TinyGRU


def gru_config():
    return (cairn.PPOConfig().environment(make_cue_recall, env_config={"delay": 2})
            .env_runners(num_envs_per_env_runner=2)
            .training(train_batch_size=64, minibatch_size=20, num_epochs=2,
                      model={"custom_model": TinyGRU, "custom_model_config": {"width": 6}, "max_seq_len": 3})
            .debugging(seed=0))


def test_custom_recurrent_model_with_one_state_component_trains_and_resumes(tmp_path):
    algo = gru_config().build()
    policy = algo.get_policy()
    assert [s.shape for s in policy.get_initial_state()] == [(6,)]
    cue = np.array([1, 0, 0], np.float32)
    action, state = policy.compute_single_action(cue, state=policy.get_initial_state())
    assert action in (0, 1) and state[0].shape == (6,)
    algo.train()
    stats = algo.train()["learners"]["default_policy"]
    # 64 steps, 2 envs, episodes of 3 steps and max_seq_len 3: one sequence per episode piece.
    assert stats["num_sequences"] >= 64 / 3
    restored = cairn.Algorithm.from_checkpoint(algo.save(tmp_path / "c"))
    assert isinstance(restored.get_policy().model, TinyGRU)
    assert_trains_identically(algo, restored, iterations=1)
