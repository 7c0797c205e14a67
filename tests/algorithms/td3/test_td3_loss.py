"""TD3's loss functions against values computed by hand (Fujimoto et al. 2018, Algorithm 1),
and one whole gradient step of the learner against SB3's TD3.train() written with two Adams."""

from __future__ import annotations

import copy
import doctest

import numpy as np
import pytest
import torch

import cairn
from cairn.algorithms.td3 import TD3Policy
from cairn.algorithms.td3 import loss as td3_loss
from cairn.algorithms.td3.learn import actor_update_due
from cairn.algorithms.td3.loss import (
    actor_loss,
    clipped_double_q_targets,
    critic_loss,
    smoothed_target_actions,
)


def test_doctests_of_the_loss_module():
    assert doctest.testmod(td3_loss, optionflags=doctest.ELLIPSIS).failed == 0


def test_losses_by_hand():
    # Target policy smoothing: 0.9 + 0.2 * 1.0 = 1.1 -> clipped to 1; 0.2 * -5 = -1 -> noise
    # clipped to -0.5; 0.2 * 0.5 = 0.1 passes unclipped.
    smoothed = smoothed_target_actions(torch.tensor([[0.9, 0.0, -0.3]]), torch.tensor([[1.0, -5.0, 0.5]]),
                                       noise_std=0.2, noise_clip=0.5)
    np.testing.assert_allclose(smoothed.numpy(), [[1.0, -0.5, -0.2]], rtol=0, atol=1e-7)

    # y = r + gamma^n (1 - d) min(Q'_1, Q'_2): min(3, 4) = 3 -> 1 + 0.99 * 3; terminal -> r.
    targets = clipped_double_q_targets(torch.tensor([1.0, 1.0]), torch.tensor([0.99, 0.99]),
                                       torch.tensor([False, True]), torch.tensor([[3.0, 5.0], [4.0, 2.0]]))
    np.testing.assert_allclose(targets.numpy(), [3.97, 1.0], rtol=0, atol=1e-6)

    # sum_i mean((Q_i - y)^2): row 0: 0.97^2 + 0.03^2 = 0.9418; row 1: 0.5^2 + 0.5^2 = 0.5.
    q = torch.tensor([[3.0, 1.5], [4.0, 0.5]])
    loss, td = critic_loss(q, targets)
    assert float(loss) == pytest.approx((0.9418 + 0.5) / 2, abs=1e-6)
    np.testing.assert_allclose(td.numpy(), [0.5, 0.5], rtol=0, atol=1e-6)
    weighted, _ = critic_loss(q, targets, torch.tensor([2.0, 0.0]))
    assert float(weighted) == pytest.approx(0.9418, abs=1e-6)

    assert float(actor_loss(torch.tensor([1.0, -3.0, 5.0]))) == pytest.approx(-1.0)


def test_actor_update_is_due_every_policy_delay_steps_counted_from_one():
    # SB3: _n_updates += 1, then update the actor when _n_updates % policy_delay == 0.
    assert [actor_update_due(n, 2) for n in range(6)] == [False, True, False, True, False, True]
    assert [actor_update_due(n, 3) for n in range(6)] == [False, False, True, False, False, True]
    assert all(actor_update_due(n, 1) for n in range(4))


def reference_step(model, sample, *, step: int, generator, optimizers, gamma=0.99, tau=0.005,
                   policy_delay=2, noise_std=0.2, noise_clip=0.5) -> None:
    """SB3's TD3.train() for one gradient step (number ``step``, from 1), written out."""
    obs, actions = torch.from_numpy(sample["obs"]), torch.from_numpy(sample["actions"])
    next_obs, rewards = torch.from_numpy(sample["next_obs"]), torch.from_numpy(sample["rewards"])
    done = torch.from_numpy(sample["terminateds"]).float()
    with torch.no_grad():
        noise = (torch.randn(actions.shape, generator=generator) * noise_std).clamp(-noise_clip, noise_clip)
        next_actions = (model.target_actor(next_obs) + noise).clamp(-1, 1)
        next_q = model.target_critic(next_obs, next_actions).min(dim=0).values
        discount = torch.from_numpy(gamma ** sample["n_steps"].astype(np.float32))
        target_q = rewards + (1 - done) * discount * next_q
    current = model.critic(obs, actions)
    loss = sum(torch.nn.functional.mse_loss(current[i], target_q) for i in range(2))
    optimizers["critic"].zero_grad()
    loss.backward()
    optimizers["critic"].step()
    if step % policy_delay == 0:
        optimizers["actor"].zero_grad()
        (-model.critic(obs, model.actor(obs))[0].mean()).backward()
        optimizers["actor"].step()
        with torch.no_grad():
            for tgt, src in ((model.target_critic, model.critic), (model.target_actor, model.actor)):
                for t, s in zip(tgt.parameters(), src.parameters(), strict=True):
                    t.mul_(1 - tau).add_(tau * s)


