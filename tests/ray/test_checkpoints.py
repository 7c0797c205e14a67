"""Checkpoints of remote env runners: gathered over Ray, resumed exactly with the same number
of runners, and restored with another number (0 included) by the rule in docs/ray.md."""

import math
import time

import pytest

import cairn
from cairn.checkpoint.reader import load_algorithm_state
from cairn.env_runner import fault_tolerance
from cairn.errors import CairnError
from tests.helpers import assert_trees_equal, small_ppo, weights_digest
from tests.ray.actors import kill_and_wait

pytestmark = pytest.mark.ray


def comparable(result):
    return {k: v for k, v in result.items()
            if k not in ("time_this_iter_s", "env_steps_per_s")
            and not (isinstance(v, float) and math.isnan(v))}


def two_runner_ppo():
    return small_ppo(train_batch_size=128).env_runners(
        num_env_runners=2, num_envs_per_env_runner=2, observation_filter="MeanStdFilter")


def test_a_checkpoint_of_two_runners_resumes_exactly_and_restores_with_zero_and_one(ray_cluster, tmp_path):
    algo = two_runner_ppo().build()
    try:
        algo.train()
        path = algo.save(tmp_path / "c")
        expected = algo.train()
        expected_weights = weights_digest(algo)
    finally:
        algo.stop()
    saved = load_algorithm_state(path)
    assert [s["worker_index"] for s in saved["env_runners"]] == [1, 2]

    restored = cairn.Algorithm.from_checkpoint(path)
    try:
        assert_trees_equal(restored.env_runner_group.get_state(), saved["env_runners"], "env_runners")
        assert comparable(restored.train()) == comparable(expected)
        assert weights_digest(restored) == expected_weights
    finally:
        restored.stop()

    # Another layout: the first runner takes runner 1's state, other runners start fresh.
    for n in (0, 1):
        other = cairn.Algorithm.from_checkpoint(path, config_overrides={"num_env_runners": n})
        try:
            first = other.env_runner_group.get_state()[0]
            assert first["counters"] == saved["env_runners"][0]["counters"]
            assert first["rng"] == saved["env_runners"][0]["rng"]
            result = other.train()
            assert result["training_iteration"] == 2 and result["num_healthy_env_runners"] == n
            assert result["num_env_steps_sampled_lifetime"] == 256
        finally:
            other.stop()


@pytest.mark.slow
def test_a_dead_runner_neither_blocks_save_nor_hangs_a_restore(ray_cluster, tmp_path, monkeypatch):
    algo = two_runner_ppo().build()
    algo.train()
    earlier = algo.save(tmp_path / "earlier")
    kill_and_wait(algo.env_runner_group.remote_actors()[0])  # dead before the save asks it

    # The driver holds policies, optimizers, counters and filters: the save goes through,
    # leaving out only the dead runner's state, and says so.
    with pytest.warns(RuntimeWarning, match=r"worker_index=1 gave no state: its actor died"):
        path = algo.save(tmp_path / "after_death")
    saved = load_algorithm_state(path)
    assert [s["worker_index"] for s in saved["env_runners"]] == [2]

    # The live runner of `algo` still holds one of the cluster's two CPUs, so a second pair of
    # runners cannot start: a clear error within the startup timeout, not a hang.
    monkeypatch.setattr(fault_tolerance, "STARTUP_TIMEOUT_S", 3.0)
    start = time.monotonic()
    with pytest.raises(CairnError, match=r"Not enough free CPUs.*algo\.stop\(\)"):
        cairn.Algorithm.from_checkpoint(earlier)
    assert time.monotonic() - start < 60
    monkeypatch.undo()

    algo.stop()
    restored = cairn.Algorithm.from_checkpoint(path)
    try:
        runner_1, runner_2 = restored.env_runner_group.get_state()
        assert runner_2["counters"] == saved["env_runners"][0]["counters"]  # its own state, by index
        assert runner_1["counters"]["num_env_steps_sampled"] == 0  # started fresh
        assert restored.train()["training_iteration"] == 2
    finally:
        restored.stop()


def test_remote_runners_act_with_the_epsilon_schedule_overridden_on_restore(ray_cluster, tmp_path):
    """The remote runners' copies of a restored DQN policy explore with the schedule of
    ``config_overrides``, as the driver's policy does (they were built with the stored one)."""
    import warnings

    import numpy as np

    algo = (cairn.DQNConfig().environment("CartPole-v1")
            .env_runners(num_env_runners=1, rollout_fragment_length=32)
            .training(train_batch_size=64, epsilon=[[0, 1.0]], model={"hidden": [8]})
            .debugging(seed=0).build())
    try:
        path = algo.save(tmp_path / "c")
    finally:
        algo.stop()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # no replay buffer in the checkpoint
        restored = cairn.Algorithm.from_checkpoint(path, config_overrides={"epsilon": [[0, 0.0]]})
    try:
        batch = restored.env_runner_group.sample()[0]["default_policy"]
        greedy = restored.get_policy().compute_q_values(batch["obs"]).argmax(axis=1)
        np.testing.assert_array_equal(batch["actions"], greedy)  # epsilon 0: every action greedy
    finally:
        restored.stop()


def test_remote_runners_act_with_the_exploration_noise_overridden_on_restore(ray_cluster, tmp_path):
    """TD3's ``config_overrides={"exploration_noise": ...}`` reaches the remote runners' copies
    of the restored policy, not only the driver's (they were built with the stored noise)."""
    import numpy as np

    algo = (cairn.TD3Config().environment("Pendulum-v1")
            .env_runners(num_env_runners=1)
            .training(train_batch_size=64, minibatch_size=16, exploration_noise=0.5, train_freq=32,
                      num_steps_sampled_before_learning_starts=0, model={"hidden": [8]})
            .checkpointing(store_replay_buffer=True).debugging(seed=0).build())
    try:
        path = algo.save(tmp_path / "c")
    finally:
        algo.stop()
    restored = cairn.Algorithm.from_checkpoint(path, config_overrides={"exploration_noise": 0.0})
    try:
        batch = restored.env_runner_group.sample()[0]["default_policy"]
        policy = restored.get_policy()
        deterministic = policy.compute_raw_actions(batch["obs"], explore=False)
        np.testing.assert_allclose(batch["actions"], deterministic, rtol=0, atol=1e-6)  # no noise
    finally:
        restored.stop()
