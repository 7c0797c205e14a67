"""The learner's V-trace on a real sampled batch equals a direct call of
:func:`cairn.algorithms.impala.vtrace.vtrace` on tensors this test builds from the batch itself:
behaviour log-probs from the ``action_logp`` column, values from the network, bootstrap values
of the final observations at truncations and fragment ends, none after terminations, and (APPO)
the target network as V-trace's target policy."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import cairn
from cairn.algorithms.impala.fragments import join_fragments
from cairn.algorithms.impala.learn import BatchTensors, batch_vtrace, kl_estimate, target_logp, vtrace_learn
from cairn.algorithms.impala.vtrace import vtrace
from cairn.errors import ConfigError
from cairn.learners import LOCAL_SYNC
from tests.algorithms.impala.small import small, small_ma


def _sampled(algo_name: str):
    # Episodes cut at 15 steps: the batch has truncations, fragment ends and terminations.
    algo = small(algo_name, train_batch_size=120).environment(
        "CartPole-v1", env_config={"max_episode_steps": 15}).build()
    batch = join_fragments(algo.sample_fragments(), "default_policy")
    return algo, batch


def _direct(policy, batch, target_model, gamma, rho, pg_rho):
    obs = torch.from_numpy(batch["obs"])
    actions = torch.from_numpy(batch["actions"])
    with torch.no_grad():
        values = policy.model(obs)[1]
        target_logp = policy.dist.logp(target_model(obs)[0], actions)
        next_obs_values = policy.model.value(torch.from_numpy(batch["next_obs"]))
    ends, terminateds = batch["ends"], batch["terminateds"]
    next_values = torch.zeros_like(values)
    for s in range(len(batch)):  # the next row's value inside a piece, else the final observation's
        next_values[s] = next_obs_values[s] if ends[s] else values[s + 1]
    return vtrace(behaviour_logp=torch.from_numpy(batch["action_logp"]), target_logp=target_logp,
                  rewards=torch.from_numpy(batch["rewards"].astype(np.float32)), values=values,
                  next_values=next_values, terminateds=torch.from_numpy(terminateds),
                  ends=torch.from_numpy(ends), gamma=gamma, clip_rho_threshold=rho,
                  clip_pg_rho_threshold=pg_rho)


@pytest.mark.parametrize("algo_name", ["IMPALA", "APPO"])
def test_learner_vtrace_equals_a_direct_call_on_the_sampled_batch(algo_name):
    algo, batch = _sampled(algo_name)
    try:
        assert batch["truncateds"].any() and batch["terminateds"].any()
        assert (batch["ends"] & ~batch["terminateds"] & ~batch["truncateds"]).any()  # fragment ends
        policy = algo.get_policy()
        # One update first, so that the network is no longer the one that acted (ratios != 1)
        # and, for APPO, the target network differs from the network.
        algo.learn_on_fragments(algo.sample_fragments())
        if algo_name == "APPO":
            with torch.no_grad():
                for p in policy.model.parameters():
                    p.add_(0.05)
            target = policy.target_model
        else:
            target = policy.model
        config = algo.config.copy().training(vtrace_clip_rho_threshold=1.5, vtrace_clip_pg_rho_threshold=None)
        tensors = BatchTensors(batch, policy, torch.device("cpu"))
        rows = target_logp(policy, tensors) if algo_name == "APPO" else None
        got, values = batch_vtrace(config, policy, tensors, target_logp_rows=rows)
        want = _direct(policy, batch, target, config.gamma, 1.5, None)
        obs, actions = torch.from_numpy(batch["obs"]), torch.from_numpy(batch["actions"])
        ratios = torch.exp(policy.dist.logp(target(obs)[0], actions) - torch.from_numpy(batch["action_logp"]))
        assert (ratios - 1).abs().max() > 1e-3  # the correction is exercised
        torch.testing.assert_close(got.vs, want.vs, rtol=0, atol=0)
        torch.testing.assert_close(got.pg_advantages, want.pg_advantages, rtol=0, atol=0)
        np.testing.assert_array_equal(values, policy.model(obs)[1].detach().numpy())
    finally:
        algo.stop()


def test_learner_reads_the_behaviour_column():
    algo, batch = _sampled("IMPALA")
    try:
        policy = algo.get_policy()
        tensors = BatchTensors(batch, policy, torch.device("cpu"))
        before = batch_vtrace(algo.config, policy, tensors, target_logp_rows=None)[0]
        batch["action_logp"] = batch["action_logp"] - 0.5  # the behaviour was less likely
        tensors = BatchTensors(batch, policy, torch.device("cpu"))
        after = batch_vtrace(algo.config, policy, tensors, target_logp_rows=None)[0]
        assert not torch.equal(before.vs, after.vs)
        del batch["action_logp"]
        with pytest.raises(ConfigError, match="action_logp"):
            BatchTensors(batch, policy, torch.device("cpu"))
    finally:
        algo.stop()


def test_appo_learn_refuses_a_policy_without_target_network():
    algo, batch = _sampled("IMPALA")
    try:
        with pytest.raises(ConfigError, match="target network"):
            vtrace_learn(algo.config, algo.get_policy(), LOCAL_SYNC, batch=batch,
                         permutations=[np.arange(len(batch))], appo=True)
    finally:
        algo.stop()


def test_kl_estimate_is_the_kl_in_expectation():
    # Categorical pi_old, pi, mu over 3 actions: the mean over mu's actions of the estimate,
    # weighted by mu, is KL(pi_old || pi) exactly.
    old = torch.log(torch.tensor([0.2, 0.5, 0.3]))
    new = torch.log(torch.tensor([0.4, 0.4, 0.2]))
    mu = torch.log(torch.tensor([0.6, 0.1, 0.3]))
    estimate = (torch.exp(mu) * kl_estimate(old, new, mu)).sum()
    exact = (torch.exp(old) * (old - new)).sum()
    torch.testing.assert_close(estimate, exact)


def test_appo_target_network_follows_the_update_frequency():
    algo = small("APPO", target_network_update_freq=2, use_kl_loss=True, kl_target=1e-6).build()
    try:
        policy = algo.get_policy()
        algo.train()  # 1 train batch: the target network has not moved
        assert policy.num_train_batches == 1 and policy.kl_coeff == 1.0
        assert not all(torch.equal(a, b) for a, b in zip(policy.model.parameters(),
                                                         policy.target_model.parameters()))
        algo.train()  # 2: copied, and the KL (far over its tiny target) raised the weight
        assert all(torch.equal(a, b) for a, b in zip(policy.model.parameters(),
                                                     policy.target_model.parameters()))
        assert policy.kl_coeff == 1.5
    finally:
        algo.stop()


@pytest.mark.parametrize("algo_name", ["IMPALA", "APPO"])
def test_a_recurrent_policy_spec_beside_a_feed_forward_one_trains(algo_name):
    config = small_ma(algo_name).multi_agent(policies={
        "p0": cairn.PolicySpec(config={"model": {"hidden": [8], "use_lstm": True, "lstm_cell_size": 4,
                                                  "max_seq_len": 5}}),
        "p1": cairn.PolicySpec()})
    algo = config.build()
    try:
        learners = algo.train()["learners"]
        assert "num_sequences" in learners["p0"] and "num_sequences" not in learners["p1"]
        assert all(np.isfinite(stats["total_loss"]) for stats in learners.values())
    finally:
        algo.stop()


def test_sync_fragments_carry_the_current_weights_version():
    algo = small("IMPALA").build()
    try:
        algo.train()
        fragments = algo.sample_fragments()
        assert {f.weights_version for f in fragments} == {1}
        assert sum(len(f.batches["default_policy"]) for f in fragments) >= algo.config.train_batch_size
        stats = algo.learn_on_fragments(fragments)["default_policy"]
        assert (stats["policy_lag_mean"], stats["policy_lag_max"]) == (0.0, 0.0)
        assert algo.weights_version == 2
        # A fragment acted two updates ago is reported as lagging by 2.
        old = type(fragments[0])(fragments[0].batches, 0)
        stats = algo.learn_on_fragments([old, *fragments[1:]])["default_policy"]
        assert stats["policy_lag_max"] == 2.0 and 0 < stats["policy_lag_mean"] < 2.0
    finally:
        algo.stop()


def _to_default(agent_id: str, **kwargs: object) -> str:
    return "default_policy"


def test_appo_refuses_a_policy_without_target_network_before_learning():
    config = small("APPO").multi_agent(
        policies={"default_policy": cairn.PolicySpec(policy_class=cairn.Policy)})
    with pytest.raises(ConfigError, match="without a target network"):
        config.build()
    algo = small("APPO").build()
    try:
        policy = algo.get_policy()
        spec = cairn.PolicySpec(cairn.Policy, policy.observation_space, policy.action_space)
        algo.add_policy("plain", spec, policy_mapping_fn=_to_default)
        before = algo.get_policy().get_weights()
        with pytest.raises(ConfigError, match="plain"):
            algo.train()
        after = algo.get_policy().get_weights()
        assert all(np.array_equal(before[k], after[k]) for k in before)  # nothing learnt
        assert algo.weights_version == 0
    finally:
        algo.stop()


@pytest.mark.parametrize("algo_name", ["IMPALA", "APPO"])
def test_an_update_that_raises_after_another_policy_learned_counts_a_new_weights_version(
        algo_name, tmp_path, monkeypatch):
    """p0 learns, then p1's update raises: p0's weights are new, so they get a new
    ``weights_version`` (remote runners are sent weights when the version moved, and fragments
    carry it for the policy lag): one version never names two sets of weights. A checkpoint
    saved then resumes exactly."""
    from tests.algorithms.impala.small import small_ma
    from tests.fault_injection import InjectedError
    from tests.helpers import assert_trains_identically

    algo = small_ma(algo_name).build()
    learn = algo.learn

    def p1_fails_once(fn, policy_id, **inputs):
        if policy_id == "p1":
            monkeypatch.setattr(algo, "learn", learn)
            raise InjectedError("injected failure in p1's update")
        return learn(fn, policy_id, **inputs)

    try:
        algo.train()
        version, before = algo.weights_version, algo.get_policy("p0").get_weights()
        monkeypatch.setattr(algo, "learn", p1_fails_once)
        with pytest.raises(InjectedError):
            algo.train()
        after = algo.get_policy("p0").get_weights()
        assert not all(np.array_equal(before[k], after[k]) for k in before), "p0 did not learn"
        assert algo.weights_version == version + 1 and algo.iteration == 1
        fragments = algo.sample_fragments()
        assert {f.weights_version for f in fragments} == {version + 1}
        restored = cairn.Algorithm.from_checkpoint(algo.save(tmp_path / "after_fault"))
        try:
            assert_trains_identically(algo, restored)
        finally:
            restored.stop()
    finally:
        algo.stop()


@pytest.mark.parametrize("algo_name", ["IMPALA", "APPO"])
@pytest.mark.parametrize("model", [{"hidden": [16, 16]},
                                   {"hidden": [16], "use_lstm": True, "lstm_cell_size": 8, "max_seq_len": 4}])
def test_fragments_whose_done_columns_are_integers_learn_as_with_bools(algo_name, model):
    """learn_on_fragments takes fragments built by a caller, whose done columns may be 0/1
    integers (read back from a file, say). V-trace read them as bools, but the next values
    indexed rows with them, so row 1 lost its next value and each piece end took the next
    piece's first value instead of its bootstrap: other weights, and no error."""
    from cairn.algorithms.impala import Fragment
    from cairn.env_runner.sample_batch import SampleBatch

    algo = small(algo_name, train_batch_size=120, model=model).environment(
        "CartPole-v1", env_config={"max_episode_steps": 15}).build()
    batch = join_fragments(algo.sample_fragments(), "default_policy")
    twin = cairn.Algorithm.from_state(algo.get_state())
    try:
        as_ints = SampleBatch({k: v.astype(np.int8) if v.dtype == bool else v for k, v in batch.items()})
        algo.learn_on_fragments([Fragment({"default_policy": batch}, algo.weights_version)])
        twin.learn_on_fragments([Fragment({"default_policy": as_ints}, twin.weights_version)])
        for a, b in zip(algo.get_policy().model.parameters(), twin.get_policy().model.parameters()):
            torch.testing.assert_close(a, b, rtol=0, atol=0)
    finally:
        algo.stop()
        twin.stop()
