"""One whole PPO update against a replay written from the formulas (docs/ppo.md, "The update").

The replay shares no code with the learner beyond the network and the action distribution:
GAE is the explicit discounted sum of TD errors walked row by row along each trajectory
piece (checking that a piece's next row is its next observation), every row's next value is
the network's value of its own ``next_obs``, minibatches are cut from the permutation by hand
(the last one smaller), and for an LSTM every value and action input comes from running the
network one step at a time from the state recorded with the first row of its sequence. The
batch has terminations, truncations and fragment ends, and the settings turn on value
clipping, gradient clipping and an entropy bonus, so that each of them must be the
documented one for the weights and the reported statistics to agree.
"""

from __future__ import annotations

import copy
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch

import cairn
from cairn.algorithms.ppo.learn import ppo_learn
from cairn.algorithms.ppo.recurrent import learn_recurrent
from cairn.learners.sync import LOCAL_SYNC

MAX_SEQ_LEN = 4


class _Chain(gym.Env):
    """Observations from the env's own generator; episodes end by termination at step 4 (odd
    episodes) or by the time limit at step 6 (even ones), whatever the actions."""

    observation_space = gym.spaces.Box(-10.0, 10.0, (3,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self) -> None:
        self.episode = 0

    def reset(self, *, seed: int | None = None, options: Any = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        self.episode, self.t = self.episode + 1, 0
        self.obs = self.np_random.normal(size=3).astype(np.float32)
        return self.obs, {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict]:
        self.t += 1
        reward = 1.0 if int(action) == int(self.obs[0] > 0) else -0.5
        self.obs = self.np_random.normal(size=3).astype(np.float32)
        return self.obs, reward, self.episode % 2 == 1 and self.t == 4, False, {}


def make_chain(env_config: dict) -> gym.Env:
    return gym.wrappers.TimeLimit(_Chain(), max_episode_steps=6)


def _algo(model: dict, minibatch_size: int) -> cairn.Algorithm:
    return (cairn.PPOConfig().environment(make_chain)
            .env_runners(num_envs_per_env_runner=2, rollout_fragment_length=13)
            .training(train_batch_size=26, minibatch_size=minibatch_size, num_epochs=2, lr=0.01, gamma=0.9,
                      lambda_=0.8, vf_clip_param=0.05, grad_clip=0.5, entropy_coeff=0.01, model=model)
            .debugging(seed=3).build())


def _gae_by_hand(batch: dict, values: np.ndarray, next_values: np.ndarray, gamma: float,
                 lam: float) -> np.ndarray:
    """``A_t = sum_k (gamma lam)^k delta_(t+k)`` up to the end of ``t``'s piece, with ``delta_t =
    r_t + gamma V(next_obs_t) [not terminated] - V(obs_t)``."""
    n, adv = len(values), np.zeros(len(values))
    for t in range(n):
        k, weight = t, 1.0
        while True:
            after = 0.0 if batch["terminateds"][k] else next_values[k]
            adv[t] += weight * (batch["rewards"][k] + gamma * after - values[k])
            if batch["ends"][k]:
                break
            np.testing.assert_array_equal(batch["obs"][k + 1], batch["next_obs"][k])  # one trajectory
            k, weight = k + 1, weight * gamma * lam
    return adv


def _loss_by_hand(policy: cairn.Policy, inputs: torch.Tensor, values: torch.Tensor, rows: np.ndarray,
                  batch: dict, adv: np.ndarray, old_values: np.ndarray,
                  config: Any) -> tuple[torch.Tensor, dict]:
    a = torch.from_numpy(adv[rows])
    if len(rows) > 1:
        a = (a - a.mean()) / (a.std() + 1e-8)
    logp = policy.dist.logp(inputs, torch.from_numpy(batch["actions"][rows])).double()
    ratio = torch.exp(logp - torch.from_numpy(batch["action_logp"][rows]).double())
    eps = config.clip_param
    policy_loss = -torch.min(ratio * a, ratio.clamp(1 - eps, 1 + eps) * a).mean()
    v, v_old = values.double(), torch.from_numpy(old_values[rows])
    ret = torch.from_numpy(adv[rows] + old_values[rows])
    v_clipped = v_old + (v - v_old).clamp(-config.vf_clip_param, config.vf_clip_param)
    vf_loss = torch.max((v - ret) ** 2, (v_clipped - ret) ** 2).mean()
    entropy = policy.dist.entropy(inputs).double().mean()
    loss = policy_loss + config.vf_coeff * vf_loss - config.entropy_coeff * entropy
    stats = {"policy_loss": policy_loss.item(), "vf_loss": vf_loss.item(), "entropy": entropy.item(),
             "total_loss": loss.item(), "approx_kl": ((ratio - 1) - ratio.log()).mean().item(),
             "clip_fraction": ((ratio - 1).abs() > eps).double().mean().item()}
    return loss, stats


def _step(model: torch.nn.Module, optimizer: torch.optim.Optimizer, loss: torch.Tensor,
          grad_clip: float) -> float:
    optimizer.zero_grad()
    loss.backward()
    norm = torch.nn.utils.clip_grad_norm_(list(model.parameters()), grad_clip)
    optimizer.step()
    return float(norm)


def _replica(policy: cairn.Policy) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    model = copy.deepcopy(policy.model)
    optimizer = type(policy.optimizer)(model.parameters(), **policy.optimizer.defaults)
    # A deep copy: load_state_dict keeps tensors that need no conversion, which the learner
    # then updates in place.
    optimizer.load_state_dict(copy.deepcopy(policy.optimizer.state_dict()))
    return model, optimizer


def _compare(policy: cairn.Policy, model: torch.nn.Module, stats: dict, history: list[dict],
             returns: np.ndarray, values: np.ndarray) -> None:
    for got, want in zip(policy.model.parameters(), model.parameters()):
        torch.testing.assert_close(got.detach(), want.detach(), atol=1e-5, rtol=1e-4)
    for key in history[0]:
        np.testing.assert_allclose(stats[key], np.mean([h[key] for h in history]), rtol=1e-4, atol=1e-6,
                                   err_msg=key)
    explained = 1 - np.var(returns - values) / np.var(returns)
    np.testing.assert_allclose(stats["vf_explained_var"], explained, rtol=1e-4, atol=1e-6)


def _sample(algo: cairn.Algorithm) -> dict:
    algo.train()  # the optimizer has state, so that its replica must carry it
    batch = algo.env_runner_group.local.sample(13)["default_policy"]
    # The cases the update must tell apart are all in the batch.
    ends_only = batch["ends"] & ~batch["terminateds"] & ~batch["truncateds"]
    assert batch["terminateds"].any() and batch["truncateds"].any() and ends_only.any()
    return batch


@pytest.mark.parametrize("minibatch_size", [8, 25])  # 26 rows: 8+8+8+2, and 25+1 (one raw row)
def test_a_feed_forward_update_is_the_documented_one(minibatch_size):
    algo = _algo({"hidden": [16]}, minibatch_size)
    try:
        policy, config = algo.get_policy(), algo.config
        batch = _sample(algo)
        n = len(batch)
        model, optimizer = _replica(policy)
        permutations = [np.random.default_rng(5).permutation(n) for _ in range(2)]
        with torch.no_grad():
            model.eval()
            values = model(torch.from_numpy(batch["obs"]))[1].double().numpy()
            next_values = model(torch.from_numpy(batch["next_obs"]))[1].double().numpy()
            model.train()
        adv = _gae_by_hand(batch, values, next_values, config.gamma, config.lambda_)
        history = []
        for perm in permutations:
            for start in range(0, n, minibatch_size):
                rows = perm[start:start + minibatch_size]
                inputs, v = model(torch.from_numpy(batch["obs"][rows]))
                loss, stats = _loss_by_hand(policy, inputs, v, rows, batch, adv, values, config)
                history.append({**stats, "grad_norm": _step(model, optimizer, loss, config.grad_clip)})
        stats = ppo_learn(config, policy, LOCAL_SYNC, batch=batch, rewards=batch["rewards"],
                          permutations=permutations).stats
        assert len(history) == 2 * -(-n // minibatch_size)  # no row dropped, the last minibatch smaller
        _compare(policy, model, stats, history, adv + values, values)
    finally:
        algo.stop()


def test_a_recurrent_update_is_the_documented_one_step_by_step():
    algo = _algo({"use_lstm": True, "lstm_cell_size": 8, "max_seq_len": MAX_SEQ_LEN, "hidden": [16]}, 10)
    try:
        policy, config = algo.get_policy(), algo.config
        batch = _sample(algo)
        n = len(batch)
        model, optimizer = _replica(policy)
        sequences, start = [], 0  # cut at piece ends and every MAX_SEQ_LEN steps
        while start < n:
            stop = start + 1
            while not batch["ends"][stop - 1] and stop - start < MAX_SEQ_LEN:
                stop += 1
            sequences.append((start, stop))
            start = stop

        def run(start: int, stop: int, extra: np.ndarray | None = None) -> tuple[list, list]:
            state = [torch.from_numpy(batch[f"state_in_{k}"][start][None]) for k in range(2)]
            inputs, values = [], []
            for obs in [*batch["obs"][start:stop], *([] if extra is None else [extra])]:
                i, v, state = model(torch.from_numpy(obs)[None, None], state)
                inputs.append(i[0, 0])
                values.append(v[0, 0])
            return inputs, values

        values, next_values = np.zeros(n), np.zeros(n)
        with torch.no_grad():
            model.eval()
            for start, stop in sequences:
                last = stop - 1
                bootstrap = batch["ends"][last] and not batch["terminateds"][last]
                _, v = run(start, stop, batch["next_obs"][last] if bootstrap else None)
                values[start:stop] = [float(x) for x in v[:stop - start]]
                next_values[start:last] = values[start + 1:stop]
                if bootstrap:  # the value of next_obs from the state after the piece's last step
                    next_values[last] = float(v[-1])
                elif not batch["ends"][last]:  # the piece goes on in the next sequence
                    next_values[last] = np.nan  # filled below, once that sequence ran
            model.train()
        inside = np.isnan(next_values)
        next_values[inside] = values[np.flatnonzero(inside) + 1]
        adv = _gae_by_hand(batch, values, next_values, config.gamma, config.lambda_)
        rng = np.random.default_rng(9)
        permutations = [rng.permutation(len(sequences)) for _ in range(2)]
        lengths = np.array([stop - start for start, stop in sequences])
        history = []
        for perm in permutations:
            first_step = np.cumsum(lengths[perm]) - lengths[perm]
            for group in range(int(first_step[-1]) // 10 + 1):  # a sequence joins its first step's
                members = perm[first_step // 10 == group]
                if not len(members):
                    continue
                rows, inputs, v = [], [], []
                for s in members:
                    i, vv = run(*sequences[s])
                    rows += range(*sequences[s])
                    inputs += i
                    v += vv
                loss, stats = _loss_by_hand(policy, torch.stack(inputs), torch.stack(v), np.array(rows),
                                            batch, adv, values, config)
                history.append({**stats, "grad_norm": _step(model, optimizer, loss, config.grad_clip)})
        stats = learn_recurrent(config, policy, LOCAL_SYNC, batch=batch, rewards=batch["rewards"],
                                permutations=permutations).stats
        assert stats["num_sequences"] == len(sequences)
        _compare(policy, model, stats, history, adv + values, values)
    finally:
        algo.stop()
