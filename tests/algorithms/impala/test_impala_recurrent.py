"""IMPALA and APPO with recurrent (LSTM) policies, learnt over sequences as PPO's: the
learner's V-trace inputs (values, bootstrap values, target log-probabilities) and minibatch
forward passes equal the network run one step at a time from each sequence's recorded state,
written out here; a run resumes exactly; DDP learners are refused."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import cairn
from cairn.algorithms.impala.fragments import join_fragments
from cairn.algorithms.impala.learn import BatchTensors
from cairn.algorithms.impala.recurrent import sequences_vtrace
from cairn.algorithms.impala.vtrace import vtrace
from cairn.algorithms.ppo.recurrent import Sequences
from cairn.errors import ConfigError
from tests.algorithms.impala.small import small
from tests.helpers import assert_trains_identically

ALGOS = ["IMPALA", "APPO"]
#: Sequences of 7 steps cut fragments of 20 steps mid-piece; CartPole's episodes end within.
LSTM = {"hidden": [16], "use_lstm": True, "lstm_cell_size": 8, "max_seq_len": 7}


def _lstm(algo_name: str, **training: object) -> cairn.AlgorithmConfig:
    return small(algo_name, model=LSTM, **training)


def _reference_sequences(ends: np.ndarray, max_seq_len: int) -> list[list[int]]:
    """The rows of each sequence: a new one after each piece end and every max_seq_len steps."""
    out: list[list[int]] = []
    current: list[int] = []
    for row, end in enumerate(ends):
        current.append(row)
        if end or len(current) == max_seq_len:
            out.append(current)
            current = []
    assert not current  # a batch's last row ends a piece (its fragment's end)
    return out


def _step_by_step(model: torch.nn.Module, batch: cairn.SampleBatch, rows: list[int],
                  extra_obs: np.ndarray | None = None,
                  ) -> tuple[list[torch.Tensor], list[float], float | None]:
    """The network over one sequence, one step at a time, from the state recorded with its first
    row: each step's action inputs and value, and the value of ``extra_obs`` after the last step."""
    state = [torch.from_numpy(batch[f"state_in_{k}"][rows[0]])[None] for k in range(2)]
    inputs, values = [], []
    with torch.no_grad():
        for row in rows:
            step_inputs, value, state = model(torch.from_numpy(batch["obs"][row])[None, None], state)
            inputs.append(step_inputs[0, 0])
            values.append(float(value[0, 0]))
        after = None
        if extra_obs is not None:
            after = float(model(torch.from_numpy(extra_obs)[None, None], state)[1][0, 0])
    return inputs, values, after


