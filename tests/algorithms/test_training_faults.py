"""An env raising mid-iteration, for a recurrent PPO policy and for the off-policy algorithms
(docs/fault-tolerance.md): the reset envs' recurrent states start afresh, and a replay buffer
holds only whole transitions of sample rounds that completed, each counted."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

import cairn
from tests.fault_injection import (
    LENGTH,
    SAMPLES,
    InjectedError,
    RaiseOnce,
    check_recovers,
    make_step_record_env,
    raise_in,
    step_record_env_config,
)
from tests.helpers import assert_resumes_exactly, small_ma_dqn, small_ma_sac, small_ppo


@pytest.mark.slow
def test_lstm_ppo_restarts_the_recurrent_state_of_reset_envs(tmp_path: Path) -> None:
    config = (small_ppo(train_batch_size=64, minibatch_size=32)
              .environment(make_step_record_env,
                           env_config=step_record_env_config(tmp_path, fail_in="step", fail_at=39))
              .env_runners(num_envs_per_env_runner=2).callbacks(RaiseOnce)
              .training(model={"hidden": [16], "use_lstm": True, "lstm_cell_size": 8, "max_seq_len": 4}))
    algo = config.build()

    def first_rows_start_episodes(algo: cairn.Algorithm) -> None:
        # The sample after the failure: each env starts a new episode, from the initial state.
        (batch,) = [s["default_policy"] for s in SAMPLES[-1:]]
        first = np.unique(np.asarray(batch["streams"]), return_index=True)[1]
        assert np.all(np.asarray(batch["obs"])[first, 0] == 0), "an env went on with its old episode"
        starts = np.asarray(batch["obs"])[:, 0] == 0
        columns = [c for c in batch if c.startswith("state_in")]
        assert columns, "no recurrent state recorded"
        for column in columns:
            assert np.all(np.asarray(batch[column])[starts] == 0), f"{column}: a stale state at a start"

    try:
        check_recovers(algo, tmp_path, InjectedError, arm=lambda: raise_in(()),
                       after_fault=first_rows_start_episodes)
    finally:
        algo.stop()


def _off_policy(kind: str, env_config: dict[str, Any], **training: Any) -> cairn.AlgorithmConfig:
    """``kind`` ("dqn", "sac", or "td3" with ``policy_delay=2``) on 2 StepRecordEnv copies of
    ``env_config``, rounds of 8 steps each, minibatches of 16, the replay buffer stored, seed 1;
    ``training`` (the batch size, when learning starts, a replay ratio) on top."""
    config: Any = (cairn.DQNConfig().env_runners(rollout_fragment_length=8) if kind == "dqn"
                   else cairn.SACConfig().training(train_freq=8) if kind == "sac"
                   else cairn.TD3Config().training(policy_delay=2, train_freq=8))
    return (config.environment(make_step_record_env, env_config=env_config)
            .training(minibatch_size=16, model={"hidden": [16]} if kind == "dqn" else {"hidden": [16, 16]},
                      **training)
            .env_runners(num_envs_per_env_runner=2)
            .checkpointing(store_replay_buffer=True).debugging(seed=1))


def _fail_p0_once(monkeypatch: pytest.MonkeyPatch, algo: cairn.Algorithm) -> None:
    """``algo.learn`` raises at p0's next update, before it starts, and is itself again after."""
    learn = algo.learn

    def failing_once(fn: Any, policy_id: str, **inputs: Any) -> Any:
        if policy_id == "p0":
            monkeypatch.setattr(algo, "learn", learn)
            raise InjectedError("injected failure in p0's loss")
        return learn(fn, policy_id, **inputs)

    monkeypatch.setattr(algo, "learn", failing_once)


def _fail_the_critic_for_the_actor(monkeypatch: pytest.MonkeyPatch, policy: Any, kind: str, *,
                                   at: int = 1) -> None:
    """The critic as the actor's loss calls it (``detach=True``; SAC's ``forward``, TD3's
    ``first_q``), after the critics' optimizer step, raises at its ``at``-th such call from now
    on, and is itself again after."""
    critic = policy.model.critic
    name = "forward" if kind == "sac" else "first_q"
    original = getattr(critic, name)
    actor_calls = []

    def raising_once(*args: Any, **kwargs: Any) -> Any:
        if kwargs.get("detach"):
            actor_calls.append(1)
            if len(actor_calls) == at:
                monkeypatch.delattr(critic, name)
                raise InjectedError("injected failure in the critic, for the actor's loss")
        return original(*args, **kwargs)

    monkeypatch.setattr(critic, name, raising_once)