def test_gradient_steps_equal_sb3s_order_with_two_adams_and_delayed_actor():
    algo = (cairn.TD3Config().environment("Pendulum-v1")
            .training(train_batch_size=100, minibatch_size=32, model={"hidden": [16, 16]}, n_step=2,
                      num_steps_sampled_before_learning_starts=60)
            .debugging(seed=0).build())
    try:
        algo.train()
        policy = algo.get_policy()
        buffer = algo.replay_buffers["default_policy"]
        reference = cairn.Policy.from_state(policy.get_state())
        assert isinstance(reference, TD3Policy)
        groups = reference.model.parameter_groups()
        state = copy.deepcopy(policy.optimizer.state_dict())
        optimizers, index = {}, 0
        for name, group in zip(("actor", "critic"), state["param_groups"], strict=True):
            opt = torch.optim.Adam(groups[name], lr=group["lr"])
            ids = group["params"]
            opt.load_state_dict({"state": {i - index: state["state"][i] for i in ids if i in state["state"]},
                                 "param_groups": [{**group, "params": [i - index for i in ids]}]})
            index += len(ids)
            optimizers[name] = opt
        generator = torch.Generator()
        generator.set_state(policy.generator.get_state())
        for _ in range(2):  # one step without the actor and one with it, in either order
            before = {k: v.clone() for k, v in policy.model.state_dict().items()}
            step = policy.num_grad_updates + 1
            sample_rng = copy.deepcopy(buffer.rng)
            algo.learn_on_replay("default_policy", buffer)
            buffer.rng = sample_rng
            reference_step(reference.model, buffer.sample(32), step=step, generator=generator,
                           optimizers=optimizers)
            for (name, got), (_, want) in zip(policy.model.state_dict().items(),
                                              reference.model.state_dict().items(), strict=True):
                np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-5, atol=1e-6, err_msg=name)
            moved = {k for k, v in policy.model.state_dict().items() if not torch.equal(v, before[k])}
            delayed = step % 2 == 0
            assert any(k.startswith("actor.") for k in moved) == delayed
            assert any(k.startswith("target_") for k in moved) == delayed
            assert any(k.startswith("critic.") for k in moved)
    finally:
        algo.stop()


def _trained_state(monkeypatch: pytest.MonkeyPatch | None) -> dict[str, torch.Tensor]:
    from cairn.algorithms.sac.model import TwinQ

    if monkeypatch is not None:
        # The slow path: both critics computed, the first one's row taken.
        monkeypatch.setattr(TwinQ, "first_q", lambda self, obs, actions, *, detach=False:
                            self(obs, actions, detach=detach)[0])
    algo = (cairn.TD3Config().environment("Pendulum-v1")
            .training(train_batch_size=160, minibatch_size=32, model={"hidden": [16, 16]},
                      num_steps_sampled_before_learning_starts=60)
            .debugging(seed=0).build())
    try:
        algo.train()
        policy = algo.get_policy()
        state = {f"model.{k}": v.clone() for k, v in policy.model.state_dict().items()}
        for i, per_param in policy.optimizer.state_dict()["state"].items():
            state.update({f"adam.{i}.{k}": torch.as_tensor(v).clone() for k, v in per_param.items()})
        return state
    finally:
        algo.stop()


def test_actor_loss_on_the_first_critic_alone_trains_byte_identically(monkeypatch):
    # The actor loss computes only Q_1 (TwinQ.first_q); computing both critics and taking the first
    # row must give the same weights and Adam moments, bit for bit, after 100 gradient steps
    # (50 of them with the actor).
    fast = _trained_state(None)
    slow = _trained_state(monkeypatch)
    assert fast.keys() == slow.keys()
    for name in fast:
        assert torch.equal(fast[name], slow[name]), name


def test_twin_q_first_q_equals_forward_first_row():
    from cairn.algorithms.sac.model import TwinQ

    twin = TwinQ(5, 2, hidden=[16, 8], activation="relu")
    twin.reset_parameters(torch.Generator().manual_seed(0))
    obs = torch.randn(64, 5)
    both_actions = (torch.rand(64, 2) * 2 - 1).requires_grad_()
    first_actions = both_actions.detach().clone().requires_grad_()
    both = twin(obs, both_actions, detach=True)
    first = twin.first_q(obs, first_actions, detach=True)
    assert torch.equal(first, both[0])
    assert not torch.equal(first, both[1])  # the first critic, not the second
    both[0].sum().backward()
    first.sum().backward()
    assert torch.equal(first_actions.grad, both_actions.grad)
    assert all(p.grad is None for p in twin.parameters())
