"""SAC resumes exactly: train 2 iterations, save, restore with from_checkpoint; the states are
equal, and stay equal over 2 more iterations of both (as tests/checkpoint/
test_resume_in_process.py checks PPO and DQN). The checkpoint holds the actor, both critics,
both targets, log_alpha, the three optimizer groups, the generators and the replay buffers."""

from __future__ import annotations

import warnings

import pytest

import cairn
from tests.algorithms.sac.multi_agent_pendulum import make_ma_pendulum
from tests.checkpoint.test_resume_in_process import check_storage_alignment
from tests.helpers import assert_trains_identically, assert_trees_equal, map_by_index


def sac(
    filter_name: str, buffer_type: str, multi_agent: bool, *, store: bool = True
) -> cairn.AlgorithmConfig:
    config = (
        cairn.SACConfig()
        .training(train_batch_size=120, minibatch_size=32, model={"hidden": [16, 16]}, n_step=2,
                  train_freq=2, gradient_steps=2, num_steps_sampled_before_learning_starts=60,
                  critic_lr=1e-3, replay_buffer_config={"type": buffer_type, "capacity": 1000})
        .checkpointing(store_replay_buffer=store)
        .env_runners(num_envs_per_env_runner=2, observation_filter=filter_name)
        .debugging(seed=3)
    )
    if multi_agent:
        return config.environment(make_ma_pendulum, env_config={"num_agents": 2}).multi_agent(
            policies={"p0", "p1"}, policy_mapping_fn=map_by_index)
    return config.environment("Pendulum-v1")


CASES = [
    ("NoFilter", "uniform", False),
    ("MeanStdFilter", "prioritized", False),
    ("NoFilter", "uniform", True),
]


@pytest.mark.parametrize(("filter_name", "buffer_type", "multi_agent"), CASES,
                         ids=[f"{f}-{b}-{'ma' if ma else 'sa'}" for f, b, ma in CASES])
def test_restored_sac_has_equal_state_and_trains_identically(tmp_path, filter_name, buffer_type, multi_agent):
    algo = sac(filter_name, buffer_type, multi_agent).build()
    for _ in range(2):
        algo.train()
    restored = cairn.Algorithm.from_checkpoint(algo.save(tmp_path / "c"))
    assert isinstance(restored, cairn.SAC)
    state = algo.get_state()
    assert_trees_equal(state, restored.get_state())
    for policy_id in algo.policies:
        check_storage_alignment(restored.get_policy(policy_id))
        policy_state = state["policies"][policy_id]
        assert {"actor.mean_head.weight", "critic.weights.1", "target_critic.weights.1",
                "log_alpha"} <= set(policy_state["weights"])
        assert [g["name"] for g in policy_state["optimizer"]["param_groups"]] == ["actor", "critic", "alpha"]
    assert_trains_identically(algo, restored)
    algo.stop()
    restored.stop()


def test_checkpoint_without_buffers_restores_with_a_warning(tmp_path):
    algo = sac("NoFilter", "uniform", False, store=False).build()
    algo.train()
    path = algo.save(tmp_path / "c")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        restored = cairn.Algorithm.from_checkpoint(path)
    assert any("store_replay_buffer=True" in str(w.message) for w in caught)
    assert restored.replay_buffers == {}
    assert_trees_equal(algo.get_policy().get_state(), restored.get_policy().get_state())
    restored.train()  # refills its buffer and learns again
    algo.stop()
    restored.stop()
