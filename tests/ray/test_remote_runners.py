"""Remote env runners as Ray actors: the same samples as in-process runners, one broadcast
object per iteration, filter statistics merged into the learner's, metrics from all runners."""

import numpy as np
import pytest

from cairn.env_runner.remote import RemoteEnvRunner
from cairn.policy.filters import MeanStdFilter
from tests.helpers import small_ma_ppo, small_ppo
from tests.ray.actors import kill_and_wait

pytestmark = pytest.mark.ray


def test_filter_deltas_merge_into_the_statistics_of_all_observations():
    rng = np.random.default_rng(0)
    learner, local = MeanStdFilter(3), MeanStdFilter(3)
    seen = rng.normal(2.0, 3.0, size=(50, 3))
    learner.update(seen)
    local.update(seen)
    runners = [MeanStdFilter(3) for _ in range(2)]
    for runner, scale in zip(runners, (1.0, 5.0)):
        runner.set_state(learner.get_state())  # broadcast to the runner
        for _ in range(7):
            batch = rng.normal(-1.0, scale, size=(4, 3))
            runner.update(batch)
            local.update(batch)  # what one process seeing every observation computes
    for runner in runners:
        learner.merge_delta(runner.pop_delta())
    assert learner.count == local.count == 50 + 2 * 7 * 4
    np.testing.assert_allclose(learner.mean, local.mean, rtol=1e-12)
    np.testing.assert_allclose(learner.m2, local.m2, rtol=1e-12)


def test_two_remote_runners_sample_what_two_in_process_runners_sample(ray_cluster):
    config = small_ppo(train_batch_size=64).env_runners(
        num_env_runners=2, num_envs_per_env_runner=2, observation_filter="MeanStdFilter")
    algo = config.build()
    try:
        group = algo.env_runner_group
        assert len(group.remote_actors()) == 2
        initial = {pid: p.get_state() for pid, p in algo.policies.items()}
        broadcast = {  # what the group puts into the object store
            pid: {"weights": p.get_weights(), "observation_filter": p.observation_filter.get_state(),
                  "global_timestep": p.global_timestep} for pid, p in algo.policies.items()}
        batches, episodes, steps = group.sample()
        assert steps == 64 and len(batches["default_policy"]) == 64

        # The same config, seeds and policy states, sampled in this process by worker_index.
        local = [RemoteEnvRunner(algo.config, initial, worker_index=i).sample(broadcast) for i in (1, 2)]
        expected = np.concatenate([r.batches["default_policy"]["obs"] for r in local])
        np.testing.assert_array_equal(batches["default_policy"]["obs"], expected)
        np.testing.assert_array_equal(
            batches["default_policy"]["actions"],
            np.concatenate([r.batches["default_policy"]["actions"] for r in local]))
        # The behaviour logps are taken in the runner that acted, and travel with the rows.
        np.testing.assert_array_equal(
            batches["default_policy"]["action_logp"],
            np.concatenate([r.batches["default_policy"]["action_logp"] for r in local]))
        assert episodes == [e for r in local for e in r.episodes]

        # The learner's filter: its own state, with each runner's statistics merged in order.
        merged = MeanStdFilter(4)
        merged.set_state(initial["default_policy"]["observation_filter"])
        for r in local:
            merged.merge_delta(r.filter_deltas["default_policy"])
        learner_filter = algo.get_policy().observation_filter
        assert learner_filter.count == merged.count >= 64  # resets and final observations count too
        np.testing.assert_array_equal(learner_filter.mean, merged.mean)
        np.testing.assert_array_equal(learner_filter.m2, merged.m2)
        # The two runners draw their own actions: copies of one policy state must not share
        # one action-sampling stream.
        assert not np.array_equal(local[0].batches["default_policy"]["actions"],
                                  local[1].batches["default_policy"]["actions"])
        result = algo.train()
        assert result["num_healthy_env_runners"] == 2 and result["num_env_runner_restarts"] == 0
        assert result["num_env_steps_sampled_lifetime"] == 64  # group.sample() above is not counted
    finally:
        algo.stop()


