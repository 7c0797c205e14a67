"""APPO's learn call runs its target network once over the train batch and every epoch's V-trace
and minibatch loss read those rows (:func:`cairn.algorithms.impala.learn.target_logp`).

The shortcut's proof: the target network is frozen during a call (weights bit-equal after it, no
gradient, in no optimizer), the per-call values are a fresh target forward's on the whole batch
exactly and on any subset of rows up to the last bits of row-batching, and a learn call gives the
weights, optimizer state and statistics of the former per-epoch, per-minibatch code, written out
here as the reference."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

from cairn.algorithms.impala.fragments import join_fragments
from cairn.algorithms.impala.learn import (
    BatchTensors,
    after_train_batch,
    kl_estimate,
    target_logp,
    vtrace_learn,
)
from cairn.algorithms.impala.loss import appo_loss
from cairn.algorithms.impala.vtrace import vtrace
from cairn.algorithms.ppo.learn import next_values, update_stats
from cairn.learners import LOCAL_SYNC
from tests.algorithms.impala.small import small

#: Row-batching tolerance of log-probabilities: a forward pass over fewer rows may take another
#: kernel and round differently. Measured on the 2-core AVX-512 VM (torch 2.13, MKL): 0 for
#: subsets of 16 rows and more, at most 6e-8 (16x16 net) / 2.4e-7 (64x64) / 3.6e-7 (256x256)
#: for subsets of 1 to 8 rows, i.e. a few float32 ulps of values below 1.
LOGP_ATOL = 1e-6


def _appo(**training: Any):
    """A small APPO, one sampled batch (with terminations and fragment ends), and its target
    network moved away from the network (so that taking the wrong one shows)."""
    algo = small("APPO", **training).environment("CartPole-v1", env_config={"max_episode_steps": 15}).build()
    batch = join_fragments(algo.sample_fragments(), "default_policy")
    policy = algo.get_policy()
    with torch.no_grad():
        for p in policy.target_model.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=torch.Generator().manual_seed(p.numel())))
    return algo, batch, policy


def test_per_call_target_logp_is_a_fresh_target_forward_on_those_rows():
    algo, batch, policy = _appo()
    try:
        data = BatchTensors(batch, policy, torch.device("cpu"))
        cached = target_logp(policy, data)
        obs, actions = torch.from_numpy(batch["obs"]), torch.from_numpy(batch["actions"])
        with torch.no_grad():
            fresh = policy.dist.logp(policy.target_model(obs)[0], actions)
            own = policy.dist.logp(policy.model(obs)[0], actions)
        assert torch.equal(cached, fresh)  # the whole batch: the same computation, bit for bit
        assert (cached - own).abs().max() > 1e-3  # the target's, not the network's
        generator = torch.Generator().manual_seed(0)
        for size in (1, 2, 5, 16, 32, len(batch)):  # minibatches, shards, a permuted whole batch
            for _ in range(5):
                rows = torch.randperm(len(batch), generator=generator)[:size]
                with torch.no_grad():
                    part = policy.dist.logp(policy.target_model(obs[rows])[0], actions[rows])
                torch.testing.assert_close(cached[rows], part, rtol=0, atol=LOGP_ATOL)
    finally:
        algo.stop()


def test_a_learn_call_leaves_the_target_network_frozen_and_runs_it_once():
    algo, batch, policy = _appo(num_epochs=3, minibatch_size=16)
    try:
        target = policy.target_model
        assert not any(p.requires_grad for p in target.parameters())
        held = {id(p) for group in policy.optimizer.param_groups for p in group["params"]}
        assert not held & {id(p) for p in target.parameters()}  # no optimizer step can move it
        before = {k: v.clone() for k, v in target.state_dict().items()}
        calls = []
        hook = target.register_forward_hook(lambda module, args, out: calls.append(len(args[0])))
        try:
            vtrace_learn(algo.config, policy, LOCAL_SYNC, batch=batch,
                         permutations=[np.arange(len(batch))] * 3, appo=True)
        finally:
            hook.remove()
        assert calls == [len(batch)]  # once over the batch (before: 3 epochs + 3 x 5 minibatches)
        assert all(torch.equal(before[k], v) for k, v in target.state_dict().items())
    finally:
        algo.stop()


def test_after_train_batch_builds_tensors_only_to_measure_the_kl():
    algo, batch, policy = _appo()
    try:
        calls = []
        hook = policy.target_model.register_forward_hook(lambda module, args, out: calls.append(1))
        try:
            kl_config = algo.config.copy().training(use_kl_loss=True, kl_target=1e-6)
            after_train_batch(kl_config, policy, batch)  # the KL of the batch, one target pass
            assert calls == [1] and policy.kl_coeff == 1.5  # measured against the moved target
            after_train_batch(algo.config, policy, batch)  # use_kl_loss=False: no forward pass
            assert calls == [1] and policy.num_train_batches == 2
        finally:
            hook.remove()
    finally:
        algo.stop()


def _reference_learn(config: Any, policy: Any, batch: Any,
                     permutations: list[np.ndarray]) -> dict[str, float]:
    """The learn call as written before the target was computed once per call: the target
    network run again in every epoch's V-trace and on every minibatch's rows."""
    data = BatchTensors(batch, policy, torch.device("cpu"))
    model, dist = policy.model, policy.dist
    n = len(batch)
    size = n if config.minibatch_size is None else min(config.minibatch_size, n)
    history, stats, returns, values_np = [], {}, None, None
    for perm in permutations:
        with torch.no_grad():
            values = model(data.obs)[1]
            logp_target = dist.logp(policy.target_model(data.obs)[0], data.actions)
            nv = torch.from_numpy(next_values(model, batch, values.numpy()))
        targets = vtrace(behaviour_logp=data.behaviour_logp, target_logp=logp_target, rewards=data.rewards,
                         values=values, next_values=nv, terminateds=data.terminateds, ends=data.ends,
                         gamma=config.gamma, clip_rho_threshold=config.vtrace_clip_rho_threshold,
                         clip_pg_rho_threshold=config.vtrace_clip_pg_rho_threshold)
        if returns is None:
            returns, values_np = targets.vs, values.numpy()
        for start in range(0, n, size):
            rows = torch.from_numpy(perm[start:start + size])
            inputs, mb_values = model(data.obs[rows])
            logp = dist.logp(inputs, data.actions[rows])
            with torch.no_grad():
                old = dist.logp(policy.target_model(data.obs[rows])[0], data.actions[rows])
            behaviour = data.behaviour_logp[rows]
            kl = kl_estimate(old, logp, behaviour) if config.use_kl_loss else None
            loss, stats = appo_loss(
                logp, behaviour, old, mb_values, dist.entropy(inputs), targets.vs[rows],
                targets.pg_advantages[rows], kl, clip_param=config.clip_param,
                vf_loss_coeff=config.vf_loss_coeff, entropy_coeff=config.entropy_coeff,
                kl_coeff=policy.kl_coeff, target_worker_clipping=config.target_worker_clipping)
            LOCAL_SYNC.optimizer_step(policy.optimizer, loss, list(model.parameters()),
                                      grad_clip=config.grad_clip)
            policy.num_grad_updates += 1
            history.append(torch.stack(list(stats.values())))
    return update_stats(list(stats), history, returns, values_np, policy)


@pytest.mark.parametrize("training", [
    {"minibatch_size": None, "num_epochs": 3},
    {"minibatch_size": 32, "num_epochs": 2, "use_kl_loss": True},
    {"minibatch_size": 5, "num_epochs": 2},  # minibatches small enough to round differently
])
def test_a_learn_call_equals_the_per_minibatch_target_code(training):
    algo, batch, policy = _appo(**training)
    try:
        rng = np.random.default_rng(0)
        permutations = [rng.permutation(len(batch)) for _ in range(algo.config.num_epochs)]
        reference = type(policy).from_state(policy.get_state())
        want = _reference_learn(algo.config, reference, batch, permutations)
        got = vtrace_learn(algo.config, policy, LOCAL_SYNC, batch=batch, permutations=permutations,
                           appo=True).stats
        # Identical inputs give identical results; the only difference between the two is the
        # target's log-probabilities of minibatch rows, equal up to LOGP_ATOL (above), which the
        # optimizer's steps carry into the weights. Measured on the AVX-512 VM: weights, Adam's
        # moments and statistics bit-equal with minibatches of None and 32 rows; weights up to
        # 3.0e-8 apart with minibatches of 5 (statistics equal).
        state, ref_state = policy.get_state(), reference.get_state()
        for name, got_part, want_part in (("weights", state["weights"], ref_state["weights"]),
                                          ("optimizer", _arrays(state["optimizer"]),
                                           _arrays(ref_state["optimizer"]))):
            assert got_part.keys() == want_part.keys() and got_part, name
            for key, value in got_part.items():
                np.testing.assert_allclose(value, want_part[key], rtol=0, atol=1e-6, err_msg=f"{name} {key}")
        assert got.keys() == want.keys()
        np.testing.assert_allclose([got[k] for k in want], [want[k] for k in want], rtol=1e-6, atol=1e-6)
        assert policy.num_grad_updates == reference.num_grad_updates
    finally:
        algo.stop()


def _arrays(tree: Any, prefix: str = "") -> dict[str, np.ndarray]:
    """The numeric leaves of a state tree by path (an optimizer's moments and step counts)."""
    if isinstance(tree, dict):
        return {k: v for key, sub in tree.items() for k, v in _arrays(sub, f"{prefix}/{key}").items()}
    if isinstance(tree, (list, tuple)):
        return {k: v for i, sub in enumerate(tree) for k, v in _arrays(sub, f"{prefix}/{i}").items()}
    if isinstance(tree, (np.ndarray, int, float)) and not isinstance(tree, bool):
        return {prefix: np.asarray(tree, dtype=np.float64)}
    return {}
