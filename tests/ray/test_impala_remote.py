"""IMPALA and APPO with two remote env runners on the synchronous path (each sample round
from both runners with the current weights, as PPO's): they train, fragments carry no lag, and
a checkpoint resumes exactly with the same number of runners."""

import math

import pytest

import cairn
from tests.algorithms.impala.small import small
from tests.helpers import weights_digest

pytestmark = pytest.mark.ray


def comparable(result):
    return {k: v for k, v in result.items()
            if k not in ("time_this_iter_s", "env_steps_per_s")
            and not (isinstance(v, float) and math.isnan(v))}


@pytest.mark.parametrize("algo_name", ["IMPALA", "APPO"])
def test_two_remote_runners_train_and_resume_exactly(ray_cluster, tmp_path, algo_name):
    algo = small(algo_name).env_runners(num_env_runners=2).build()
    try:
        result = algo.train()
        assert result["num_healthy_env_runners"] == 2
        # One round: 2 runners x 2 envs x 20 steps = the 80 env steps of a train batch.
        assert result["num_env_steps_sampled_lifetime"] == 80
        assert result["learners"]["default_policy"]["policy_lag_max"] == 0.0
        path = algo.save(tmp_path / "c")
        expected = algo.train()
        expected_weights = weights_digest(algo)
    finally:
        algo.stop()
    restored = cairn.Algorithm.from_checkpoint(path)
    try:
        assert comparable(restored.train()) == comparable(expected)
        assert weights_digest(restored) == expected_weights
    finally:
        restored.stop()
