"""Exact resume: 2 iterations + save + (new process) restore + 2 iterations == 4 iterations."""

import subprocess
import sys

import pytest

from tests.conftest import ROOT
from tests.helpers import weights_digest

_CONTINUE = """
import sys
sys.path.insert(0, {root!r})
import cairn
from tests.helpers import weights_digest
algo = cairn.Algorithm.from_checkpoint({path!r})
for _ in range(2):
    algo.train()
print(weights_digest(algo), algo.counters["num_env_steps_sampled_lifetime"])
"""

_TD3 = ("cairn.TD3Config().environment('Pendulum-v1').training(train_batch_size=64, minibatch_size=16, "
        "num_steps_sampled_before_learning_starts={starts}, model={model})"
        ".checkpointing(store_replay_buffer=True)"
        ".env_runners(observation_filter='MeanStdFilter').debugging(seed=0)")


@pytest.mark.parametrize(
    "factory",
    ["small_ppo()",
     "small_ppo().env_runners(num_envs_per_env_runner=3, observation_filter='MeanStdFilter')",
     "small_ma_ppo(2)",
     "small_ma_ppo(3).env_runners(num_envs_per_env_runner=2, observation_filter='MeanStdFilter')",
     # Box actions with both normalisers (observation filter in the policy, rewards in `extra`).
     "cairn.PPOConfig().environment('Pendulum-v1').env_runners(num_envs_per_env_runner=2, observation_filter="
     "'MeanStdFilter').training(train_batch_size=128, minibatch_size=64, num_epochs=2, "
     "normalize_rewards=True)"
     ".debugging(seed=0)",
     # TD3 with its own networks, with Keras networks (slow: the fresh process imports Keras),
     # and with a user's actor and critics; its replay buffer stored.
     # Its own networks learn from step 34: 95 gradient steps by the save, which falls between
     # two delayed actor updates.
     _TD3.format(model="{'hidden': [16, 16]}", starts=34),
     pytest.param(_TD3.format(model="{'hidden': [16, 16], 'framework': 'keras'}", starts=32),
                  marks=pytest.mark.slow),
     _TD3.format(model="{'custom_model': 'tests.models.nets:SmallTD3Actor', 'custom_q_model': "
                       "'tests.models.nets:SmallCritic', 'custom_model_config': {'width': 16}}", starts=32)],
    ids=["ppo", "ppo-MeanStdFilter", "ma-ppo", "ma-ppo-MeanStdFilter", "ppo-box-normalizers", "td3",
         "td3-keras", "td3-custom-models"],
)
def test_resume_in_new_process_is_bit_identical(tmp_path, factory):
    from tests import helpers

    config = eval(factory, vars(helpers))  # a literal expression from the parametrize list
    algo = config.build()
    for _ in range(2):
        algo.train()
    path = algo.save(tmp_path / "c")
    for _ in range(2):
        algo.train()
    expected = f"{weights_digest(algo)} {algo.counters['num_env_steps_sampled_lifetime']}"
    out = subprocess.run(
        [sys.executable, "-c", _CONTINUE.format(root=str(ROOT), path=str(path))],
        capture_output=True, text=True, check=True, cwd=ROOT,
    ).stdout.strip()
    assert out == expected


def test_resume_with_eval_runner_state(tmp_path):
    from tests.helpers import small_ppo

    algo = small_ppo().evaluation(evaluation_interval=1, evaluation_duration=2).build()
    algo.train()
    path = algo.save(tmp_path / "c")
    r1 = algo.train()
    import cairn

    r2 = cairn.Algorithm.from_checkpoint(path).train()
    assert r1["evaluation"]["episode_return_mean"] == r2["evaluation"]["episode_return_mean"]
