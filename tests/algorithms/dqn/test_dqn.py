"""DQN: config, policy state, training loop, multi-agent, replay-buffer checkpoint component."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch

import cairn
from cairn import Algorithm, DQNConfig
from cairn.algorithms.dqn import DQN, DQNPolicy
from cairn.algorithms.dqn.dqn_policy import epsilon_at
from cairn.algorithms.dqn.model import QNetwork
from cairn.cli import main as cli_main
from cairn.config.algorithm_config import AlgorithmConfig
from cairn.envs import MultiAgentCartPole
from cairn.errors import ConfigError
from cairn.policy.policy import Policy
from cairn.registry import register_env, resolve_class
from cairn.replay import PrioritizedReplayBuffer


def small_config(**training: Any) -> AlgorithmConfig:
    settings = {"train_batch_size": 100, "num_steps_sampled_before_learning_starts": 50,
                "minibatch_size": 16, "model": {"hidden": [16]}, **training}
    return (DQNConfig().environment("CartPole-v1").debugging(seed=0)
            .env_runners(rollout_fragment_length=4).training(**settings))


# ---------------------------------------------------------------------------------- config
def test_dqn_resolves_by_name_and_pairs_with_its_config() -> None:
    assert resolve_class("DQN", Algorithm) is DQN
    assert DQN.config_class is DQNConfig and DQNConfig.algo_class_name == "DQN"
    assert cairn.DQN is DQN and "DQNConfig" in cairn.__all__


def test_replay_buffer_config_merges_and_round_trips_through_dict() -> None:
    config = DQNConfig().environment("CartPole-v1").training(replay_buffer_config={"type": "prioritized"})
    config = config.training(replay_buffer_config={"capacity": 123})
    config.checkpointing(store_replay_buffer=True)
    assert config.replay_buffer_config["type"] == "prioritized"  # type: ignore[attr-defined]
    assert config.replay_buffer_config["capacity"] == 123  # type: ignore[attr-defined]
    again = AlgorithmConfig.from_dict(config.to_dict())
    assert isinstance(again, DQNConfig) and again.to_dict() == config.to_dict()


@pytest.mark.parametrize("settings", [
    {"epsilon": [[100, 1.0], [50, 0.1]]},
    {"epsilon": [[0, 1.5]]},
    {"replay_buffer_config": {"type": "lifo"}},
    {"replay_buffer_config": {"size": 10}},
    {"n_step": 0},
    {"td_error_loss_fn": "l1"},
    {"training_intensity": 0},
    {"update_backend": "jax"},
])
def test_invalid_settings_raise_config_error(settings: dict[str, Any]) -> None:
    with pytest.raises(ConfigError):
        DQNConfig().training(**settings)


def test_store_replay_buffer_is_a_checkpointing_setting() -> None:
    assert DQNConfig().checkpointing(store_replay_buffer=True).store_replay_buffer is True  # type: ignore[attr-defined]
    with pytest.raises(ConfigError, match=r"Unknown training\(\) setting 'store_replay_buffer'"):
        DQNConfig().training(store_replay_buffer=True)


def test_non_discrete_action_space_is_refused() -> None:
    with pytest.raises(ConfigError, match="Discrete"):
        DQNConfig().environment("Pendulum-v1").build()


# ---------------------------------------------------------------------------------- policy
def test_epsilon_schedule_is_piecewise_linear_and_constant_outside() -> None:
    schedule = [[0, 1.0], [100, 0.1], [200, 0.0]]
    assert [epsilon_at(schedule, t) for t in (0, 50, 100, 150, 10_000)] == pytest.approx(
        [1.0, 0.55, 0.1, 0.05, 0.0])


def test_policy_explores_with_epsilon_and_acts_greedily_otherwise() -> None:
    policy = DQNPolicy(gym.spaces.Box(-1, 1, (4,)), gym.spaces.Discrete(3),
                       {"epsilon": [[0, 1.0], [10, 0.0]]}, seed=0)
    obs = np.random.default_rng(0).normal(size=(2000, 4)).astype(np.float32)
    greedy = policy.compute_raw_actions(obs, explore=False)
    np.testing.assert_array_equal(greedy, policy.compute_q_values(obs).argmax(1))
    random_actions = policy.compute_raw_actions(obs, explore=True)  # epsilon 1 at t=0
    assert set(random_actions.tolist()) == {0, 1, 2}
    assert (random_actions != greedy).mean() > 0.5
    policy.global_timestep = 10
    np.testing.assert_array_equal(policy.compute_raw_actions(obs, explore=True), greedy)
    assert policy.epsilon == 0.0


def test_policy_state_carries_target_network_and_epsilon_and_restores_without_init(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    policy = DQNPolicy(gym.spaces.Box(-1, 1, (4,)), gym.spaces.Discrete(2), seed=0)
    for p in policy.model.parameters():  # make online and target differ
        p.data.add_(0.5)
    policy.global_timestep = 5000
    policy.compute_raw_actions(np.zeros((1, 4), np.float32), explore=True)
    state = policy.get_state()
    assert state["exploration"]["epsilon"] == pytest.approx(epsilon_at(policy.config["epsilon"], 5000))

    def no_init(self: QNetwork, generator: Any) -> None:
        raise AssertionError("restoring must not run random initialisation")

    monkeypatch.setattr(QNetwork, "reset_parameters", no_init)
    restored = Policy.from_state(state)
    assert isinstance(restored, DQNPolicy)
    for name, value in state["target"]["weights"].items():
        np.testing.assert_array_equal(restored.target_model.state_dict()[name].numpy(), value)
    for name, value in state["weights"].items():
        np.testing.assert_array_equal(restored.model.state_dict()[name].numpy(), value)
    assert not np.array_equal(state["weights"]["advantage_head.bias"],
                              state["target"]["weights"]["advantage_head.bias"])
    assert restored.epsilon == policy.epsilon


def test_restore_takes_the_configs_epsilon_schedule(tmp_path: Path) -> None:
    """``config_overrides={"epsilon": ...}`` on restore is the schedule the policy acts with,
    not only the one the algorithm's config shows (it was silently the stored one)."""
    algo = small_config(epsilon=[[0, 1.0]]).build()
    try:
        path = algo.save(tmp_path / "c")
    finally:
        algo.stop()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # no replay buffer in the checkpoint
        restored = Algorithm.from_checkpoint(path, config_overrides={"epsilon": [[0, 0.0]]})
    try:
        policy = restored.get_policy()
        assert restored.config.epsilon == [[0, 0.0]]
        assert policy.config["epsilon"] == [[0, 0.0]] and policy.epsilon == 0.0
        obs = np.random.default_rng(0).uniform(-0.5, 0.5, (64, 4)).astype(np.float32)
        greedy = policy.compute_q_values(obs).argmax(axis=1)
        np.testing.assert_array_equal(policy.compute_actions(obs, explore=True), greedy)
        # The schedule goes into the policy's own checkpoint too.
        assert policy.get_state()["spec"]["config"]["epsilon"] == [[0, 0.0]]
    finally:
        restored.stop()


