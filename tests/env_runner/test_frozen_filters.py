"""A policy outside ``policies_to_train`` is frozen: it acts, but sampling does not feed its
observation filter, so it keeps normalising (hence acting) as it did when it was frozen, in
every sampler (single-agent, parallel, turn-based) and through remote runners' deltas."""

from __future__ import annotations

import gymnasium as gym
from pettingzoo.classic import tictactoe_v3

import cairn
from cairn.env_runner import EnvRunner
from cairn.env_runner.remote import RemoteEnvRunner
from tests.helpers import assert_trees_equal, small_ma_ppo, small_ppo


def _filter_states(policies: dict) -> dict:
    return {pid: p.observation_filter.get_state() for pid, p in policies.items()}


def _assert_frozen_and_fed(before: dict, policies: dict, *, frozen: str, fed: str) -> None:
    assert_trees_equal(policies[frozen].observation_filter.get_state(), before[frozen])
    assert policies[fed].observation_filter.count > before[fed]["count"]


def test_parallel_multi_agent_feeds_only_the_filters_of_policies_that_learn():
    algo = small_ma_ppo(2).env_runners(observation_filter="MeanStdFilter").multi_agent(
        policies_to_train=["p0"]).build()
    try:
        before = _filter_states(algo.policies)
        algo.train()
        algo.train()
        _assert_frozen_and_fed(before, algo.policies, frozen="p1", fed="p0")
    finally:
        algo.stop()


def test_single_agent_runner_feeds_only_the_filters_of_policies_that_learn():
    # Alternate episodes of the one agent between the two policies: both act in the fragment.
    config = (small_ppo().env_runners(observation_filter="MeanStdFilter", num_envs_per_env_runner=2)
              .environment("CartPole-v1", env_config={"max_episode_steps": 5})
              .multi_agent(policies={pid: _cartpole_spec() for pid in ("learner", "frozen")},
                           policy_mapping_fn=_alternate,
                           policies_to_train=["learner"]))
    algo = config.build()
    try:
        runner = EnvRunner(algo.config, algo.policies)
        before = _filter_states(algo.policies)
        batches = runner.sample(30)
        assert set(batches) == {"learner", "frozen"}  # both acted
        _assert_frozen_and_fed(before, algo.policies, frozen="frozen", fed="learner")
    finally:
        algo.stop()


_episodes = iter(range(10**9))


def _cartpole_spec() -> cairn.PolicySpec:
    env = gym.make("CartPole-v1")
    return cairn.PolicySpec(observation_space=env.observation_space, action_space=env.action_space)


def _alternate(agent_id: str, *args: object, **kwargs: object) -> str:
    return "learner" if next(_episodes) % 2 else "frozen"


def _tictactoe(env_config: dict) -> object:
    return tictactoe_v3.env()


def test_turn_based_runner_feeds_only_the_filters_of_policies_that_learn():
    config = (cairn.PPOConfig().environment(_tictactoe)
              .env_runners(observation_filter="MeanStdFilter")
              .training(train_batch_size=64, minibatch_size=32, num_epochs=1)
              .multi_agent(policies={"p1", "p2"}, policy_mapping_fn=lambda aid, *a, **k: "p" + aid[-1],
                           policies_to_train=["p1"])
              .debugging(seed=0))
    algo = config.build()
    try:
        runner = EnvRunner(algo.config, algo.policies)
        before = _filter_states(algo.policies)
        runner.sample(40)
        _assert_frozen_and_fed(before, algo.policies, frozen="p2", fed="p1")
    finally:
        algo.stop()


def test_a_remote_runner_sends_no_statistics_for_a_frozen_policy():
    algo = small_ma_ppo(2).env_runners(observation_filter="MeanStdFilter").multi_agent(
        policies_to_train=["p0"]).build()
    try:
        remote = RemoteEnvRunner(algo.config, {p: s.get_state() for p, s in algo.policies.items()}, 1)
        broadcast = {pid: {"weights": p.get_weights(), "observation_filter": p.observation_filter.get_state(),
                           "global_timestep": p.global_timestep} for pid, p in algo.policies.items()}
        result = remote.sample(broadcast)
        assert result.filter_deltas["p1"]["count"] == 0
        assert result.filter_deltas["p0"]["count"] > 0
        before = _filter_states(algo.policies)
        result.merge_into(algo.policies)
        _assert_frozen_and_fed(before, algo.policies, frozen="p1", fed="p0")
    finally:
        algo.stop()


def test_a_policy_that_starts_learning_starts_feeding_its_filter():
    algo = small_ma_ppo(2).env_runners(observation_filter="MeanStdFilter").multi_agent(
        policies_to_train=["p0"]).build()
    try:
        algo.train()
        assert algo.get_policy("p1").observation_filter.count == 0
        algo.add_policy("p2", _cartpole_spec(), policies_to_train=["p0", "p1"])
        algo.train()
        assert algo.get_policy("p1").observation_filter.count > 0
        assert algo.get_policy("p2").observation_filter.count == 0  # no agent maps to it
    finally:
        algo.stop()
