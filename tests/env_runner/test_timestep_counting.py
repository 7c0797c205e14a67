"""A policy's ``global_timestep`` counts its rows as they are acted, in every kind of env runner:
DQN's epsilon follows its schedule step by step within a fragment, and SAC's random warm-up
lasts its number of steps, not whole fragments."""

from __future__ import annotations

from typing import Any

import pytest

from cairn import Callbacks, DQNConfig
from cairn.algorithms.dqn.dqn_policy import epsilon_at
from tests.helpers import make_ma_cartpole, map_by_index

SCHEDULE = [[0, 1.0], [100, 0.0]]
#: (policy ID, its global_timestep, its epsilon) at every on_episode_step call.
SEEN: list[tuple[str, int, float]] = []


class RecordEpsilon(Callbacks):
    def on_episode_step(self, *, episode: Any, env_runner: Any) -> None:
        for pid, policy in env_runner.policies.items():
            SEEN.append((pid, policy.global_timestep, policy.epsilon))


@pytest.mark.parametrize("num_envs", [1, 3])
def test_single_agent_epsilon_follows_the_schedule_within_a_fragment(num_envs: int) -> None:
    # One fragment of 40 steps per env: epsilon used to stay at the fragment's first value (1.0)
    # for all of them, and the schedule moved only between fragments.
    algo = (DQNConfig().environment("CartPole-v1").callbacks(RecordEpsilon)
            .env_runners(rollout_fragment_length=40, num_envs_per_env_runner=num_envs)
            .training(train_batch_size=40 * num_envs, minibatch_size=16, epsilon=SCHEDULE,
                      num_steps_sampled_before_learning_starts=10_000, model={"hidden": [8]})
            .debugging(seed=0).build())
    try:
        SEEN.clear()
        algo.train()
        # on_episode_step runs once per env after each step: the counter then holds this step's
        # rows, and epsilon (the schedule's at the counter) is what the next step explores with.
        assert len(SEEN) == 40 * num_envs
        for k, (_, timestep, epsilon) in enumerate(SEEN):
            t = k // num_envs
            assert timestep == (t + 1) * num_envs
            assert epsilon == pytest.approx(epsilon_at(SCHEDULE, timestep))  # what the next step uses
        assert algo.get_policy().global_timestep == 40 * num_envs
    finally:
        algo.stop()


def test_single_and_multi_agent_runners_count_alike() -> None:
    """MultiAgentCartPole (parallel runner) counted as its agents act already: one env, one
    agent, one policy gives the single-agent runner's sequence."""
    def run(config: Any) -> list[tuple[int, float]]:
        algo = config.callbacks(RecordEpsilon).env_runners(rollout_fragment_length=30).training(
            train_batch_size=30, minibatch_size=16, epsilon=SCHEDULE,
            num_steps_sampled_before_learning_starts=10_000, model={"hidden": [8]}).debugging(seed=0).build()
        try:
            SEEN.clear()
            algo.train()
            return [(timestep, epsilon) for _, timestep, epsilon in SEEN]
        finally:
            algo.stop()

    single = run(DQNConfig().environment("CartPole-v1"))
    multi = run(DQNConfig().environment(make_ma_cartpole, env_config={"num_agents": 1})
                .multi_agent(policies={"p0"}, policy_mapping_fn=map_by_index))
    assert len(single) == 30 and single == multi[:len(single)]


def test_sac_acts_at_random_for_exactly_its_warm_up_steps() -> None:
    """SAC's random warm-up (num_steps_sampled_before_learning_starts=20) with fragments of 16
    steps: the policy acts at random for 20 steps, not for whole fragments (32)."""
    from cairn import SACConfig

    algo = (SACConfig().environment("Pendulum-v1")
            .training(train_freq=16, train_batch_size=48, minibatch_size=16,
                      num_steps_sampled_before_learning_starts=20, model={"hidden": [8]})
            .debugging(seed=0).build())
    try:
        policy = algo.get_policy()
        network_rows: list[int] = []
        compute = policy.compute_action_inputs

        def counting(processed_obs: Any) -> Any:
            network_rows.append(len(processed_obs))
            return compute(processed_obs)

        policy.compute_action_inputs = counting  # type: ignore[method-assign]
        algo.train()
        assert policy.global_timestep == 48
        assert sum(network_rows) == 48 - 20
    finally:
        algo.stop()


def test_a_direct_sample_counts_in_the_runner_and_the_policy_not_in_the_algorithm_counters() -> None:
    """A direct ``runner.sample()`` outside ``train()``: its env steps count in the runner's
    ``num_env_steps_sampled`` and the acting policy's ``global_timestep`` (its exploration
    schedule), its finished episodes in the algorithm's episode counters (at the next train()),
    but its steps not in ``num_env_steps_sampled_lifetime`` / ``num_agent_steps_sampled_lifetime``:
    those count the steps train() sampled and drive its batches. Counted, the next PPO
    iteration would stop sampling after one 32-step round (50 + 32 >= 64) and train on half of
    train_batch_size, with no error."""
    from cairn import PPOConfig

    algo = (PPOConfig().environment("CartPole-v1").env_runners(rollout_fragment_length=32)
            .training(train_batch_size=64, minibatch_size=32).debugging(seed=0)).build()
    try:
        algo.train()
        runner, policy = algo.env_runner_group.local, algo.get_policy()
        counters = dict(algo.counters)
        sampled, timestep = runner.num_env_steps_sampled, policy.global_timestep
        runner.sample(50)
        rounds: list[int] = []
        sample_rounds = algo.sample_rounds

        def counted_rounds() -> Any:
            for batches in sample_rounds():
                rounds.append(sum(len(b) for b in batches.values()))
                yield batches

        algo.sample_rounds = counted_rounds  # type: ignore[method-assign]
        algo.train()
        assert rounds == [32, 32]  # a whole train_batch_size of fresh steps
        for key in ("num_env_steps_sampled_lifetime", "num_agent_steps_sampled_lifetime"):
            assert algo.counters[key] - counters[key] == 64, key
        assert runner.num_env_steps_sampled - sampled == 50 + 64
        assert policy.global_timestep - timestep == 50 + 64
    finally:
        algo.stop()