def test_a_dueling_override_on_restore_is_refused_not_ignored(tmp_path: Path) -> None:
    """``dueling`` shapes the restored network, which keeps its stored heads: an override was
    silently left unapplied (the config said False, the policy kept its dueling heads)."""
    algo = small_config(dueling=True).build()
    try:
        path = algo.save(tmp_path / "c")
    finally:
        algo.stop()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # no replay buffer in the checkpoint
        with pytest.raises(ConfigError, match=r"'dueling'=False.*dueling=True"):
            Algorithm.from_checkpoint(path, config_overrides={"dueling": False})
        Algorithm.from_checkpoint(path, config_overrides={"dueling": True}).stop()


# -------------------------------------------------------------------------------- training
def test_training_intensity_sets_updates_per_sampled_step_and_target_syncs() -> None:
    algo = small_config(training_intensity=8, target_network_update_freq=60).build()
    try:
        result = algo.train()
        policy = algo.get_policy()
        assert isinstance(policy, DQNPolicy)
        # Rounds of 4 steps; learning starts with the round that reaches 50 steps (ending at
        # 52), so 13 rounds of 4 sampled steps earn 8/16 updates per step.
        assert policy.num_grad_updates == 26
        assert result["learners"]["default_policy"]["num_grad_updates"] == 26
        assert len(algo.replay_buffers["default_policy"]) == 100
        # the target was synced at a multiple of 4 (the fragment) once 60 steps passed
        assert policy.last_target_update in (60, 64)
        algo.train()
        assert policy.num_grad_updates == 26 + 50
        assert algo.counters["num_env_steps_trained_lifetime"] == 76 * 16
    finally:
        algo.stop()


