"""Remote env runners that die (actor killed, process SIGKILLed, env raising in step) are
recreated, left out, or reported, as config.fault_tolerance(...) says."""

import logging
import os
import signal
import threading

import pytest
import ray

import cairn
from cairn.errors import EnvRunnerFailedError
from tests.ray.actors import kill_and_wait
from tests.ray.envs import hold, make_flaky_cartpole, wait_until_held

pytestmark = pytest.mark.ray


def flaky_ppo(**env_config):
    return (cairn.PPOConfig().environment(make_flaky_cartpole, env_config=env_config)
            .training(train_batch_size=128, minibatch_size=64, num_epochs=1)
            .env_runners(num_env_runners=2, observation_filter="MeanStdFilter").debugging(seed=0))


def test_a_killed_and_a_sigkilled_runner_are_recreated_mid_iteration(ray_cluster, tmp_path):
    # Each runner samples 64 steps an iteration; both block at their 81st step (mid-fragment
    # in the second iteration) until they are killed: ordered by files, not by a timer, whose
    # kill could land before sampling began or, on a slow machine, after it ended. Their
    # replacements have new pids and step freely.
    hold_file = tmp_path / "hold"
    algo = flaky_ppo(hold_file=str(hold_file), hold_after_steps=80).build()
    try:
        algo.train()
        first, second = algo.env_runner_group.remote_actors()
        pids = ray.get(first.pid.remote()), ray.get(second.pid.remote())
        hold(hold_file, *pids)
        failed: list[BaseException] = []

        def kill() -> None:
            try:
                wait_until_held(hold_file, *pids)  # both mid-fragment, inside train()
                ray.kill(first)
                os.kill(pids[1], signal.SIGKILL)
            except BaseException as exc:  # shown below; train() then fails on the held runners
                failed.append(exc)

        killer = threading.Thread(target=kill)
        killer.start()
        result = algo.train()
        killer.join()
        assert not failed, failed
        assert result["num_env_runner_restarts"] == 2
        assert result["num_healthy_env_runners"] == 2
        # The iteration kept its batch size, and every counter agrees: nothing was lost.
        assert result["num_env_steps_sampled_lifetime"] == 256
        assert algo.get_policy().global_timestep == 256
        assert algo.get_policy().observation_filter.count >= 256
        new_pids = {ray.get(a.pid.remote()) for a in algo.env_runner_group.remote_actors()}
        assert not new_pids & set(pids) and len(new_pids) == 2
        result = algo.train()
        assert result["num_env_runner_restarts"] == 2 and result["num_env_steps_sampled_lifetime"] == 384
    finally:
        algo.stop()


def test_an_env_raising_in_step_is_recreated_and_the_iteration_completes(ray_cluster, tmp_path, caplog):
    algo = flaky_ppo(fail_marker=str(tmp_path / "failed")).build()
    try:
        with caplog.at_level(logging.WARNING, logger="cairn"):
            result = algo.train()
        assert (tmp_path / "failed").exists()
        assert result["num_env_runner_restarts"] == 1 and result["num_healthy_env_runners"] == 2
        assert result["num_env_steps_sampled_lifetime"] == 128
        assert "it raised RuntimeError: FlakyCartPole: the step that was told to fail" in caplog.text
        assert "recreated it (restart 1 of at most 1000)" in caplog.text
    finally:
        algo.stop()


def test_without_restarts_a_runner_past_its_sample_timeout_fails_train_naming_it(ray_cluster):
    # 50 ms per step: runner 1's 64 steps take over 3 s, past the 1 s sample timeout.
    algo = flaky_ppo(step_sleep_s=0.05).fault_tolerance(
        restart_failed_env_runners=False, sample_timeout_s=1.0).build()
    try:
        with pytest.raises(EnvRunnerFailedError, match=(
                r"worker_index 1 failed in sample\(\): no answer within 1 s\. It was not recreated "
                r"\(restart_failed_env_runners=False")):
            algo.train()
        assert algo.env_runner_group.remote_actors() == []  # both timed out, and were ended
    finally:
        algo.stop()


def test_ignored_failures_leave_the_runner_out_and_keep_the_batch_size(ray_cluster):
    algo = flaky_ppo().fault_tolerance(
        restart_failed_env_runners=False, ignore_env_runner_failures=True).build()
    try:
        kill_and_wait(algo.env_runner_group.remote_actors()[0])
        result = algo.train()
        assert result["num_healthy_env_runners"] == 1 and result["num_env_runner_restarts"] == 0
        assert result["num_env_steps_sampled_lifetime"] == 128  # runner 2 sampled both shares
        kill_and_wait(algo.env_runner_group.remote_actors()[0])
        with pytest.raises(EnvRunnerFailedError, match=r"no healthy remote env runner left"):
            algo.train()
    finally:
        algo.stop()