@pytest.mark.parametrize("algo_name", ALGOS)
def test_vtrace_inputs_and_minibatches_equal_the_network_step_by_step(algo_name):
    # APPO: no target update within the two batches below, so the target network is not the network.
    training = {"target_network_update_freq": 3} if algo_name == "APPO" else {}
    algo = _lstm(algo_name, train_batch_size=120, **training).build()
    try:
        algo.train()
        policy = algo.get_policy()
        batch = join_fragments(algo.sample_fragments(), "default_policy")
        assert batch is not None
        # One update on another batch: the network now differs from the weights that acted.
        algo.learn_on_fragments(algo.sample_fragments())
        ends = batch["ends"]
        sequences = _reference_sequences(ends, LSTM["max_seq_len"])
        assert any(len(s) == LSTM["max_seq_len"] and not ends[s[-1]] for s in sequences)  # cut mid-piece
        assert (ends & batch["terminateds"]).any() and (ends & ~batch["terminateds"]).any()
        networks = {"model": policy.model}
        if algo_name == "APPO":
            networks["target"] = policy.target_model
            assert any(not torch.equal(a, b) for a, b in zip(policy.model.state_dict().values(),
                                                               policy.target_model.state_dict().values()))
        data = BatchTensors(batch, policy, torch.device("cpu"))
        seqs = Sequences(batch, policy, data.obs)
        assert len(seqs) == len(sequences)
        reference: dict[str, tuple[torch.Tensor, np.ndarray, np.ndarray]] = {}
        for name, net in networks.items():
            inputs, values = [None] * len(batch), np.zeros(len(batch), np.float32)
            next_values = np.zeros(len(batch), np.float32)
            for rows in sequences:
                last = rows[-1]
                bootstrap = ends[last] and not batch["terminateds"][last]
                step_inputs, step_values, after = _step_by_step(
                    net, batch, rows, batch["next_obs"][last] if bootstrap else None)
                for row, x, v in zip(rows, step_inputs, step_values, strict=True):
                    inputs[row], values[row] = x, v
                if after is not None:
                    next_values[last] = after
            for row in range(len(batch) - 1):
                if not ends[row]:  # inside a piece: the next row's value, from its own sequence
                    next_values[row] = values[row + 1]
            logp = policy.dist.logp(torch.stack(inputs), data.actions)
            reference[name] = (logp, values, next_values)
            # The network over the sequences, as the learner runs it.
            np.testing.assert_allclose(seqs.logp(net, policy.dist, data.actions).numpy(), logp.numpy(),
                                       rtol=1e-5, atol=1e-5)
        # V-trace as the learner computes it, against vtrace() on the step-by-step columns.
        config = algo.config
        target_logp = None if algo_name == "IMPALA" else reference["target"][0]
        targets, values_np = sequences_vtrace(config, policy, data, seqs, target_logp_rows=target_logp)
        logp, values, next_values = reference["model"]
        expected = vtrace(behaviour_logp=data.behaviour_logp,
                          target_logp=logp if target_logp is None else target_logp,
                          rewards=data.rewards, values=torch.from_numpy(values),
                          next_values=torch.from_numpy(next_values), terminateds=data.terminateds,
                          ends=data.ends, gamma=config.gamma,
                          clip_rho_threshold=config.vtrace_clip_rho_threshold,
                          clip_pg_rho_threshold=config.vtrace_clip_pg_rho_threshold)
        np.testing.assert_allclose(values_np, values, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(targets.vs.numpy(), expected.vs.numpy(), rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(targets.pg_advantages.numpy(), expected.pg_advantages.numpy(),
                                   rtol=1e-4, atol=1e-4)
        # A minibatch of shuffled sequences: each real step's row, inputs and value.
        chosen = np.random.default_rng(0).permutation(len(sequences))[:5]
        with torch.no_grad():
            mb_inputs, mb_values, mb_rows = seqs.forward(policy.model, chosen)
        expected_rows = [row for s in chosen for row in sequences[s]]
        assert mb_rows.tolist() == expected_rows
        np.testing.assert_allclose(mb_values.numpy(), values[expected_rows], rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(policy.dist.logp(mb_inputs, data.actions[mb_rows]).numpy(),
                                   logp[expected_rows].numpy(), rtol=1e-5, atol=1e-5)
    finally:
        algo.stop()


@pytest.mark.parametrize("algo_name", ALGOS)
def test_recurrent_policy_trains_and_resumes_exactly(algo_name, tmp_path):
    training = {"use_kl_loss": True, "target_network_update_freq": 2} if algo_name == "APPO" else {}
    algo = _lstm(algo_name, **training).env_runners(observation_filter="MeanStdFilter").build()
    try:
        for _ in range(3):  # APPO: saved between two target updates, with an adapted KL weight
            stats = algo.train()["learners"]["default_policy"]
        assert stats["num_sequences"] > 80 / LSTM["max_seq_len"] and np.isfinite(stats["total_loss"])
        if algo_name == "APPO":
            assert stats["curr_kl_coeff"] != 1.0 and algo.get_policy().num_train_batches % 2 == 1
        restored = cairn.Algorithm.from_checkpoint(algo.save(tmp_path / "c"))
        assert_trains_identically(algo, restored)
        restored.stop()
    finally:
        algo.stop()


@pytest.mark.parametrize("algo_name", ALGOS)
def test_minibatches_cover_every_sequence_once_per_epoch(algo_name):
    # minibatch_size None: the whole batch in one step per epoch; 30 rows: sequences group.
    for minibatch_size, epochs in ((None, 1), (30, 2)):
        algo = _lstm(algo_name, minibatch_size=minibatch_size, num_epochs=epochs).build()
        try:
            stats = algo.train()["learners"]["default_policy"]
            batch_rows = algo.counters["num_env_steps_trained_lifetime"]
            assert batch_rows == 80
            per_epoch = 1 if minibatch_size is None else -(-batch_rows // minibatch_size)
            # A sequence joins the minibatch its first step falls in: at most one group per
            # minibatch_size rows, at least one step.
            assert epochs <= stats["num_grad_updates"] <= epochs * per_epoch
        finally:
            algo.stop()


def test_ddp_learners_are_refused_for_recurrent_policies():
    with pytest.raises(ConfigError, match="recurrent"):
        _lstm("APPO").learners(num_learners=2).validate()


@pytest.mark.parametrize("algo_name", ALGOS)
def test_a_users_recurrent_model_trains_and_resumes_exactly(algo_name, tmp_path):
    from tests.recurrent.nets import TinyGRU

    algo = small(algo_name, model={"custom_model": TinyGRU, "max_seq_len": 5}).build()
    try:
        stats = algo.train()["learners"]["default_policy"]
        assert stats["num_sequences"] >= 80 / 5 and np.isfinite(stats["total_loss"])
        restored = cairn.Algorithm.from_checkpoint(algo.save(tmp_path / "c"))
        assert_trains_identically(algo, restored)
        restored.stop()
    finally:
        algo.stop()


def test_appos_kl_adaptation_measures_the_kl_over_sequences(monkeypatch):
    """After a train batch, APPO's KL weight adapts to the KL between the network and the target
    network over the batch, both run over its sequences: equal to the networks run one step at a
    time from each sequence's recorded state."""
    from cairn.algorithms.impala import learn
    from cairn.algorithms.impala.learn import after_train_batch, kl_estimate

    algo = _lstm("APPO", use_kl_loss=True, target_network_update_freq=3, lr=0.01).build()
    try:
        for _ in range(2):  # the network moves away from its target (no copy before 3 batches)
            algo.train()
        policy = algo.get_policy()
        batch = join_fragments(algo.sample_fragments(), "default_policy")
        assert batch is not None
        logps = {}
        for name, net in (("model", policy.model), ("target", policy.target_model)):
            inputs = [None] * len(batch)
            for rows in _reference_sequences(batch["ends"], LSTM["max_seq_len"]):
                for row, x in zip(rows, _step_by_step(net, batch, rows)[0], strict=True):
                    inputs[row] = x
            logps[name] = policy.dist.logp(torch.stack(inputs), torch.from_numpy(batch["actions"]))
        behaviour = torch.from_numpy(batch["action_logp"])
        expected = float(kl_estimate(logps["target"], logps["model"], behaviour).mean())
        assert expected > 1e-4  # the two networks differ
        seen: list[float] = []
        real = learn.update_kl_coeff

        def recording(coeff: float, kl: float, **kwargs: float) -> float:
            seen.append(kl)
            return real(coeff, kl, **kwargs)

        monkeypatch.setattr(learn, "update_kl_coeff", recording)
        assert policy.num_train_batches == 2  # the next batch is the third: adapt, then copy
        after_train_batch(algo.config, policy, batch)
        assert len(seen) == 1
        np.testing.assert_allclose(seen[0], expected, rtol=1e-4, atol=1e-7)
        assert all(torch.equal(a, b) for a, b in zip(policy.model.state_dict().values(),
                                                      policy.target_model.state_dict().values()))
    finally:
        algo.stop()
