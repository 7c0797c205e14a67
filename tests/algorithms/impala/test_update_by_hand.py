"""One whole IMPALA or APPO update against a replay written from the formulas (docs/impala.md).

The replay shares only the network, the target network and the action distribution with the
learner: V-trace is eq. 1 of the paper as an explicit sum (not the learner's recursion), every
row's next value is the network's value of its own ``next_obs``, minibatches are cut from the
permutation by hand, APPO's ratio, clipped surrogate and KL term are written out, and the KL
weight's adaptation and the target copy after the train batch are RLlib's rule by hand. The
batch (the PPO test's environment) has terminations, truncations and fragment ends; APPO's
target network lags the network, so that no ratio is 1 by construction.
"""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

import cairn
from cairn.algorithms.impala.fragments import join_fragments
from cairn.algorithms.impala.learn import after_train_batch, vtrace_learn
from cairn.learners.sync import LOCAL_SYNC
from tests.algorithms.ppo.test_update_by_hand import make_chain


def _vtrace_by_hand(mu: np.ndarray, pi: np.ndarray, batch: dict, values: np.ndarray, next_values: np.ndarray,
                    gamma: float) -> tuple[np.ndarray, np.ndarray]:
    """``v_s = V(x_s) + sum_t gamma^(t-s) (prod_(i<t) c_i) rho_t delta_t`` to the piece's end;
    ``A_s = rho_s (r_s + gamma v_(s+1) - V(x_s))`` (rho_bar = c_bar = pg_bar = 1)."""
    ratio = np.exp(pi - mu)
    rho = np.minimum(1.0, ratio)
    after = np.where(batch["terminateds"], 0.0, next_values)
    n, vs = len(values), np.zeros(len(values))
    for s in range(n):
        total, weight, t = 0.0, 1.0, s
        while True:
            total += weight * rho[t] * (batch["rewards"][t] + gamma * after[t] - values[t])
            if batch["ends"][t]:
                break
            np.testing.assert_array_equal(batch["obs"][t + 1], batch["next_obs"][t])  # one trajectory
            weight *= gamma * min(1.0, ratio[t])
            t += 1
        vs[s] = values[s] + total
    vs_next = np.array([after[s] if batch["ends"][s] else vs[s + 1] for s in range(n)])
    return vs, rho * (batch["rewards"] + gamma * vs_next - values)


def _replica(policy: cairn.Policy) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    model = copy.deepcopy(policy.model)
    optimizer = type(policy.optimizer)(model.parameters(), **policy.optimizer.defaults)
    optimizer.load_state_dict(copy.deepcopy(policy.optimizer.state_dict()))  # not shared
    return model, optimizer