@pytest.mark.slow
def test_two_remote_runners_learn_cartpole_as_the_local_runner_does(ray_cluster):
    def learn(num_env_runners):
        algo = small_ppo(train_batch_size=1000, minibatch_size=100, num_epochs=6, lr=1e-3).env_runners(
            num_env_runners=num_env_runners).build()
        try:
            for _ in range(15):
                result = algo.train()
            return result["episode_return_mean"]
        finally:
            algo.stop()

    # Measured: 124 in-process and 116 with two runners (both start at 21, the same curve).
    local, remote = learn(0), learn(2)
    assert local > 90 and remote > 90 and remote > 0.75 * local, (local, remote)


def test_remote_runners_follow_an_added_policy(ray_cluster):
    algo = small_ma_ppo(2, train_batch_size=128).env_runners(num_env_runners=2).build()
    try:
        algo.train()
        algo.add_policy("p2", algo.get_policy("p0").spec,
                        policy_mapping_fn={"agent_0": "p2", "agent_1": "p1"})
        before = algo.get_policy("p2").get_weights()
        # The episodes in flight end with p0 (RLlib's rule); the next ones map agent_0 to p2.
        assert "p2" in algo.train()["learners"]
        assert set(algo.train()["learners"]) == {"p1", "p2"}
        after = algo.get_policy("p2").get_weights()
        assert any(not np.array_equal(before[k], after[k]) for k in before)
        # A runner killed before the change is recreated with the new policies and mapping.
        kill_and_wait(algo.env_runner_group.remote_actors()[1])
        algo.remove_policy("p0", policy_mapping_fn={"agent_0": "p2", "agent_1": "p1"})
        result = algo.train()
        assert result["num_env_runner_restarts"] == 1 and result["num_healthy_env_runners"] == 2
        assert set(result["learners"]) == {"p1", "p2"}
    finally:
        algo.stop()


def test_the_learners_dqn_epsilon_follows_the_remote_runners_steps(ray_cluster):
    """The learner's DQN policy never acts with remote runners: its epsilon (reported in
    results, held in its state) is the schedule's at the steps they sampled for it, not the
    schedule's start."""
    import cairn
    from cairn.algorithms.dqn.dqn_policy import epsilon_at

    schedule = [[0, 1.0], [128, 0.0]]
    algo = (cairn.DQNConfig().environment("CartPole-v1")
            .env_runners(num_env_runners=1, rollout_fragment_length=32)
            .training(train_batch_size=64, minibatch_size=16, num_steps_sampled_before_learning_starts=32,
                      epsilon=schedule, model={"hidden": [8]}).debugging(seed=0).build())
    try:
        for expected_steps in (64, 128):
            result = algo.train()
            policy = algo.get_policy()
            assert policy.global_timestep == expected_steps
            expected = epsilon_at(schedule, expected_steps)
            assert result["learners"]["default_policy"]["epsilon"] == pytest.approx(expected)
            assert policy.epsilon == pytest.approx(expected)
            assert policy.get_state()["exploration"]["epsilon"] == pytest.approx(expected)
        assert expected == 0.0
    finally:
        algo.stop()


def test_remote_runners_act_with_the_exploration_noise_the_learners_policy_was_set_to(ray_cluster):
    """TD3's ``set_exploration_noise`` during training reaches the remote runners' copies of the
    policy with the next broadcast, not only after a save and restore (which builds them again
    from the policy's state): the run acts with the noise its checkpoints say it acts with."""
    import cairn

    algo = (cairn.TD3Config().environment("Pendulum-v1").env_runners(num_env_runners=1)
            .training(train_batch_size=64, minibatch_size=16, exploration_noise=0.5, train_freq=32,
                      num_steps_sampled_before_learning_starts=0, model={"hidden": [8]})
            .debugging(seed=0).build())
    try:
        policy = algo.get_policy()
        noisy = algo.env_runner_group.sample()[0]["default_policy"]
        assert np.abs(noisy["actions"] - policy.compute_raw_actions(noisy["obs"], explore=False)).max() > 0.1
        policy.set_exploration_noise(0.0)
        batch = algo.env_runner_group.sample()[0]["default_policy"]
        deterministic = policy.compute_raw_actions(batch["obs"], explore=False)
        np.testing.assert_allclose(batch["actions"], deterministic, rtol=0, atol=1e-6)  # no noise
    finally:
        algo.stop()
