"""What IMPALA and APPO train beyond CartPole: Box actions, action masks (no illegal action is
ever taken), users' custom models (which resume exactly), and a mapping of two agents."""

from __future__ import annotations

import numpy as np
import pytest

import cairn
from tests.algorithms.impala.small import CONFIGS, small
from tests.helpers import assert_trains_identically
from tests.models.masked_env import make_pick_legal
from tests.models.nets import TwoHeads

ALGOS = ["IMPALA", "APPO"]


def _finite(stats: dict) -> bool:
    return all(np.isfinite(v) for k, v in stats.items() if k != "vf_explained_var")


@pytest.mark.parametrize("algo_name", ALGOS)
def test_box_actions(algo_name):
    algo = (CONFIGS[algo_name]().environment("Pendulum-v1")
            .env_runners(num_envs_per_env_runner=2, rollout_fragment_length=20)
            .training(train_batch_size=80, minibatch_size=40, model={"hidden": [16]})
            .debugging(seed=0).build())
    try:
        stats = algo.train()["learners"]["default_policy"]
        assert _finite(stats) and stats["num_grad_updates"] == 2
    finally:
        algo.stop()


@pytest.mark.parametrize("algo_name", ALGOS)
def test_masked_actions_stay_legal(algo_name):
    algo = (CONFIGS[algo_name]().environment(make_pick_legal)
            .env_runners(num_envs_per_env_runner=2, rollout_fragment_length=20)
            .training(train_batch_size=80, model={"hidden": [16]}).debugging(seed=0).build())
    try:
        for _ in range(2):
            assert _finite(algo.train()["learners"]["default_policy"])
        algo.evaluate(3)
        envs = algo.env_runner_group.local.envs
        assert sum(env.unwrapped.steps for env in envs) > 0
        assert sum(env.unwrapped.illegal for env in envs) == 0
    finally:
        algo.stop()


@pytest.mark.parametrize("algo_name", ALGOS)
def test_custom_model_trains_and_resumes_exactly(algo_name, tmp_path):
    algo = small(algo_name, model={"custom_model": TwoHeads, "custom_model_config": {"width": 8}}).build()
    try:
        algo.train()
        restored = cairn.Algorithm.from_checkpoint(algo.save(tmp_path / "c"))
        assert_trains_identically(algo, restored)
        restored.stop()
    finally:
        algo.stop()


@pytest.mark.slow
@pytest.mark.parametrize("algo_name", ALGOS)
def test_keras_policy_trains_and_resumes_exactly(algo_name, tmp_path):
    training = {"target_network_update_freq": 2} if algo_name == "APPO" else {}
    algo = small(algo_name, **training).framework("keras").build()
    try:
        algo.train()
        if algo_name == "APPO":  # the target network is a copy, not the same variables
            policy = algo.get_policy()
            target = policy.get_state()["target"]["weights"]
            assert any(not np.array_equal(w, target[k]) for k, w in policy.get_weights().items())
        restored = cairn.Algorithm.from_checkpoint(algo.save(tmp_path / "c"))
        assert_trains_identically(algo, restored)
        restored.stop()
    finally:
        algo.stop()


@pytest.mark.parametrize("algo_name", ALGOS)
def test_turn_based_self_play_trains_and_resumes_exactly(algo_name, tmp_path):
    # PettingZoo's tic-tac-toe (AEC, masked actions), both players on one policy: a player's
    # move is learnt once its next turn (or the game's end) closes it, possibly an iteration
    # later, with the log-probability of the weights that made it.
    from tests.env_runner.test_turn_based import make_tictactoe, shared_policy

    algo = (small(algo_name).environment(make_tictactoe)
            .multi_agent(policies={"shared"}, policy_mapping_fn=shared_policy).build())
    try:
        for _ in range(2):
            assert _finite(algo.train()["learners"]["shared"])
        restored = cairn.Algorithm.from_checkpoint(algo.save(tmp_path / "c"))
        assert_trains_identically(algo, restored)
        restored.stop()
    finally:
        algo.stop()
