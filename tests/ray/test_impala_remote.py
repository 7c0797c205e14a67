"""IMPALA and APPO with two remote env runners, which sample asynchronously: they train, and a
checkpoint restores and continues from the saved learner (not bit for bit: the fragments in
flight at the save are not in it, docs/impala.md)."""

import math

import pytest

import cairn
from tests.algorithms.impala.small import small
from tests.helpers import weights_digest

pytestmark = pytest.mark.ray


@pytest.mark.parametrize("algo_name", ["IMPALA", "APPO"])
def test_two_remote_runners_train_save_and_continue_from_the_checkpoint(ray_cluster, tmp_path, algo_name):
    algo = small(algo_name).env_runners(num_env_runners=2).build()
    try:
        result = algo.train()
        assert result["num_healthy_env_runners"] == 2 and result["num_env_runner_fragments_dropped"] == 0
        # Fragments of 2 envs x 20 steps, until the 80 env steps of a train batch are in hand.
        assert result["num_env_steps_sampled_lifetime"] >= 80
        assert result["learners"]["default_policy"]["policy_lag_max"] == 0.0  # all acted by version 0
        path = algo.save(tmp_path / "c")
        saved = {"weights": weights_digest(algo), "counters": dict(algo.counters),
                 "version": algo.weights_version}
    finally:
        algo.stop()
    restored = cairn.Algorithm.from_checkpoint(path)
    try:
        assert weights_digest(restored) == saved["weights"] and dict(restored.counters) == saved["counters"]
        assert restored.weights_version == saved["version"] == 1
        result = restored.train()
        assert result["training_iteration"] == 2 and restored.weights_version == 2
        # The restored runners act with the restored weights, version 1, from the start.
        assert result["learners"]["default_policy"]["policy_lag_max"] == 0.0
        before = saved["counters"]["num_env_steps_sampled_lifetime"]
        assert result["num_env_steps_sampled_lifetime"] >= before + 80
    finally:
        restored.stop()


@pytest.mark.parametrize("algo_name", ["IMPALA", "APPO"])
def test_a_recurrent_policy_trains_on_fragments_of_remote_runners(ray_cluster, algo_name):
    # The runners record the state each row was acted from; the learner cuts the joined fragments
    # into sequences at their ends (each fragment's end is a piece end).
    model = {"hidden": [16], "use_lstm": True, "lstm_cell_size": 8, "max_seq_len": 7}
    algo = small(algo_name, model=model).env_runners(num_env_runners=2).build()
    try:
        results = [algo.train() for _ in range(3)]
        assert results[-1]["num_healthy_env_runners"] == 2 and algo.weights_version == 3
        for result in results:
            stats = result["learners"]["default_policy"]
            assert stats["num_sequences"] >= 80 / 7 and math.isfinite(stats["total_loss"])
        # Every step the learner counted came in a fragment it received, once.
        assert algo.get_policy().global_timestep == results[-1]["num_env_steps_sampled_lifetime"]
    finally:
        algo.stop()


def test_weights_restored_in_place_reach_the_asynchronous_runners_at_once(ray_cluster, tmp_path):
    """``restore_from_path`` of a policy's weights: the next fragments are acted with them,
    also when ``broadcast_interval`` would not broadcast yet (the runners went on with the
    weights before the restore, although the docs promise the next sample's broadcast)."""
    import numpy as np

    # Weights that always choose action 0.
    source = small("IMPALA").build()
    try:
        weights = source.get_policy().get_weights()
        weights["action_head.weight"][:] = 0.0
        weights["action_head.bias"][:] = [50.0, -50.0]
        source.get_policy().set_weights(weights)
        path = source.save(tmp_path / "always_0")
    finally:
        source.stop()
    algo = small("IMPALA", broadcast_interval=2).env_runners(num_env_runners=1).build()
    try:
        algo.train()  # broadcast version 0, learnt: version 1, within the interval of 2
        algo.restore_from_path(path, component="policies/default_policy/weights")
        fragments = algo.sample_fragments()
        actions = np.concatenate([f.batches["default_policy"]["actions"] for f in fragments])
        assert len(actions) >= 80 and (actions == 0).all()
    finally:
        algo.stop()
