"""TD3 resumes exactly: train, save, restore with from_checkpoint (no config given); the states
are equal and stay equal over 2 more iterations of both, replay buffers included. The
checkpoint holds the actor, both critics, both targets, both optimizer groups, the generators
(exploration and smoothing noise), the gradient-step count that phases the delayed actor
updates, and the replay buffers. A subset restore reads one policy of two."""

from __future__ import annotations

import warnings

import pytest

import cairn
from tests.algorithms.sac.multi_agent_pendulum import make_ma_pendulum
from tests.checkpoint.test_resume_in_process import check_storage_alignment
from tests.helpers import assert_trains_identically, assert_trees_equal, map_by_index


def td3(filter_name: str, buffer_type: str, multi_agent: bool, *, store: bool = True,
        policy_delay: int = 2, learning_starts: int = 62) -> cairn.AlgorithmConfig:
    config = (
        cairn.TD3Config()
        .training(train_batch_size=120, minibatch_size=32, model={"hidden": [16, 16]}, n_step=2,
                  train_freq=2, gradient_steps=1, policy_delay=policy_delay,
                  num_steps_sampled_before_learning_starts=learning_starts,
                  replay_buffer_config={"type": buffer_type, "capacity": 1000})
        .checkpointing(store_replay_buffer=store)
        .env_runners(num_envs_per_env_runner=2, observation_filter=filter_name)
        .debugging(seed=3)
    )
    if multi_agent:
        return config.environment(make_ma_pendulum, env_config={"num_agents": 2}).multi_agent(
            policies={"p0", "p1"}, policy_mapping_fn=map_by_index)
    return config.environment("Pendulum-v1")


CASES = [
    ("NoFilter", "uniform", False, 3),
    ("MeanStdFilter", "prioritized", False, 2),
    ("NoFilter", "uniform", True, 2),
]


@pytest.mark.parametrize(("filter_name", "buffer_type", "multi_agent", "delay"), CASES,
                         ids=[f"{f}-{b}-{'ma' if ma else 'sa'}-delay{d}" for f, b, ma, d in CASES])
def test_restored_td3_has_equal_state_and_trains_identically(tmp_path, filter_name, buffer_type,
                                                            multi_agent, delay):
    # 240 env steps in rounds of 4 from the warm-up on: 46 gradient steps (warm-up 60) or 45
    # (62), so that the save falls between two actor updates and the restored run must keep
    # the phase of the delayed updates.
    algo = td3(filter_name, buffer_type, multi_agent, policy_delay=delay,
               learning_starts=60 if delay == 3 else 62).build()
    for _ in range(2):
        algo.train()
    assert any(p.num_grad_updates % delay for p in algo.policies.values())
    restored = cairn.Algorithm.from_checkpoint(algo.save(tmp_path / "c"))
    assert isinstance(restored, cairn.TD3)
    state = algo.get_state()
    assert_trees_equal(state, restored.get_state())
    for policy_id in algo.policies:
        check_storage_alignment(restored.get_policy(policy_id))
        policy_state = state["policies"][policy_id]
        assert {"actor.action_head.weight", "critic.weights.1", "target_actor.action_head.weight",
                "target_critic.weights.1"} <= set(policy_state["weights"])
        assert [g["name"] for g in policy_state["optimizer"]["param_groups"]] == ["actor", "critic"]
    assert {pid: len(b) for pid, b in restored.replay_buffers.items()} == \
        {pid: len(b) for pid, b in algo.replay_buffers.items()} and restored.replay_buffers
    assert_trains_identically(algo, restored)
    algo.stop()
    restored.stop()


def test_checkpoint_without_buffers_restores_with_a_warning(tmp_path):
    algo = td3("NoFilter", "uniform", False, store=False).build()
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


def _all_to_p1(agent_id: str, **kwargs: object) -> str:
    return "p1"


def test_subset_restore_reads_one_policy_and_policy_checkpoint_acts(tmp_path):
    algo = td3("NoFilter", "uniform", True).build()
    algo.train()
    path = algo.save(tmp_path / "c")
    subset = cairn.Algorithm.from_checkpoint(path, policy_ids=["p1"], policy_mapping_fn=_all_to_p1)
    try:
        assert set(subset.policies) == {"p1"}
        assert_trees_equal(algo.get_policy("p1").get_state(), subset.get_policy("p1").get_state())
        subset.train()  # both agents now feed p1's buffer and learning goes on
        alone = cairn.Policy.from_checkpoint(path, policy_ids="p1")["p1"]
        obs = [[1.0, 0.0, 0.5], [0.0, 1.0, -2.0]]
        assert (alone.compute_actions(obs, explore=False)
                == algo.get_policy("p1").compute_actions(obs, explore=False)).all()
    finally:
        subset.stop()
        algo.stop()