def assert_replay_holds_counted_steps(algo: cairn.Algorithm) -> None:
    """Every transition in the replay buffer is one real step of its episode, and the buffer
    holds exactly the env steps the counters count (n_step=1, a buffer larger than the run)."""
    state = algo.replay_buffers["default_policy"].get_state()
    columns = state["columns"]
    obs, next_obs = columns["obs"], columns["next_obs"]
    assert np.array_equal(next_obs[:, 0], obs[:, 0] + 1) and np.array_equal(next_obs[:, 1], obs[:, 1])
    assert np.array_equal(columns["terminateds"], next_obs[:, 0] == LENGTH)
    assert state["size"] == algo.counters["num_env_steps_sampled_lifetime"]


@pytest.mark.parametrize("kind", ["dqn", "sac"])
def test_off_policy_replay_holds_only_whole_rounds(tmp_path: Path, kind: str) -> None:
    # 2 envs x 8 steps a round, 4 rounds an iteration: the fault (each env's step 43) strikes
    # in round 2 of iteration 2, after round 1 was stored and learned from.
    faults = step_record_env_config(tmp_path, fail_in="step", fail_at=43, continuous=kind == "sac")
    algo = _off_policy(kind, faults, train_batch_size=64, num_steps_sampled_before_learning_starts=16).build()
    try:
        check_recovers(algo, tmp_path, InjectedError, whole_iteration=False,
                       after_fault=assert_replay_holds_counted_steps)
        assert_replay_holds_counted_steps(algo)
    finally:
        algo.stop()


