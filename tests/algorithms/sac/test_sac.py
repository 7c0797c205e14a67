"""SAC: config validation, action-space checks, one gradient step against a reference written
with three separate Adams (SB3's layout), targets, multi-agent and prioritized replay."""

from __future__ import annotations

import copy

import gymnasium as gym
import numpy as np
import pytest
import torch

import cairn
from cairn.algorithms.sac import SACPolicy
from cairn.algorithms.sac.loss import (
    actor_loss,
    alpha_loss,
    critic_loss,
    soft_q_targets,
    squashed_gaussian_sample,
)
from cairn.algorithms.sac.model import TwinQ
from cairn.algorithms.td3.td3_policy import TD3Policy
from cairn.errors import ConfigError
from tests.algorithms.sac.multi_agent_pendulum import make_ma_pendulum
from tests.helpers import map_by_index

SMALL = {"train_batch_size": 200, "minibatch_size": 32, "model": {"hidden": [16, 16]},
         "num_steps_sampled_before_learning_starts": 50}


def small_sac(**training: object) -> cairn.SACConfig:
    config = cairn.SACConfig().environment("Pendulum-v1").debugging(seed=0)
    return config.training(**{**SMALL, **training})  # type: ignore[return-value]


# The settings SAC shares with TD3: tests/algorithms/test_actor_critic_config.py.
@pytest.mark.parametrize(("key", "value", "needle"), [
    ("target_entropy", "high", "'target_entropy'='high'"), ("initial_alpha", 0.0, "'initial_alpha'=0.0"),
    ("actor_lr", -1.0, "'actor_lr'=-1.0"),
])
def test_invalid_settings_raise_config_error_naming_them(key, value, needle):
    with pytest.raises(ConfigError, match=needle.replace("[", r"\[")):
        cairn.SACConfig().training(**{key: value})


def test_discrete_action_space_is_refused_with_the_alternatives():
    with pytest.raises(ConfigError, match=r"SAC needs a Box action space, got Discrete\(2\).*DQN.*PPO"):
        small_sac().environment("CartPole-v1").build()


def test_unbounded_box_is_refused():
    space = gym.spaces.Box(-np.inf, np.inf, (2,), np.float32)
    with pytest.raises(ConfigError, match="infinite bounds.*RescaleAction"):
        SACPolicy(gym.spaces.Box(-1, 1, (3,), np.float32), space)


def test_defaults_follow_sb3():
    config = cairn.SACConfig()
    assert (config.replay_buffer_config["capacity"], config.minibatch_size, config.tau, config.gamma,
            config.lr, config.model["hidden"], config.num_steps_sampled_before_learning_starts,
            config.train_freq, config.gradient_steps) == (
                1_000_000, 256, 0.005, 0.99, 3e-4, [256, 256], 100, 1, 1)
    policy = SACPolicy(gym.spaces.Box(-1, 1, (3,), np.float32), gym.spaces.Box(-2, 2, (2,), np.float32),
                       seed=0)
    assert policy.target_entropy == -2.0 and policy.alpha == pytest.approx(1.0)
    assert [g["name"] for g in policy.optimizer.param_groups] == ["actor", "critic", "alpha"]


def test_group_learning_rates_default_to_lr_and_survive_a_restore():
    algo = small_sac(lr=1e-3, critic_lr=2e-3).build()
    try:
        policy = algo.get_policy()
        assert [g["lr"] for g in policy.optimizer.param_groups] == [1e-3, 2e-3, 1e-3]
        restored = cairn.Policy.from_state(policy.get_state())
        assert [g["lr"] for g in restored.optimizer.param_groups] == [1e-3, 2e-3, 1e-3]
    finally:
        algo.stop()


def reference_step(policy: SACPolicy, sample: dict[str, np.ndarray], *, gamma: float, tau: float,
                   generator: torch.Generator, optimizers: dict[str, torch.optim.Optimizer]) -> None:
    """One gradient step as SB3's SAC.train() takes it, with three Adams over ``policy.model``."""
    model = policy.model
    obs, actions = torch.from_numpy(sample["obs"]), torch.from_numpy(sample["actions"])
    next_obs = torch.from_numpy(sample["next_obs"])
    shape = (obs.shape[0], policy.action_size)
    mean, log_std = model.actor(obs)
    actions_pi, log_prob = squashed_gaussian_sample(mean, log_std, torch.randn(shape, generator=generator))
    alpha = model.log_alpha.detach().exp()
    optimizers["alpha"].zero_grad()
    alpha_loss(model.log_alpha, log_prob, policy.target_entropy).backward()
    optimizers["alpha"].step()
    with torch.no_grad():
        next_mean, next_log_std = model.actor(next_obs)
        next_actions, next_log_prob = squashed_gaussian_sample(
            next_mean, next_log_std, torch.randn(shape, generator=generator))
        targets = soft_q_targets(torch.from_numpy(sample["rewards"]),
                                 torch.from_numpy(gamma ** sample["n_steps"].astype(np.float32)),
                                 torch.from_numpy(sample["terminateds"]),
                                 model.target_critic(next_obs, next_actions), next_log_prob, alpha)
    optimizers["critic"].zero_grad()
    critic_loss(model.critic(obs, actions), targets)[0].backward()
    optimizers["critic"].step()
    optimizers["actor"].zero_grad()
    actor_loss(log_prob, model.critic(obs, actions_pi), alpha).backward()  # critic grads too, unused
    optimizers["actor"].step()
    with torch.no_grad():
        for target, online in zip(model.target_critic.parameters(), model.critic.parameters(), strict=True):
            target.mul_(1 - tau).add_(tau * online)