def test_target_network_equals_online_network_right_after_a_sync() -> None:
    algo = small_config(target_network_update_freq=4, training_intensity=None).build()
    try:
        algo.train()
        policy = algo.get_policy()
        assert isinstance(policy, DQNPolicy)
        online, target = policy.model.state_dict(), policy.target_model.state_dict()
        for name in online:
            np.testing.assert_array_equal(online[name].numpy(), target[name].numpy())
    finally:
        algo.stop()


def test_n_step_and_prioritized_training_runs_and_updates_priorities() -> None:
    algo = small_config(n_step=3, replay_buffer_config={"type": "prioritized"}).build()
    try:
        stats = algo.train()["learners"]["default_policy"]
        assert np.isfinite(stats["loss"])
        buffer = algo.replay_buffers["default_policy"]
        assert isinstance(buffer, PrioritizedReplayBuffer)
        assert len(set(buffer.tree.leaves(len(buffer)).tolist())) > 1
        assert buffer.columns["n_steps"][: len(buffer)].max() == 3
        rewards = buffer.columns["rewards"][: len(buffer)]
        assert rewards.max() == pytest.approx(1 + 0.99 + 0.99**2, rel=1e-6)
    finally:
        algo.stop()


def _two_agent_cartpole(env_config: dict[str, Any]) -> MultiAgentCartPole:
    return MultiAgentCartPole(num_agents=2)


def _agent_to_policy(agent_id: str, **kwargs: Any) -> str:
    return "p0" if agent_id == "agent_0" else "p1"


def test_multi_agent_policies_each_learn_from_their_own_buffer() -> None:
    register_env("dqn_test_two_cartpoles", _two_agent_cartpole)
    config = small_config().environment("dqn_test_two_cartpoles").multi_agent(
        policies={"p0", "p1"}, policy_mapping_fn=_agent_to_policy)
    algo = config.build()
    try:
        result = algo.train()
        assert sorted(result["learners"]) == ["p0", "p1"]
        assert sorted(algo.replay_buffers) == ["p0", "p1"]
        for pid in ("p0", "p1"):
            policy = algo.get_policy(pid)
            assert isinstance(policy, DQNPolicy) and policy.num_grad_updates > 0
            assert len(algo.replay_buffers[pid]) == policy.global_timestep
    finally:
        algo.stop()


# ------------------------------------------------------------------------ update backend
def test_update_backend_defaults_to_auto_and_round_trips_through_dict() -> None:
    config = DQNConfig()
    assert config.update_backend == "auto"  # type: ignore[attr-defined]
    config.training(update_backend="torch")
    assert AlgorithmConfig.from_dict(config.to_dict()).update_backend == "torch"  # type: ignore[attr-defined]
    old = {k: v for k, v in DQNConfig().to_dict().items() if k != "update_backend"}  # older checkpoints
    assert AlgorithmConfig.from_dict(old).update_backend == "auto"  # type: ignore[attr-defined]


