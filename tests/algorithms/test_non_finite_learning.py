"""A learn step whose loss is NaN or infinite raises NonFiniteLossError before the optimizer
steps (docs/fault-tolerance.md): without the check, the NaN gradients made every weight NaN and
training went on, with no error, until the policy next acted (a checkpoint saved the NaN weights)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch
from torch import nn

import cairn
from cairn.algorithms.dqn.learn import dqn_learn, numpy_dqn_learn
from cairn.errors import NonFiniteLossError, NonFiniteSampleError
from cairn.models import ActorCriticModel


class ScaledRewards(gym.Wrapper):
    """An env whose reward at its ``at``-th step (counted over the env's life) is ``value``, and
    every other reward times ``scale``."""

    def __init__(self, env: gym.Env, at: int, value: float, scale: float) -> None:
        super().__init__(env)
        self.steps, self.at, self.value, self.scale = 0, at, value, scale

    def step(self, action: Any) -> Any:
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.steps += 1
        reward = self.value if self.steps == self.at else float(reward) * self.scale
        return obs, reward, terminated, truncated, info


def make_env(env_config: dict[str, Any]) -> gym.Env:
    return ScaledRewards(gym.make(env_config["id"]), env_config["at"], env_config["value"],
                         env_config.get("scale", 1.0))


def all_finite(policy: cairn.Policy) -> bool:
    return all(np.isfinite(np.asarray(w)).all() for w in policy.get_weights().values())


def same_weights(a: dict[str, Any], b: dict[str, Any]) -> bool:
    return a.keys() == b.keys() and all(np.array_equal(np.asarray(a[k]), np.asarray(b[k])) for k in a)


@pytest.mark.parametrize("config_class", [cairn.PPOConfig, cairn.APPOConfig])
@pytest.mark.parametrize("value", [float("nan"), float("inf")])
def test_a_non_finite_reward_raises_before_stepping_and_training_goes_on(config_class, value, tmp_path: Path):
    config = (config_class().environment(make_env, env_config={"id": "CartPole-v1", "at": 20, "value": value})
              .training(train_batch_size=64, minibatch_size=64, num_epochs=1).debugging(seed=0))
    algo = config.build()
    try:
        policy = algo.get_policy()
        before = policy.get_weights()
        with pytest.raises(NonFiniteLossError, match="policy 'default_policy'") as caught:
            algo.train()
        assert caught.value.policy_id == "default_policy"
        # One minibatch, which raised: nothing stepped.
        assert same_weights(policy.get_weights(), before)
        assert policy.num_grad_updates == 0 and algo.iteration == 0
        result = algo.train()  # the env's non-finite reward is behind it
        assert result["training_iteration"] == 1 and all_finite(policy)
        restored = type(algo).from_checkpoint(algo.save(str(tmp_path / "ckpt")))
        try:
            assert same_weights(restored.get_policy().get_weights(), policy.get_weights())
        finally:
            restored.stop()
    finally:
        algo.stop()


@pytest.mark.parametrize("kind", ["dqn-numpy", "dqn-torch", "sac", "td3"])
def test_an_overflowing_loss_from_finite_rewards_raises_before_stepping(kind):
    # Rewards of 1e30 are finite (a replay buffer takes them), but their squared TD errors are
    # not in float32.
    env_config = {"id": "CartPole-v1" if kind.startswith("dqn") else "Pendulum-v1", "at": 0, "value": 0.0,
                  "scale": 1e30}
    config: Any
    if kind.startswith("dqn"):
        config = cairn.DQNConfig().training(update_backend=kind.split("-")[1], td_error_loss_fn="mse",
                                            grad_clip=None)
    else:
        config = (cairn.SACConfig() if kind == "sac" else cairn.TD3Config()).training(train_freq=8)
    config = (config.environment(make_env, env_config=env_config).env_runners(rollout_fragment_length=8)
              .training(num_steps_sampled_before_learning_starts=16, train_batch_size=16)
              .debugging(seed=0))
    algo = config.build()
    try:
        policy = algo.get_policy()
        before = policy.get_weights()
        with pytest.raises(NonFiniteLossError, match="policy 'default_policy'"):
            for _ in range(4):
                algo.train()
        assert all_finite(policy) and same_weights(policy.get_weights(), before)
        assert policy.num_grad_updates == 0
    finally:
        algo.stop()


class InfiniteObservation(gym.Wrapper):
    """An env whose ``at``-th step ends its episode in an infinite observation (so that no
    action is computed from it: the policy would refuse to act on it, PolicyOutputError)."""

    def __init__(self, env: gym.Env, at: int) -> None:
        super().__init__(env)
        self.steps, self.at = 0, at

    def step(self, action: Any) -> Any:
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.steps += 1
        if self.steps == self.at:
            return np.full_like(obs, np.inf), reward, True, truncated, info
        return obs, reward, terminated, truncated, info


def make_inf_obs_env(env_config: dict[str, Any]) -> gym.Env:
    return InfiniteObservation(gym.make(env_config["id"]), env_config["at"])


@pytest.mark.parametrize("kind,column", [("dqn", "rewards"), ("sac", "rewards"), ("td3", "next_obs")])
def test_a_replay_buffer_refuses_a_non_finite_round_before_counting_or_storing_it(kind, column):
    # Stored, the NaN row would be replayed by minibatch after minibatch: every later update NaN.
    env_id = "CartPole-v1" if kind == "dqn" else "Pendulum-v1"
    make, env_config = ((make_env, {"id": env_id, "at": 21, "value": float("nan")}) if column == "rewards"
                        else (make_inf_obs_env, {"id": env_id, "at": 21}))
    config: Any = {"dqn": cairn.DQNConfig, "sac": cairn.SACConfig, "td3": cairn.TD3Config}[kind]()
    config = (config.env_runners(rollout_fragment_length=8) if kind == "dqn"
              else config.training(train_freq=8))
    config = (config.environment(make, env_config=env_config)
              .training(num_steps_sampled_before_learning_starts=8, train_batch_size=16)
              .debugging(seed=0))
    algo = config.build()
    try:
        algo.train()  # rounds 1-2: steps 1-16
        buffer = algo.replay_buffers["default_policy"]
        stored, sampled = len(buffer), algo.counters["num_env_steps_sampled_lifetime"]
        assert stored == sampled == 16
        with pytest.raises(NonFiniteSampleError, match=f"'{column}' is NaN or infinite") as caught:
            algo.train()  # round 3 (steps 17-24) holds step 21
        assert caught.value.policy_id == "default_policy" and caught.value.column == column
        assert caught.value.rows == (4,)
        assert len(buffer) == stored and algo.counters["num_env_steps_sampled_lifetime"] == sampled
        assert all(np.isfinite(buffer.columns[c][:len(buffer)]).all() for c in ("rewards", "obs", "next_obs"))
        assert algo.train()["training_iteration"] == 2  # the later rounds are finite
        assert len(buffer) == 32 and all_finite(algo.get_policy())
    finally:
        algo.stop()


class SqrtAtZero(ActorCriticModel):
    """A user's network whose value adds ``sqrt(|h - h|)``: 0 forward, NaN backward (the
    derivative of sqrt at 0) while ``poisoned``; the loss is finite, the gradients are not."""

    poisoned = True

    def __init__(self, observation_space, action_space, num_outputs, model_config):  # type: ignore[no-untyped-def]
        super().__init__(observation_space, action_space, num_outputs, model_config)
        self.trunk = nn.Sequential(nn.Linear(self.obs_size, 16), nn.Tanh())
        self.pi, self.vf = nn.Linear(16, num_outputs), nn.Linear(16, 1)

    def forward(self, obs):  # type: ignore[no-untyped-def]
        h = self.trunk(obs)
        value = self.vf(h).squeeze(-1)
        if SqrtAtZero.poisoned:
            value = value + torch.sqrt((h - h.detach()).abs()).sum(-1)
        return self.pi(h), value


@pytest.mark.parametrize("config_class", [cairn.PPOConfig, cairn.APPOConfig])
def test_a_finite_loss_with_nan_gradients_raises_before_stepping_without_grad_clip(config_class, monkeypatch):
    # Without grad_clip nothing read the gradients: the step made every weight NaN silently.
    config = (config_class().environment("CartPole-v1")
              .training(train_batch_size=64, minibatch_size=64, num_epochs=1, grad_clip=None,
                        model={"custom_model": SqrtAtZero}).debugging(seed=0))
    algo = config.build()
    try:
        policy = algo.get_policy()
        before = policy.get_weights()
        with pytest.raises(NonFiniteLossError, match="policy 'default_policy'") as caught:
            algo.train()
        assert caught.value.stat == "gradient norm" and "trunk.0.weight" in caught.value.parameters
        assert "trunk.0.weight" in str(caught.value)
        assert same_weights(policy.get_weights(), before) and policy.num_grad_updates == 0
        monkeypatch.setattr(SqrtAtZero, "poisoned", False)
        assert algo.train()["training_iteration"] == 1 and all_finite(policy)
        assert not same_weights(policy.get_weights(), before)
    finally:
        algo.stop()


@pytest.mark.parametrize("backend", ["numpy", "torch"])
def test_a_dqn_gradient_that_overflows_from_a_finite_loss_raises_before_stepping(backend):
    # An observation entry of 3e38 (finite) read by a zero weight: the Q-values and the loss are
    # finite, the weight's gradient overflows to inf; Adam would make it NaN, silently.
    algo = (cairn.DQNConfig().environment("CartPole-v1")
            .training(update_backend=backend, grad_clip=None, td_error_loss_fn="mse")
            .debugging(seed=0).build())
    try:
        policy = algo.get_policy()
        first = next(policy.model.parameters())
        with torch.no_grad():
            first[:, 0] = 0.0
        before = policy.get_weights()
        state = {k: v.clone() for s in policy.optimizer.state.values() for k, v in s.items()}
        rng = np.random.default_rng(0)
        obs = rng.standard_normal((32, 4)).astype(np.float32)
        obs[:, 0] = 3e38
        sample = {"obs": obs, "actions": np.zeros(32, np.int64), "rewards": np.full(32, 100.0, np.float32),
                  "next_obs": rng.standard_normal((32, 4)).astype(np.float32),
                  "terminateds": np.ones(32, bool), "n_steps": np.ones(32, np.int64)}
        learn = numpy_dqn_learn if backend == "numpy" else dqn_learn
        with pytest.raises(NonFiniteLossError, match="gradient norm") as caught:
            algo.learn(learn, "default_policy", sample=sample)
        assert caught.value.parameters and caught.value.policy_id == "default_policy"
        assert same_weights(policy.get_weights(), before) and all_finite(policy)
        assert {k: v for s in policy.optimizer.state.values() for k, v in s.items()}.keys() == state.keys()
        assert policy.num_grad_updates == 0
        assert algo.train()["training_iteration"] == 1 and all_finite(policy)
    finally:
        algo.stop()