def test_one_gradient_step_equals_three_separate_adams_in_sb3_order():
    algo = small_sac(critic_lr=1e-3).build()
    try:
        algo.train()  # fills the buffer, takes some steps (so Adam has state)
        policy = algo.get_policy()
        buffer = algo.replay_buffers["default_policy"]
        reference = cairn.Policy.from_state(policy.get_state())
        assert isinstance(reference, SACPolicy)
        groups = reference.model.parameter_groups()
        state = copy.deepcopy(policy.optimizer.state_dict())  # state_dict() shares the live tensors
        optimizers = {}
        index = 0
        for name, group in zip(("actor", "critic", "alpha"), state["param_groups"], strict=True):
            opt = torch.optim.Adam(groups[name], lr=group["lr"])
            ids = group["params"]
            opt.load_state_dict({"state": {i - index: state["state"][i] for i in ids if i in state["state"]},
                                 "param_groups": [{**group, "params": [i - index for i in ids]}]})
            index += len(ids)
            optimizers[name] = opt
        sample_rng = copy.deepcopy(buffer.rng)
        generator = torch.Generator()
        generator.set_state(policy.generator.get_state())
        algo.learn_on_replay("default_policy", buffer)
        buffer.rng = sample_rng
        reference_step(reference, buffer.sample(32), gamma=0.99, tau=0.005, generator=generator,
                       optimizers=optimizers)
        for (name, got), (_, want) in zip(policy.model.state_dict().items(),
                                          reference.model.state_dict().items(), strict=True):
            np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-5, atol=1e-6, err_msg=name)
        assert not torch.equal(policy.model.critic.weights[0], policy.model.target_critic.weights[0])
    finally:
        algo.stop()


@pytest.mark.parametrize("activation", ["relu", "tanh", "elu"])
def test_twin_q_equals_two_separate_linear_stacks(activation):
    # TwinQ stores both critics as [2, fan_in, fan_out] weights and evaluates them per critic
    # (relu and tanh in place); reference: two plain nn.Linear stacks with the same weights.
    twin = TwinQ(5, 2, hidden=[16, 8], activation=activation)
    twin.reset_parameters(torch.Generator().manual_seed(0))
    act = {"relu": torch.nn.ReLU, "tanh": torch.nn.Tanh, "elu": torch.nn.ELU}[activation]
    stacks = []
    for i in range(2):
        layers: list[torch.nn.Module] = []
        for k, (weight, bias) in enumerate(zip(twin.weights, twin.biases, strict=True)):
            linear = torch.nn.Linear(weight.shape[1], weight.shape[2])
            with torch.no_grad():
                linear.weight.copy_(weight[i].T)
                linear.bias.copy_(bias[i, 0])
            layers += [linear, act()] if k < len(twin.weights) - 1 else [linear]
        stacks.append(torch.nn.Sequential(*layers))
    obs, actions = torch.randn(64, 5), torch.rand(64, 2) * 2 - 1
    coeffs = torch.randn(2, 64)

    q = twin(obs, actions)
    want = torch.stack([stack(torch.cat([obs, actions], dim=-1)).squeeze(-1) for stack in stacks])
    torch.testing.assert_close(q, want, rtol=1e-6, atol=1e-6)
    (coeffs * q).sum().backward()
    (coeffs * want).sum().backward()
    for k, (weight, bias) in enumerate(zip(twin.weights, twin.biases, strict=True)):
        for i in range(2):
            linear = stacks[i][2 * k]
            torch.testing.assert_close(weight.grad[i], linear.weight.grad.T, rtol=1e-5, atol=1e-6)
            torch.testing.assert_close(bias.grad[i, 0], linear.bias.grad, rtol=1e-5, atol=1e-6)

    # detach=True (the actor loss): gradients reach the actions, not the critics' weights.
    twin.zero_grad(set_to_none=True)
    leaf = actions.clone().requires_grad_()
    (coeffs * twin(obs, leaf, detach=True)).sum().backward()
    assert all(p.grad is None for p in twin.parameters())
    reference = actions.clone().requires_grad_()
    (coeffs * torch.stack([s(torch.cat([obs, reference], -1)).squeeze(-1) for s in stacks])).sum().backward()
    torch.testing.assert_close(leaf.grad, reference.grad, rtol=1e-5, atol=1e-6)