@pytest.mark.parametrize(("backend", "activation", "ran"), [
    ("auto", "relu", "numpy"), ("auto", "tanh", "numpy"), ("auto", "elu", "torch"),
    ("torch", "relu", "torch"), ("numpy", "relu", "numpy"),
])
def test_update_backend_choice_is_honoured_and_reported(
    backend: str, activation: str, ran: str, monkeypatch: pytest.MonkeyPatch,
) -> None:
    import cairn.algorithms.dqn.learn as dqn_module  # where the numpy learn function calls it

    calls = []
    real_update = dqn_module.numpy_dqn_update

    def counted_update(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        return real_update(*args, **kwargs)

    monkeypatch.setattr(dqn_module, "numpy_dqn_update", counted_update)
    algo = small_config(update_backend=backend, model={"hidden": [16], "activation": activation}).build()
    try:
        stats = algo.train()["learners"]["default_policy"]
        assert stats["update_backend"] == ran
        assert stats["num_grad_updates"] > 0
        assert len(calls) == (stats["num_grad_updates"] if ran == "numpy" else 0)
    finally:
        algo.stop()


def test_numpy_backend_refuses_an_unsupported_policy_at_build() -> None:
    with pytest.raises(ConfigError, match=r"update_backend='numpy' cannot train policy 'default_policy': "
                                          r"activation 'elu'.*update_backend='auto'"):
        small_config(update_backend="numpy", model={"hidden": [16], "activation": "elu"}).build()


def test_numpy_backend_refuses_an_optimizer_changed_after_build() -> None:
    algo = small_config(update_backend="numpy").build()
    try:
        policy = algo.get_policy()
        assert isinstance(policy, DQNPolicy)
        policy.optimizer.param_groups[0]["weight_decay"] = 0.01
        with pytest.raises(ConfigError, match="weight_decay=0.01"):
            algo.train()
    finally:
        algo.stop()


def test_auto_backend_falls_back_to_torch_for_an_unsupported_optimizer() -> None:
    algo = small_config().build()
    try:
        assert algo.train()["learners"]["default_policy"]["update_backend"] == "numpy"
        policy = algo.get_policy()
        assert isinstance(policy, DQNPolicy)
        policy.optimizer.param_groups[0]["weight_decay"] = 0.01  # seen from the next iteration on
        assert algo.train()["learners"]["default_policy"]["update_backend"] == "torch"
    finally:
        algo.stop()


def test_update_backend_is_restored_and_can_be_overridden_on_restore(tmp_path: Path) -> None:
    algo = small_config(update_backend="numpy").checkpointing(store_replay_buffer=True).build()
    try:
        algo.train()
        path = algo.save(tmp_path / "ckpt")
    finally:
        algo.stop()
    for overrides, ran in ((None, "numpy"), ({"update_backend": "torch"}, "torch")):
        restored = Algorithm.from_checkpoint(path, config_overrides=overrides)
        try:
            assert restored.config.update_backend == ran  # type: ignore[attr-defined]
            assert restored.train()["learners"]["default_policy"]["update_backend"] == ran
        finally:
            restored.stop()


# ---------------------------------------------------------------------------- components
def test_get_state_includes_the_buffer_only_when_asked() -> None:
    algo = small_config().build()
    try:
        algo.train()
        assert algo.get_state()["components"] == {}
        algo.config.checkpointing(store_replay_buffer=True)
        stored = algo.get_state()["components"]["replay_buffer"]["policies"]["default_policy"]
        assert stored["size"] == 100 and len(stored["columns"]["obs"]) == 100
        assert not np.shares_memory(stored["columns"]["obs"],
                                    algo.replay_buffers["default_policy"].columns["obs"])
    finally:
        algo.stop()


def test_checkpoint_with_buffer_restores_it_exactly(tmp_path: Path) -> None:
    algo = small_config(replay_buffer_config={"type": "prioritized"}).checkpointing(
        store_replay_buffer=True).build()
    try:
        algo.train()
        path = algo.save(tmp_path / "ckpt")
    finally:
        algo.stop()
    assert (tmp_path / "ckpt" / "components" / "replay_buffer" / "state.safetensors").exists()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        restored = Algorithm.from_checkpoint(path)
    try:
        assert isinstance(restored, DQN)
        before = algo.replay_buffers["default_policy"]
        after = restored.replay_buffers["default_policy"]
        assert isinstance(after, PrioritizedReplayBuffer) and len(after) == len(before)
        for name, column in before.columns.items():
            np.testing.assert_array_equal(after.columns[name][: len(after)], column[: len(before)])
        np.testing.assert_array_equal(after.tree.sums, before.tree.sums)
        assert restored.counters == algo.counters
    finally:
        restored.stop()


def test_checkpoint_without_buffer_restores_with_a_warning_and_empty_buffer(tmp_path: Path) -> None:
    algo = small_config().build()
    try:
        algo.train()
        path = algo.save(tmp_path / "ckpt")
    finally:
        algo.stop()
    assert not (tmp_path / "ckpt" / "components").exists()
    with pytest.warns(UserWarning, match="empty"):
        restored = Algorithm.from_checkpoint(path)
    try:
        assert restored.replay_buffers == {}  # type: ignore[attr-defined]
        policy = restored.get_policy()
        assert isinstance(policy, DQNPolicy)
        assert policy.last_target_update == algo.get_policy().last_target_update  # type: ignore[attr-defined]
        restored.train()  # refills the buffer and keeps learning
        assert len(restored.replay_buffers["default_policy"]) == 100  # type: ignore[attr-defined]
    finally:
        restored.stop()


def test_cli_trains_dqn(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = cli_main(["train", "--algo", "DQN", "--env", "CartPole-v1", "--stop-iters", "1",
                     "--config", "train_batch_size=64", "--out", str(tmp_path / "run")])
    assert code == 0
    assert "iter    1" in capsys.readouterr().out
    latest = cairn.CheckpointManager(tmp_path / "run" / "checkpoints").latest()
    assert latest is not None and cairn.get_checkpoint_info(latest)["class"] == "DQN"


@pytest.mark.skipif(not torch.cuda.is_available(), reason="torch sees no CUDA device")
def test_a_users_q_networks_targets_are_the_same_on_a_gpu_learner_as_on_the_cpu() -> None:
    """On the CPU the targets run through numpy_q_values (a user's network in eval mode); on a
    GPU learner in torch: also in eval mode, so a Dropout does not make them differ."""
    from cairn.algorithms.dqn.learn import dqn_targets
    from cairn.learners.actor import move_policy
    from tests.models.nets import NoisyQ

    config = cairn.DQNConfig().training(double_q=True, model={"custom_model": NoisyQ})
    space = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)
    policy = DQNPolicy(space, gym.spaces.Discrete(3), config.policy_config("default_policy"), seed=0)
    rng = np.random.default_rng(0)
    sample = {"next_obs": rng.standard_normal((32, 4)).astype(np.float32),
              "rewards": rng.standard_normal(32).astype(np.float32),
              "terminateds": np.zeros(32, bool), "n_steps": np.ones(32, np.int64)}
    on_cpu = dqn_targets(config, policy, sample)
    move_policy(policy, torch.device("cuda"))
    np.testing.assert_allclose(dqn_targets(config, policy, sample), on_cpu, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("schedule", [
    [[-0.5, 1.0], [100, 0.1]],  # a timestep below 0 (the check's start was -1)
    [[0, 1.0], [float("inf"), 0.1]],  # never reached: epsilon stays 1.0 for the whole run
    [[0, 1.0], [float("nan"), 0.1]],
])
def test_epsilon_schedule_timesteps_must_be_finite_and_not_negative(schedule: list[list[float]]) -> None:
    with pytest.raises(ConfigError, match=r"rising finite timesteps >= 0"):
        DQNConfig().training(epsilon=schedule)
