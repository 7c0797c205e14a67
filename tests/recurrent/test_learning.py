"""Learning result: PPO with an LSTM remembers a cue that a feed-forward policy cannot.

CueRecall(delay=8): a cue (left/right) is shown at the first step only, and asked for 8 steps
later: +1 for naming it, -1 otherwise. The question looks the same whatever the cue was, so a
feed-forward policy's expected return is exactly 0 whatever it learns.
"""

import pytest

import cairn
from cairn.envs import make_cue_recall
from tests.helpers import learning_seed

BUDGET = 30_720  # env steps
THRESHOLD = 0.9  # greedy return, mean of 100 episodes


def train(model):
    algo = (cairn.PPOConfig().environment(make_cue_recall, env_config={"delay": 8})
            .env_runners(num_envs_per_env_runner=8)
            .training(train_batch_size=512, minibatch_size=128, num_epochs=4, lr=1e-3, model=model)
            .evaluation(evaluation_duration=100)
            .debugging(seed=learning_seed(0)).build())
    while algo.train()["num_env_steps_sampled_lifetime"] < BUDGET:
        pass
    result = algo.evaluate()["episode_return_mean"]
    algo.stop()
    return result


@pytest.mark.slow
def test_lstm_remembers_the_cue_and_the_mlp_cannot():
    # One LSTM read by both heads, the value loss's gradient stopped at it (sb3-contrib's
    # shared_lstm=True): the network this test was tuned on (seeds 0-4, scripts/learning_seeds.sh),
    # the default before vf_share_layers=False gave the critic its own LSTM.
    lstm = {"use_lstm": True, "lstm_cell_size": 32, "max_seq_len": 10, "hidden": [32],
            "vf_share_layers": True, "vf_stop_gradient": True}
    assert train(lstm) >= THRESHOLD
    assert abs(train({"hidden": [64, 64]})) <= 0.3  # chance: +-1 at random
