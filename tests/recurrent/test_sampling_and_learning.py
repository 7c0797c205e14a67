"""Recurrent PPO: the env runner's recorded states, the sequence cutting, and the learner."""

import numpy as np
import torch

import cairn
from cairn.algorithms.ppo.recurrent import padded_rows, sequence_starts
from cairn.envs import make_cue_recall
from tests.helpers import small_ma_ppo

LSTM = {"use_lstm": True, "lstm_cell_size": 8, "max_seq_len": 4}


def cue_config(**training):
    defaults = {"train_batch_size": 96, "minibatch_size": 30, "num_epochs": 2, "model": LSTM}
    return (cairn.PPOConfig().environment(make_cue_recall, env_config={"delay": 3})
            .env_runners(num_envs_per_env_runner=3).training(**{**defaults, **training}).debugging(seed=0))


def test_sequences_cut_at_piece_ends_and_every_max_seq_len_steps():
    ends = np.array([0, 0, 0, 0, 0, 1, 0, 1, 1, 0, 0, 0, 0, 1], bool)
    starts, lengths = sequence_starts(ends, 2)
    assert starts.tolist() == [0, 2, 4, 6, 8, 9, 11, 13]
    assert lengths.tolist() == [2, 2, 2, 2, 1, 2, 2, 1]
    rows, mask = padded_rows(starts, lengths, 2)
    assert rows[mask].tolist() == list(range(14))  # row-major real steps are the rows in order
    assert rows[4].tolist() == [8, 8] and mask[4].tolist() == [True, False]


def test_recorded_states_are_the_states_the_policy_acted_from():
    algo = cue_config().build()
    runner = algo.env_runner_group.local
    policy = algo.get_policy()
    batch = runner.sample(8)["default_policy"]
    assert {"state_in_0", "state_in_1"} <= set(batch) and batch["state_in_0"].shape == (24, 16)
    # Replay each env's 8 steps with the policy: the state before each step is the recorded one,
    # and it restarts from zeros after each episode's end.
    for env in range(3):
        rows = slice(8 * env, 8 * env + 8)
        h, c = batch["state_in_0"][rows][0], batch["state_in_1"][rows][0]
        assert not h.any() and not c.any()  # each env's first episode starts from zeros
        for t in range(8):
            r = 8 * env + t
            # (acting ran on the 3 envs' batch: rounding differs from this batch of one)
            np.testing.assert_allclose(batch["state_in_0"][r], h, atol=1e-6, rtol=0)
            np.testing.assert_allclose(batch["state_in_1"][r], c, atol=1e-6, rtol=0)
            with torch.inference_mode():
                _, _, (h_t, c_t) = policy.model(torch.from_numpy(batch["obs"][r][None, None]),
                                                [torch.from_numpy(h[None]), torch.from_numpy(c[None])])
            h, c = h_t[0].numpy(), c_t[0].numpy()
            if batch["terminateds"][r]:
                h, c = np.zeros_like(h), np.zeros_like(c)
        assert batch["terminateds"][rows].any()  # episodes of 4 steps: states were reset


def test_padded_sequences_give_the_step_by_step_outputs():
    """The learner's padded forward pass equals acting step by step: padding never leaks."""
    algo = cue_config().build()
    policy = algo.get_policy()
    batch = algo.env_runner_group.local.sample(10)["default_policy"]
    starts, lengths = sequence_starts(batch["ends"], 4)
    rows, mask = padded_rows(starts, lengths, 4)
    obs = torch.from_numpy(batch["obs"])
    with torch.no_grad():
        state = [torch.from_numpy(batch[f"state_in_{k}"][starts]) for k in range(2)]
        inputs, _, _ = policy.model(obs[torch.from_numpy(rows)], state)
        step_inputs = []
        for r in range(len(obs)):
            row_state = [torch.from_numpy(batch[f"state_in_{k}"][r][None]) for k in range(2)]
            step_inputs.append(policy.model(obs[r][None, None], row_state)[0][0, 0])
    torch.testing.assert_close(inputs[torch.from_numpy(mask)], torch.stack(step_inputs), atol=1e-5, rtol=0)


def test_minibatches_need_not_be_a_multiple_of_max_seq_len_and_the_policy_learns_something():
    algo = cue_config(minibatch_size=30).build()
    before = algo.get_policy().get_weights()
    result = algo.train()
    stats = result["learners"]["default_policy"]
    # 96 steps in 3 envs of 32 steps, episodes of 4 steps: sequences of 4; minibatches of ~30 steps.
    assert stats["num_sequences"] == 24
    assert stats["num_grad_updates"] == 2 * 4  # 2 epochs x ceil(96 / 30)
    after = algo.get_policy().get_weights()
    assert any(not np.array_equal(before[k], after[k]) for k in before if k.startswith("lstm"))


def test_multi_agent_recurrent_policies_carry_a_state_per_agent():
    algo = small_ma_ppo(2, model=LSTM).build()
    runner = algo.env_runner_group.local
    first = runner.sample(5)
    states = runner.recurrent_states.states
    assert {agent for _, agent in states} == {"agent_0", "agent_1"}
    then = runner.sample(11)
    for pid in ("p0", "p1"):
        rows = len(first[pid]) + len(then[pid])
        assert then[pid]["state_in_0"].shape == (len(then[pid]), 16) and rows >= 8
    # Step until one agent's pole has fallen while the other's still stands (which one, and when,
    # follows the seed): its trajectory ended, and its state with it; the agent still in the
    # episode keeps its own.
    for _ in range(500):
        if len(runner.envs[0].agents) == 1:
            break
        then = runner.sample(1)
    (stays,) = runner.envs[0].agents
    (gone,) = {"agent_0", "agent_1"} - {stays}
    gone_pid = {"agent_0": "p0", "agent_1": "p1"}[gone]
    assert then[gone_pid]["terminateds"][-1]
    assert {agent for _, agent in runner.recurrent_states.states} == {stays}
    algo.train()
    assert algo.get_policy("p0").num_grad_updates > 0


def test_async_envs_carry_the_same_states_as_sync():
    """The states live in the runner, not in the env children: "async" samples as "sync" does."""
    batches = []
    for mode in ("sync", "async"):
        algo = cue_config().env_runners(gym_env_vectorize_mode=mode).build()
        try:
            algo.train()
            batches.append(algo.env_runner_group.local.sample(6)["default_policy"])
        finally:
            algo.stop()
    for column in ("obs", "actions", "state_in_0", "state_in_1"):
        np.testing.assert_array_equal(batches[0][column], batches[1][column])