def test_training_reports_losses_and_counts_gradient_steps():
    algo = small_sac(gradient_steps=2).build()
    try:
        result = algo.train()
        stats = result["learners"]["default_policy"]
        # Learning starts at step 50: 150 rounds of one step, two gradient steps each.
        assert stats["num_grad_updates"] == 2 * 151
        assert stats["alpha"] < 1.0 and stats["replay_buffer_size"] == 200
        assert all(np.isfinite(stats[k]) for k in ("critic_loss", "actor_loss", "alpha_loss", "q_mean"))
        action = algo.compute_single_action(np.zeros(3, np.float32))
        assert action.shape == (1,) and -2.0 <= action[0] <= 2.0
    finally:
        algo.stop()


def test_random_actions_before_learning_starts_span_the_box():
    algo = small_sac(num_steps_sampled_before_learning_starts=200).build()
    try:
        algo.train()
        actions = algo.replay_buffers["default_policy"].columns["actions"][:200]
        assert actions.min() < -0.9 and actions.max() > 0.9  # uniform in [-1, 1], not tanh(noise)
        assert algo.get_policy().num_grad_updates == 1  # learning starts at the last round
    finally:
        algo.stop()


def test_multi_agent_prioritized_n_step_trains_each_policy_from_its_own_buffer():
    config = (small_sac(n_step=3, train_freq=4,
                        replay_buffer_config={"type": "prioritized", "capacity": 1000})
              .environment(make_ma_pendulum, env_config={"num_agents": 2})
              .multi_agent(policies={"p0", "p1"}, policy_mapping_fn=map_by_index))
    algo = config.build()
    try:
        result = algo.train()
        assert set(result["learners"]) == {"p0", "p1"}
        buffers = algo.replay_buffers
        assert (type(buffers["p0"]).__name__ == "PrioritizedReplayBuffer"
                and buffers["p0"] is not buffers["p1"])
        assert set(buffers["p0"].columns["n_steps"][: len(buffers["p0"])].tolist()) == {1, 2, 3}
        assert not np.array_equal(algo.get_policy("p0").get_weights()["actor.mean_head.weight"],
                                  algo.get_policy("p1").get_weights()["actor.mean_head.weight"])
    finally:
        algo.stop()


def test_training_intensity_sets_the_replay_ratio_with_fractions_carried_over():
    # 1 row per round; 16 replayed per sampled transition in minibatches of 32: a gradient
    # step every second round, from the round that reaches step 50 to step 200 (151 rounds).
    algo = small_sac(training_intensity=16.0).build()
    try:
        algo.train()
        assert algo.get_policy().num_grad_updates == 151 * 16 // 32
        assert algo.counters["num_env_steps_trained_lifetime"] == 75 * 32
    finally:
        algo.stop()


@pytest.mark.parametrize("policy_class", [SACPolicy, TD3Policy], ids=["sac", "td3"])
@pytest.mark.parametrize("bound", [float(np.finfo(np.float32).max), 3e38, 1e300],
                         ids=["f32max", "3e38", "1e300"])
def test_box_whose_range_overflows_float32_is_refused(policy_class, bound):
    """Actions are rescaled from [-1, 1] with (high - low) / 2 in float32: a range beyond the
    float32 maximum (bounds used as 'practically unbounded') made every action the upper bound,
    or NaN at raw -1, with no error. Such a Box is refused like an infinite one."""
    space = gym.spaces.Box(-bound, bound, (2,), np.float64 if bound > 3.5e38 else np.float32)
    with pytest.raises(ConfigError, match=r"high - low.*float32.*RescaleAction"):
        policy_class(gym.spaces.Box(-1, 1, (3,), np.float32), space)


def test_box_with_the_widest_float32_range_still_acts():
    """The widest range that float32 still holds keeps its actions inside the Box and spread
    over it (not all at one bound)."""
    bound = float(np.finfo(np.float32).max) / 2
    space = gym.spaces.Box(-bound, bound, (2,), np.float32)
    policy = SACPolicy(gym.spaces.Box(-1, 1, (3,), np.float32), space, seed=0)
    raw = np.array([[-1.0, 1.0], [0.0, 0.5]], np.float32)
    actions = policy.dist.to_env(raw)
    assert np.isfinite(actions).all() and all(space.contains(a) for a in actions)
    np.testing.assert_allclose(actions, [[-bound, bound], [0.0, bound / 2]], rtol=1e-6)
