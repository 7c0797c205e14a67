"""TD3: config validation and SB3's defaults, action-space and model checks, exploration noise,
the random warm-up, learner statistics, and restore-time config overrides."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

import cairn
from cairn.algorithms.td3 import TD3Policy
from cairn.errors import ConfigError, UnsafeCheckpointError

OBS = gym.spaces.Box(-1, 1, (3,), np.float32)
ACT = gym.spaces.Box(np.array([-2.0, 0.0], np.float32), np.array([2.0, 10.0], np.float32))
SMALL = {"train_batch_size": 100, "minibatch_size": 32, "model": {"hidden": [16, 16]},
         "num_steps_sampled_before_learning_starts": 50}


def small_td3(**training: object) -> cairn.TD3Config:
    config = cairn.TD3Config().environment("Pendulum-v1").debugging(seed=0)
    return config.training(**{**SMALL, **training})  # type: ignore[return-value]


@pytest.mark.parametrize(("key", "value", "needle"), [
    ("policy_delay", 0, "'policy_delay'=0"),
    ("target_policy_noise", -0.1, "'target_policy_noise'=-0.1"),
    ("target_noise_clip", -1, "'target_noise_clip'=-1"),
    ("exploration_noise", -0.5, "'exploration_noise'=-0.5"),
])  # and the settings TD3 shares with SAC: tests/algorithms/test_actor_critic_config.py
def test_invalid_settings_raise_config_error_naming_them(key, value, needle):
    with pytest.raises(ConfigError, match=needle):
        cairn.TD3Config().training(**{key: value})


def test_defaults_follow_sb3():
    config = cairn.TD3Config()
    assert (config.lr, config.replay_buffer_config["capacity"],
            config.num_steps_sampled_before_learning_starts, config.minibatch_size, config.tau,
            config.gamma, config.train_freq, config.gradient_steps, config.policy_delay,
            config.target_policy_noise, config.target_noise_clip, config.exploration_noise,
            config.model["hidden"], config.model["activation"]) == (
                1e-3, 1_000_000, 100, 256, 0.005, 0.99, 1, 1, 2, 0.2, 0.5, 0.1, [400, 300], "relu")
    assert cairn.AlgorithmConfig.from_dict(config.to_dict()).to_dict() == config.to_dict()
    policy = TD3Policy(OBS, ACT, seed=0)
    assert [g["name"] for g in policy.optimizer.param_groups] == ["actor", "critic"]
    assert [g["lr"] for g in policy.optimizer.param_groups] == [1e-3, 1e-3]


@pytest.mark.parametrize(("space", "needle"), [
    (gym.spaces.Discrete(3), r"TD3 needs a Box action space, got Discrete\(3\).*DQN.*PPO"),
    (gym.spaces.Box(-np.inf, np.inf, (2,), np.float32), "infinite bounds.*RescaleAction"),
])
def test_unusable_action_spaces_are_refused(space, needle):
    with pytest.raises(ConfigError, match=needle):
        TD3Policy(OBS, space)


@pytest.mark.parametrize(("model", "error", "needle"), [
    ({"activation": "swish"}, ConfigError, "activation"),
    # SAC's actor (mean, log_std) is not a deterministic actor: refused by its base class.
    ({"custom_model": "tests.models.nets:SmallActor"}, UnsafeCheckpointError,
     "not a subclass of cairn.models.TD3ActorModel"),
    ({"framework": "keras", "keras_model": "tests.keras.builders:small_actor_critic"}, ConfigError,
     "not supported by TD3"),
])
def test_unsupported_models_are_refused(model, error, needle):
    with pytest.raises(error, match=needle):
        TD3Policy(OBS, ACT, {"model": model})


def test_exploration_adds_clipped_gaussian_noise_relative_to_the_bounds():
    policy = TD3Policy(OBS, ACT, {"model": {"hidden": [8]}, "exploration_noise": 0.1}, seed=0)
    obs = np.zeros((4000, 3), np.float32)
    greedy = policy.compute_actions(obs[:1], explore=False)[0]
    actions = policy.compute_actions(obs, explore=True)
    half_range = (ACT.high - ACT.low) / 2
    noise = (actions - greedy) / half_range  # back in the [-1, 1] scale
    np.testing.assert_allclose(noise.mean(axis=0), 0.0, atol=0.008)  # 5 standard errors
    np.testing.assert_allclose(noise.std(axis=0), 0.1, rtol=0.06)
    assert ACT.contains(actions[0]) and (actions >= ACT.low).all() and (actions <= ACT.high).all()


def test_initial_random_steps_act_uniformly_then_the_actor_acts():
    policy = TD3Policy(OBS, ACT, {"model": {"hidden": [8]}, "initial_random_steps": 10}, seed=0)
    obs = np.zeros((5000, 3), np.float32)
    uniform = policy.compute_actions(obs, explore=True)
    assert uniform[:, 1].std() == pytest.approx(10 / np.sqrt(12), rel=0.05)  # U(0, 10)
    policy.global_timestep = 10
    assert policy.compute_actions(obs, explore=True)[:, 1].std() < 1.0


def test_training_reports_losses_and_delays_the_actor():
    algo = small_td3(policy_delay=3).build()
    try:
        stats = algo.train()["learners"]["default_policy"]
        assert set(stats) == {"critic_loss", "actor_loss", "q_mean", "target_mean", "num_grad_updates",
                              "replay_buffer_size"}
        assert stats["num_grad_updates"] == 51 and stats["replay_buffer_size"] == 100
        assert np.isfinite(stats["actor_loss"]) and np.isfinite(stats["critic_loss"])
    finally:
        algo.stop()


def test_restore_takes_the_configs_exploration_noise(tmp_path):
    algo = small_td3(exploration_noise=0.3).checkpointing(store_replay_buffer=True).build()
    try:
        path = algo.save(tmp_path / "c")
        restored = cairn.Algorithm.from_checkpoint(path, config_overrides={"exploration_noise": 0.05})
        policy = restored.get_policy()
        assert policy.dist.noise_std == 0.05 and policy.config["exploration_noise"] == 0.05
        assert algo.get_policy().dist.noise_std == 0.3
        restored.stop()
    finally:
        algo.stop()


def test_cli_trains_td3_and_its_run_checkpoint_holds_the_replay_buffer(tmp_path):
    from cairn.cli import main

    run = tmp_path / "run"
    assert main(["train", "--algo", "TD3", "--env", "Pendulum-v1", "--seed", "1", "--config",
                 "train_batch_size=64", "minibatch_size=16", "num_steps_sampled_before_learning_starts=32",
                 "model={\"hidden\": [8]}", "--stop-iters", "2", "--out", str(run), "-q"]) == 0
    checkpoints = sorted(p for p in (run / "checkpoints").iterdir() if p.is_dir())
    info = cairn.get_checkpoint_info(checkpoints[-1])
    assert "components/replay_buffer/state.safetensors" in info["files"]
    restored = cairn.Algorithm.from_checkpoint(checkpoints[-1])
    try:
        assert isinstance(restored, cairn.TD3) and restored.config.model["hidden"] == [8]
    finally:
        restored.stop()


def test_the_policy_refuses_an_exploration_noise_out_of_range_and_keeps_its_own():
    expected = r"'exploration_noise'=-1 is invalid: expected a number in \[0.0, 10.0\]"
    with pytest.raises(ConfigError, match=expected):
        TD3Policy(OBS, ACT, {"exploration_noise": -1}, seed=0)
    policy = TD3Policy(OBS, ACT, {"exploration_noise": 0.2}, seed=0)
    with pytest.raises(ConfigError, match=r"'exploration_noise'=11.0 is invalid"):
        policy.set_exploration_noise(11.0)
    assert policy.config["exploration_noise"] == 0.2 and policy.noisy_actions.noise_std == 0.2