@pytest.mark.parametrize(("appo", "use_kl_loss"), [(False, False), (True, False), (True, True)])
def test_an_update_is_the_documented_one(appo, use_kl_loss):
    config_class = cairn.APPOConfig if appo else cairn.IMPALAConfig
    extra = {"clip_param": 0.2, "use_kl_loss": use_kl_loss, "kl_coeff": 0.7, "kl_target": 0.002,
             "target_network_update_freq": 2, "target_worker_clipping": 1.05} if appo else {}
    algo = (config_class().environment(make_chain)
            .env_runners(num_envs_per_env_runner=2, rollout_fragment_length=13)
            .training(train_batch_size=26, minibatch_size=10, num_epochs=2, lr=0.01, gamma=0.9, grad_clip=0.5,
                      model={"hidden": [16]}, **extra)
            .debugging(seed=3).build())
    try:
        for _ in range(3):  # APPO: the target was copied after the 2nd, the network moved since
            algo.train()
        policy, config = algo.get_policy(), algo.config
        batch = join_fragments(algo.sample_fragments(), "default_policy")
        assert batch is not None
        ends_only = batch["ends"] & ~batch["terminateds"] & ~batch["truncateds"]
        assert batch["terminateds"].any() and batch["truncateds"].any() and ends_only.any()
        n = len(batch)
        obs, actions = torch.from_numpy(batch["obs"]), torch.from_numpy(batch["actions"])
        mu = batch["action_logp"].astype(np.float64)
        model, optimizer = _replica(policy)
        if appo:
            target = copy.deepcopy(policy.target_model).eval()
            with torch.no_grad():
                old = policy.dist.logp(target(obs)[0], actions).double().numpy()
            # The target lags: ratios are not 1, and target_worker_clipping clips some.
            assert (np.exp(mu - old) > 1.05).any()
            kl_coeff = policy.kl_coeff
        rng = np.random.default_rng(4)
        permutations = [rng.permutation(n) for _ in range(2)]
        history, first = [], None
        for perm in permutations:
            with torch.no_grad():  # V-trace of the whole batch with this epoch's weights
                model.eval()
                inputs, values_t = model(obs)
                values = values_t.double().numpy()
                next_values = model(torch.from_numpy(batch["next_obs"]))[1].double().numpy()
                pi = old if appo else policy.dist.logp(inputs, actions).double().numpy()
                model.train()
            vs, pg_adv = _vtrace_by_hand(mu, pi, batch, values, next_values, config.gamma)
            first = first or (vs, values)
            for start in range(0, n, 10):
                rows = perm[start:start + 10]
                inputs, v = model(obs[rows])
                logp = policy.dist.logp(inputs, actions[rows]).double()
                entropy = policy.dist.entropy(inputs).double().mean()
                adv = torch.from_numpy(pg_adv[rows])
                vf_loss = 0.5 * ((v.double() - torch.from_numpy(vs[rows])) ** 2).mean()
                stats = {}
                if appo:
                    m, o = torch.from_numpy(mu[rows]), torch.from_numpy(old[rows])
                    ratio = torch.clamp(torch.exp(m - o), 0.0, 1.05) * torch.exp(logp - m)
                    policy_loss = -torch.min(ratio * adv, ratio.clamp(0.8, 1.2) * adv).mean()
                    loss = policy_loss + 0.5 * vf_loss - 0.01 * entropy
                    if use_kl_loss:
                        log_r = logp - o
                        kl = (torch.exp(o - m) * (torch.exp(log_r) - 1 - log_r)).mean()
                        loss = loss + kl_coeff * kl
                        stats["mean_kl_loss"] = kl.item()
                    stats["clip_fraction"] = ((ratio - 1).abs() > 0.2).double().mean().item()
                else:
                    policy_loss = -(logp * adv).mean()
                    loss = policy_loss + 0.5 * vf_loss - 0.01 * entropy
                history.append({**stats, "policy_loss": policy_loss.item(), "vf_loss": vf_loss.item(),
                                "entropy": entropy.item(), "total_loss": loss.item()})
                optimizer.zero_grad()
                loss.backward()
                torch.nn.utils.clip_grad_norm_(list(model.parameters()), 0.5)
                optimizer.step()
        got = vtrace_learn(config, policy, LOCAL_SYNC, batch=batch, permutations=permutations,
                           appo=appo).stats
        assert len(history) == 2 * 3  # 26 rows: 10 + 10 + 6 per epoch
        for a, b in zip(policy.model.parameters(), model.parameters()):
            torch.testing.assert_close(a.detach(), b.detach(), atol=1e-5, rtol=1e-4)
        for key in history[0]:
            np.testing.assert_allclose(got[key], np.mean([h[key] for h in history]), rtol=1e-4, atol=1e-6,
                                       err_msg=key)
        vs, values = first
        np.testing.assert_allclose(got["vf_explained_var"], 1 - np.var(vs - values) / np.var(vs), rtol=1e-4,
                                   atol=1e-6)
        if appo:  # 4th train batch: KL(target || network) adapts the weight, then the target copy
            after = after_train_batch(config, policy, batch)
            with torch.no_grad():
                logp = policy.dist.logp(model.eval()(obs)[0], actions).double().numpy()
            log_r = logp - old
            measured = float(np.mean(np.exp(old - mu) * (np.exp(log_r) - 1 - log_r)))
            want = kl_coeff
            if use_kl_loss and measured > 2 * config.kl_target:
                want = kl_coeff * 1.5
            elif use_kl_loss and measured < 0.5 * config.kl_target:
                want = kl_coeff * 0.5
            assert after["curr_kl_coeff"] == pytest.approx(want) and after["num_train_batches"] == 4
            assert not use_kl_loss or want != kl_coeff  # the case moves the weight
            for a, b in zip(policy.target_model.parameters(), policy.model.parameters()):
                assert torch.equal(a, b)
    finally:
        algo.stop()
