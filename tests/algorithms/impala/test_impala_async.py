"""IMPALA/APPO with remote env runners sample asynchronously (cairn.env_runner.async_sampler):
the learner learns from fragments acted by older weights and reports the lag, a runner killed
mid-train() is recreated and the run goes on, and APPO learns CartPole so."""

from __future__ import annotations

import threading

import pytest
import ray

from tests.algorithms.impala.small import small, steps_to_bar
from tests.helpers import learning_seed
from tests.ray.envs import make_flaky_cartpole

pytestmark = [pytest.mark.ray, pytest.mark.slow]


def test_fragments_lag_and_a_runner_killed_mid_train_is_recreated(ray_cluster, tmp_path):
    # 10 ms a step: a fragment (20 steps of 2 envs) takes over 0.4 s; a train batch is 2 of them.
    algo = (small("APPO", train_batch_size=80)
            .environment(make_flaky_cartpole, env_config={"step_sleep_s": 0.01})
            .env_runners(num_env_runners=2).build())
    try:
        first = algo.train()
        assert first["learners"]["default_policy"]["policy_lag_max"] == 0  # all acted by version 0
        # The runners sampled on while the learner learnt: the next iteration starts with their
        # fragments of version 0, while the learner is at version 1.
        second = algo.train()
        assert second["learners"]["default_policy"]["policy_lag_max"] == 1
        assert algo.weights_version == 2

        victim = algo.env_runner_group.remote_actors()[0]
        threading.Timer(0.1, lambda: ray.kill(victim)).start()  # mid-fragment, inside train()
        third = algo.train()
        assert third["num_env_runner_restarts"] == 1 and third["num_healthy_env_runners"] == 2
        assert third["num_env_runner_fragments_dropped"] == 1  # the fragment it was sampling
        assert third["num_env_steps_sampled_lifetime"] >= 3 * 80
        assert victim not in algo.env_runner_group.remote_actors()
        fourth = algo.train()
        assert fourth["training_iteration"] == 4 and algo.weights_version == 4
        # Every step the learner counted came in a fragment it received, once.
        assert algo.get_policy().global_timestep == fourth["num_env_steps_sampled_lifetime"]

        # A restore in place drops the fragments in flight (acted by version 3, before the
        # restore) and sends the restored weights anew: the next batch is all of version 4.
        algo.restore(algo.save(str(tmp_path / "ckpt")))
        assert algo.env_runner_group.broadcast_version is None
        fifth = algo.train()
        assert fifth["learners"]["default_policy"]["policy_lag_max"] == 0 and algo.weights_version == 5
    finally:
        algo.stop()


def test_appo_learns_cartpole_with_two_remote_runners(ray_cluster):
    first, points = steps_to_bar("APPO", learning_seed(0), bar=475.0, budget=100_000, eval_every=2_000,
                                 num_env_runners=2)
    assert first is not None, f"APPO, 2 remote runners: greedy returns {points} never reached 475 in 100k"
