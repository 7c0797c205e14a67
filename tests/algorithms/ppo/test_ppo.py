import json
import math
import subprocess
import sys

import gymnasium as gym
import numpy as np
import pytest

import cairn
from cairn.errors import ConfigError
from tests.conftest import ROOT
from tests.helpers import small_ma_ppo, small_ppo

RESULT_KEYS = {
    "training_iteration", "num_env_steps_sampled_lifetime", "num_episodes_lifetime",
    "episode_return_mean", "episode_len_mean", "time_this_iter_s", "learners",
}


def test_train_reports_results(ppo_algo):
    result = ppo_algo.train()
    assert RESULT_KEYS <= set(result)
    assert result["training_iteration"] == 1
    assert result["num_env_steps_sampled_lifetime"] == 128
    stats = result["learners"]["default_policy"]
    assert stats["num_grad_updates"] == 4  # 2 epochs x 2 minibatches
    assert math.isfinite(stats["policy_loss"]) and math.isfinite(stats["vf_loss"])
    assert ppo_algo.train()["num_env_steps_sampled_lifetime"] == 256


def test_evaluate_runs_greedy_episodes(ppo_algo):
    result = small_ppo().evaluation(evaluation_duration=3, evaluation_interval=1).build().train()
    assert result["evaluation"]["num_episodes"] == 3
    assert ppo_algo.evaluate()["episode_len_mean"] >= 1


def test_vectorised_envs_and_box_actions():
    algo = (cairn.PPOConfig().environment("Pendulum-v1")
            .env_runners(num_envs_per_env_runner=4, observation_filter="MeanStdFilter")
            .training(train_batch_size=256, minibatch_size=64, num_epochs=1).debugging(seed=0).build())
    result = algo.train()
    assert result["num_env_steps_sampled_lifetime"] == 256
    action = algo.compute_single_action(np.zeros(3, np.float32))
    assert algo.get_policy().action_space.contains(action)
    assert algo.get_policy().observation_filter.count == 256 + 4


def test_multi_agent_trains_each_policy(ma_algo):
    result = ma_algo.train()
    assert set(result["learners"]) == {"p0", "p1", "p2"}
    assert set(result["policy_episode_return_mean"]) <= {"p0", "p1", "p2"}


def test_policies_to_train_freezes_others():
    algo = small_ma_ppo(2).multi_agent(policies_to_train=["p0"]).build()
    before = algo.get_policy("p1").get_weights()
    result = algo.train()
    assert set(result["learners"]) == {"p0"}
    after = algo.get_policy("p1").get_weights()
    assert all(np.array_equal(before[k], after[k]) for k in before)


def test_add_and_remove_policy(ma_algo):
    ma_algo.train()
    spec = cairn.PolicySpec()
    with pytest.raises(ConfigError, match="policy ID"):
        ma_algo.add_policy("bad/id", spec)
    with pytest.raises(ConfigError, match="differ only in case"):
        ma_algo.add_policy("P0", spec)
    new = ma_algo.add_policy(
        "p3", spec, policy_mapping_fn=lambda aid, **kw: "p3" if aid == "agent_2" else "p" + aid[-1])
    assert (new.observation_space == gym.spaces.Box(-np.inf, np.inf, (4,))
            or new.observation_space.shape == (4,))
    # The episodes in flight end with p2 (RLlib's rule); the next ones map agent_2 to p3.
    assert "p3" in ma_algo.train()["learners"]
    assert "p2" not in ma_algo.train()["learners"]
    ma_algo.remove_policy("p2")
    assert "p2" not in ma_algo.policies
    with pytest.raises(ConfigError, match="not one of the policies"):
        ma_algo.remove_policy("p3")  # agent_2 would be left without a policy
    assert "p3" in ma_algo.policies


_SEEDED_RUN = """
import sys, json
sys.path.insert(0, {root!r})
from tests.helpers import small_ppo, small_ma_ppo, weights_digest
algo = ({factory}).build()
for _ in range(3):
    algo.train()
print(json.dumps(weights_digest(algo)))
"""


@pytest.mark.parametrize("factory", ["small_ppo()", "small_ma_ppo(2)"])
def test_seeded_runs_are_bit_identical_across_processes(factory):
    code = _SEEDED_RUN.format(root=str(ROOT), factory=factory)
    outputs = [
        subprocess.run([sys.executable, "-c", code],
                       capture_output=True, text=True, check=True, cwd=ROOT).stdout
        for _ in range(2)
    ]
    assert json.loads(outputs[0]) == json.loads(outputs[1])


def test_different_seeds_differ():
    a, b = small_ppo().build(), small_ppo().debugging(seed=1).build()
    a.train()
    b.train()
    wa, wb = a.get_policy().get_weights(), b.get_policy().get_weights()
    assert not all(np.array_equal(wa[k], wb[k]) for k in wa)


def test_mapping_to_unknown_policy_fails_before_sampling():
    config = small_ma_ppo(2).multi_agent(policy_mapping_fn=lambda aid, **kw: "ghost")
    with pytest.raises(ConfigError, match="'ghost'"):
        config.build()


def test_num_env_runners_without_ray_is_explained(monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_ray(name, *args, **kwargs):
        if name == "ray":
            raise ImportError("no ray")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_ray)
    with pytest.raises(ConfigError, match=r"cairn-rl\[ray\]"):
        small_ppo().env_runners(num_env_runners=2).build()
