"""SAC on MuJoCo (the ``[mujoco]`` extra): a few hundred steps of HalfCheetah-v5, then a
checkpoint that restores the policy, its optimizer and the replay buffer as they were and
trains on. (MuJoCo's physics state is not one cairn captures (cairn/env_runner/env_state.py),
so the restored env runner starts fresh episodes, and the two runs part from there.)"""

from __future__ import annotations

import numpy as np

import cairn
from tests.helpers import assert_trees_equal


def test_sac_trains_on_halfcheetah_and_restores(tmp_path, monkeypatch):
    import mujoco  # noqa: F401  (the [mujoco] extra; `make test` installs it)

    # MuJoCo 4 writes a deprecation warning of HalfCheetah's model to ./MUJOCO_LOG.TXT.
    monkeypatch.chdir(tmp_path)

    algo = (cairn.SACConfig().environment("HalfCheetah-v5")
            .training(train_batch_size=200, minibatch_size=32, model={"hidden": [32, 32]}, n_step=2,
                      num_steps_sampled_before_learning_starts=100)
            .checkpointing(store_replay_buffer=True).debugging(seed=0).build())
    restored = None
    try:
        result = algo.train()
        learner = result["learners"]["default_policy"]
        assert learner["num_grad_updates"] == 101 and np.isfinite(learner["critic_loss"])
        action = algo.compute_single_action(np.zeros(17, dtype=np.float32))
        assert action.shape == (6,) and np.all(np.abs(action) <= 1.0)
        restored = cairn.Algorithm.from_checkpoint(algo.save(tmp_path / "c"))
        state, again = algo.get_state(), restored.get_state()
        assert_trees_equal(state["policies"], again["policies"])
        assert_trees_equal(state["components"], again["components"])
        np.testing.assert_array_equal(restored.compute_single_action(np.zeros(17, dtype=np.float32)), action)
        assert restored.train()["learners"]["default_policy"]["num_grad_updates"] == 301
    finally:
        algo.stop()
        if restored is not None:
            restored.stop()
