"""A learner keeps its copy of each policy between updates (cairn.learners.policy_sync): only the
weights come back per update, the rest once per iteration, and the driver's state goes out again
only when the driver changed it. Run through the device-learner path with device="cpu" (what a
GPU learner in the driver's process does), it must equal learning on the driver's own policies
bit for bit, for PPO (an LSTM policy's sequence learner too), DQN (whose target syncs write the
driver's target network mid-iteration) and SAC (a learn call per gradient step), also across a
driver-side change between iterations."""

import numpy as np
import pytest

import cairn
from cairn.learners.actor import LearnerActor
from tests.helpers import assert_trees_equal


def ppo() -> cairn.AlgorithmConfig:
    return (cairn.PPOConfig().environment("CartPole-v1")
            .training(train_batch_size=128, minibatch_size=50, num_epochs=2, model={"hidden": [16, 16]})
            .debugging(seed=3))


def dqn() -> cairn.AlgorithmConfig:
    return (cairn.DQNConfig().environment("CartPole-v1")
            .training(train_batch_size=64, minibatch_size=16, num_steps_sampled_before_learning_starts=32,
                      target_network_update_freq=24, update_backend="torch", model={"hidden": [16]})
            .env_runners(rollout_fragment_length=8).debugging(seed=1))


def lstm_ppo() -> cairn.AlgorithmConfig:
    return (cairn.PPOConfig().environment("CartPole-v1")
            .training(train_batch_size=128, minibatch_size=50, num_epochs=2,
                      model={"hidden": [16], "use_lstm": True, "lstm_cell_size": 8, "max_seq_len": 10})
            .debugging(seed=4))


def sac() -> cairn.AlgorithmConfig:
    return (cairn.SACConfig().environment("Pendulum-v1")
            .training(train_batch_size=48, minibatch_size=16, num_steps_sampled_before_learning_starts=32,
                      model={"hidden": [16, 16]})
            .debugging(seed=2))


class CountingLearner(LearnerActor):
    """A device learner on the CPU that counts the driver states it is sent."""

    states_received = 0
    updates = 0

    def update(self, fn, policy_id, state, inputs):
        self.updates += 1
        self.states_received += state is not None
        return super().update(fn, policy_id, state, inputs)


@pytest.mark.parametrize("make_config", [ppo, lstm_ppo, dqn, sac], ids=["ppo", "lstm-ppo", "dqn", "sac"])
def test_learner_copies_equal_learning_in_place_and_travel_only_when_changed(make_config) -> None:
    direct, copied = make_config().build(), make_config().build()
    try:
        learner = copied.learner_group.device_learner = CountingLearner(copied.config, device="cpu")
        for _ in range(2):
            direct.train()
            copied.train()
        assert_trees_equal(copied.get_state(), direct.get_state())
        # Only the first update sent the driver's state (DQN: also after each target sync).
        target_syncs = int(copied.get_policy().last_target_update // 24) if make_config is dqn else 0
        assert learner.updates > 1
        assert learner.states_received <= 1 + target_syncs < learner.updates
        # A change on the driver between iterations reaches the learners' copy.
        for algo in (direct, copied):
            policy = algo.get_policy()
            policy.set_weights({k: np.full_like(v, 0.01) for k, v in policy.get_weights().items()})
        received = learner.states_received
        direct.train()
        copied.train()
        assert learner.states_received > received
        assert_trees_equal(copied.get_state(), direct.get_state())
    finally:
        direct.stop()
        copied.stop()


def test_a_save_inside_an_iteration_takes_what_the_learners_learned(tmp_path) -> None:
    # training_step() without train()'s closing sync (a callback or an interrupted iteration):
    # a save still holds the learners' optimizer state, through the one save path.
    from cairn.algorithms.checkpointing import save_algorithm

    direct, copied = sac().build(), sac().build()
    try:
        copied.learner_group.device_learner = LearnerActor(copied.config, device="cpu")
        for algo in (direct, copied):
            algo.train()
            algo.training_step()
        path = save_algorithm(copied, tmp_path / "ckpt")
        with pytest.warns(cairn.errors.ReplayBufferNotRestoredWarning):
            restored = cairn.Algorithm.from_checkpoint(path)
        try:
            want = direct.get_policy().get_state()
            assert_trees_equal(restored.get_policy().get_state()["optimizer"], want["optimizer"])
        finally:
            restored.stop()
    finally:
        direct.stop()
        copied.stop()