def test_ppo_learning_that_raises_does_not_count_the_iteration(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """A model raising in the loss (after the sample completed): the iteration does not count,
    the envs go on in step (not reset), and a checkpoint saved then resumes exactly."""
    config = (small_ppo(train_batch_size=64, minibatch_size=32)
              .environment(make_step_record_env, env_config=step_record_env_config(tmp_path))
              .env_runners(num_envs_per_env_runner=2))
    algo = config.build()
    learn = algo.learn

    def failing_once(*args: Any, **kwargs: Any) -> Any:
        monkeypatch.setattr(algo, "learn", learn)
        raise InjectedError("injected failure in the model's loss")

    try:
        check_recovers(algo, tmp_path, InjectedError, whole_iteration=False,
                       arm=lambda: monkeypatch.setattr(algo, "learn", failing_once))
    finally:
        algo.stop()


@pytest.mark.parametrize("make_config", [small_ma_dqn, small_ma_sac], ids=["dqn", "sac"])
def test_multi_agent_learning_that_raises_keeps_every_policys_transitions(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, make_config: Any) -> None:
    """p0's learning raises in a round: the round is counted (each policy's sampled steps), so
    p1's transitions of it are in p1's buffer too, though p1 comes after p0 in the round; and a
    checkpoint saved then resumes exactly."""
    algo = make_config().training(n_step=1).build()

    def assert_each_buffer_holds_its_policys_steps() -> None:
        for pid in ("p0", "p1"):
            stored = len(algo.replay_buffers[pid])
            assert stored == algo.policies[pid].global_timestep, f"{pid}: a sampled transition is not stored"

    try:
        algo.train()
        assert_each_buffer_holds_its_policys_steps()
        _fail_p0_once(monkeypatch, algo)
        with pytest.raises(InjectedError):
            algo.train()
        assert_each_buffer_holds_its_policys_steps()
        assert_resumes_exactly(algo, tmp_path / "at_fault")
        assert_each_buffer_holds_its_policys_steps()
    finally:
        algo.stop()


@pytest.mark.parametrize("kind", ["dqn", "sac"])
def test_replay_ratio_makes_the_updates_owed_after_one_that_raised(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str) -> None:
    """A round of 16 rows owes 3 updates (training_intensity 3, minibatches of 16); its second
    update raises, before it changes anything: the round's third update and the one that raised
    stay owed and are made in the next round, so that over the run the updates made are exactly
    the ratio's share of the rows sampled (the credit was taken for all 3 before any ran, so
    both were lost for good)."""
    algo = _off_policy(kind, {"length": LENGTH, "continuous": kind == "sac"}, train_batch_size=64,
                       num_steps_sampled_before_learning_starts=0, training_intensity=3.0).build()
    learn, calls = algo.learn, []

    def failing_second_of_a_round(fn: Any, policy_id: str, **inputs: Any) -> Any:
        calls.append(policy_id)
        if len(calls) == 8:  # round 3 (updates 7, 8, 9): the second
            raise InjectedError("injected failure in the model's loss")
        return learn(fn, policy_id, **inputs)

    def assert_updates_are_the_ratios() -> None:
        owed = algo.counters["num_env_steps_sampled_lifetime"] * 3 // 16
        assert algo.get_policy().num_grad_updates == owed
        assert algo.counters["num_env_steps_trained_lifetime"] == 16 * owed

    monkeypatch.setattr(algo, "learn", failing_second_of_a_round)
    try:
        with pytest.raises(InjectedError):
            algo.train()
        assert algo.counters["num_env_steps_sampled_lifetime"] == 48  # round 3 was counted
        assert algo.get_policy().num_grad_updates == 7
        for _ in range(2):
            algo.train()
            assert_updates_are_the_ratios()
        assert_resumes_exactly(algo, tmp_path / "c")
        assert_updates_are_the_ratios()
    finally:
        algo.stop()


@pytest.mark.parametrize("make_config", [small_ma_dqn, small_ma_sac], ids=["dqn", "sac"])
def test_replay_ratio_keeps_the_round_owed_to_a_policy_after_one_that_raised(
        monkeypatch: pytest.MonkeyPatch, make_config: Any) -> None:
    """p0's update raises in a round, before p1 learned in it: p1's share of that round's rows
    stays owed too (it was never credited: p1 made 2 updates fewer than the ratio's share for
    good), so that over the run each policy makes exactly the ratio's share of its rows."""
    algo = make_config().training(training_intensity=4.0, minibatch_size=16,
                                  num_steps_sampled_before_learning_starts=0, n_step=1).build()
    try:
        algo.train()
        _fail_p0_once(monkeypatch, algo)
        with pytest.raises(InjectedError):
            algo.train()
        for _ in range(2):
            algo.train()
        for pid in ("p0", "p1"):  # learning from the first row: the credit is rows * 4 / 16
            policy = algo.policies[pid]
            assert policy.num_grad_updates == policy.global_timestep * 4 // 16, pid
    finally:
        algo.stop()


def _adam_steps(policy: Any, group: str) -> int:
    """How many optimizer steps the parameters of ``group`` ("critic", "actor") took."""
    (steps,) = {int(policy.optimizer.state[p]["step"]) if p in policy.optimizer.state else 0
                for g in policy.optimizer.param_groups if g["name"] == group for p in g["params"]}
    return steps


@pytest.mark.parametrize("kind", ["sac", "td3"])
def test_an_actor_update_that_raises_counts_the_critic_step_it_made(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str) -> None:
    """The critic, called for the actor's loss (after the critics' optimizer step), raises once:
    ``num_grad_updates`` counts that step, as the critic's parameters took it (it was not
    counted: the counter and TD3's ``policy_delay`` schedule, which reads it, lagged the critic
    by a step for good); the actor took every update but that one (TD3: every ``policy_delay``-th
    but that one), and a checkpoint saved then resumes exactly."""
    from cairn.algorithms.td3.learn import actor_update_due

    algo = _off_policy(kind, {"length": LENGTH, "continuous": True}, train_batch_size=32,
                       num_steps_sampled_before_learning_starts=16).build()
    policy = algo.get_policy()

    def actor_updates(steps: int) -> int:
        return steps if kind == "sac" else sum(actor_update_due(k, 2) for k in range(steps))

    def assert_counts_match_the_parameters(failed: int) -> None:
        steps = policy.num_grad_updates
        assert _adam_steps(policy, "critic") == steps
        assert _adam_steps(policy, "actor") == actor_updates(steps) - failed

    try:
        algo.train()
        assert_counts_match_the_parameters(failed=0)
        _fail_the_critic_for_the_actor(monkeypatch, policy, kind)
        with pytest.raises(InjectedError):
            algo.train()
        assert_counts_match_the_parameters(failed=1)
        assert_resumes_exactly(algo, tmp_path / "c")
        assert_counts_match_the_parameters(failed=1)
    finally:
        algo.stop()


@pytest.mark.parametrize("kind", ["sac", "td3"])
def test_replay_ratio_counts_an_update_whose_critic_stepped_before_the_actor_raised(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str) -> None:
    """With a replay ratio (2 updates a round of 16 rows), the critic, called for the actor's
    loss (after the critics' optimizer step), raises once: that update was made (the critics
    took it and ``num_grad_updates`` counts it), so the ratio's credit and
    ``num_env_steps_trained_lifetime`` count it too. They did not: the next round made it
    again, one critic step more than the ratio's share of the rows, for good."""
    algo = _off_policy(kind, {"length": LENGTH, "continuous": True}, train_batch_size=32,
                       num_steps_sampled_before_learning_starts=0, training_intensity=2.0).build()
    policy = algo.get_policy()

    def assert_updates_are_the_ratios() -> None:
        owed = algo.counters["num_env_steps_sampled_lifetime"] * 2 // 16
        assert policy.num_grad_updates == owed
        assert _adam_steps(policy, "critic") == owed
        assert algo.counters["num_env_steps_trained_lifetime"] == 16 * owed
        assert algo.replay_ratio.credit["default_policy"] == 0.0

    try:
        algo.train()
        assert_updates_are_the_ratios()
        _fail_the_critic_for_the_actor(monkeypatch, policy, kind, at=2)  # the iteration's second actor update
        with pytest.raises(InjectedError):
            algo.train()
        assert_updates_are_the_ratios()
        for _ in range(2):
            algo.train()
            assert_updates_are_the_ratios()
        assert_resumes_exactly(algo, tmp_path / "c")
        assert_updates_are_the_ratios()
    finally:
        algo.stop()


def test_evaluate_releases_a_runner_whose_stored_state_raises(tmp_path: Path) -> None:
    """evaluate() of a restored algorithm builds its evaluation runner and restores the stored
    state into it; an env's ``set_state`` raising there closes that runner's env (it was
    dropped unclosed: nothing referred to it any more), and the stored state is kept: the next
    evaluate() restores it and plays on, as a restore that did not fail does."""
    from tests.fault_injection import CLOSED
    from tests.helpers import assert_trees_equal

    faults = step_record_env_config(tmp_path, fail_in="set_state")
    Path(faults["fail_file"]).touch()  # disarmed until the evaluation runner is built
    saved = small_ppo().environment(make_step_record_env, env_config=faults).build()
    saved.evaluate(num_episodes=1)
    path = saved.save(tmp_path / "c")
    saved.stop()
    algo, clean = cairn.Algorithm.from_checkpoint(path), cairn.Algorithm.from_checkpoint(path)
    try:
        # A runner state after evaluate() says "start new episodes", so its envs' states are not
        # set; this one says they are exact (as a runner between episodes would store them).
        stored = algo.get_evaluation_runner_state()
        assert stored is not None and stored["needs_reset"]
        for each in (algo, clean):
            each.set_evaluation_runner_state({**stored, "needs_reset": False})
        closed = len(CLOSED)
        Path(faults["fail_file"]).unlink()
        with pytest.raises(InjectedError, match="set_state"):
            algo.evaluate(num_episodes=1)
        assert algo.evaluation_runner is None
        assert len(CLOSED) == closed + 1, "the evaluation runner's env was not closed"
        assert CLOSED[-1].fail_in == "set_state"
        assert_trees_equal(algo.get_evaluation_runner_state(), clean.get_evaluation_runner_state())
        assert algo.evaluate(num_episodes=2) == clean.evaluate(num_episodes=2)
        assert_trees_equal(algo.get_evaluation_runner_state(), clean.get_evaluation_runner_state())
    finally:
        algo.stop()
        clean.stop()
