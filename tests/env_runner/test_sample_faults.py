"""Training survives an exception raised inside ``sample()`` (docs/fault-tolerance.md).

After an env raising in ``step`` or ``reset`` (in this process or in an ``"async"`` child), or
a model raising while acting, the exception reaches the caller unchanged; the fragment is
discarded (no counter counts it, no episode of it is reported); every env starts a new episode
before it is stepped again; the next ``train()`` works on rows that are real steps of their
episodes; and a checkpoint saved then resumes exactly.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

import cairn
from cairn.errors import EnvError
from tests.fault_injection import (
    LENGTH,
    InjectedError,
    RaiseOnce,
    check_recovers,
    make_step_record_env,
    raise_in,
    step_record_env_config,
)
from tests.helpers import assert_resumes_exactly, small_ma_ppo, small_ppo


def step_record_ppo(tmp_path: Path, mode: str = "sync", **env_config: Any) -> cairn.PPOConfig:
    """PPO on two StepRecordEnv copies; ``env_config`` may inject one fault."""
    return (small_ppo(train_batch_size=64, minibatch_size=32)
            .environment(make_step_record_env, env_config=step_record_env_config(tmp_path, **env_config))
            .env_runners(num_envs_per_env_runner=2, gym_env_vectorize_mode=mode))


@pytest.mark.parametrize("fail_in, fail_at", [("step", 39), ("reset", 9)])
def test_an_env_raising_in_the_same_process(tmp_path: Path, fail_in: str, fail_at: int) -> None:
    algo = step_record_ppo(tmp_path, fail_in=fail_in, fail_at=fail_at).build()
    try:
        check_recovers(algo, tmp_path, InjectedError)
    finally:
        algo.stop()


@pytest.mark.slow
@pytest.mark.parametrize("fail_in, fail_at", [("step", 39), ("reset", 9)])
def test_an_async_env_raising_leaves_every_pipe_in_step(tmp_path: Path, fail_in: str, fail_at: int) -> None:
    """Every child's answer is read before the first error is raised (as Gymnasium's
    AsyncVectorEnv does): no env copy answers a step late afterwards."""
    algo = step_record_ppo(tmp_path, "async", fail_in=fail_in, fail_at=fail_at).build()
    try:
        check_recovers(algo, tmp_path, EnvError, match=f"(?s)failed in {fail_in}.*InjectedError")
    finally:
        algo.stop()


def test_async_envs_answer_in_step_after_an_error(tmp_path: Path) -> None:
    """The vector env alone: after one child raised in ``step``, every child's next answer is
    the answer to the next request (not the unread one of the step that raised)."""
    from cairn.env_runner.subprocess_envs import AsyncEnvs

    envs = AsyncEnvs(make_step_record_env, {"length": 100, "fail_in": "step", "fail_at": 2,
                                            "fail_file": str(tmp_path / "fault")}, 3)
    try:
        envs.reset(dict.fromkeys(range(3), 0))
        envs.step([0, 0, 0])
        with pytest.raises(EnvError, match="InjectedError"):
            envs.step([0, 0, 0])
        # The copy that raised did not take the step; the others did. Each says so, in step.
        reset = envs.reset({i: 0 for i in range(3)})
        assert [float(obs[0]) for obs, _ in reset.values()] == [0.0, 0.0, 0.0]
        for t in range(1, 4):
            assert [float(obs[0]) for obs, *_ in envs.step([0, 0, 0])] == [t] * 3
        assert [s["state"]["t"] for s in envs.get_states()] == [3, 3, 3]
    finally:
        envs.close()


def test_answers_left_unread_by_an_interrupted_reader_are_dropped(tmp_path: Path) -> None:
    """A request whose answers were never read (Ctrl-C while waiting): the next request's
    answers are its own."""
    from cairn.env_runner.subprocess_envs import AsyncEnvs

    envs = AsyncEnvs(make_step_record_env, {"length": 100}, 2)
    try:
        envs.reset({0: 0, 1: 0})
        for proxy in envs.envs:
            proxy.send("step", 0)  # sent, never received
        assert [float(obs[0]) for obs, *_ in envs.step([0, 0])] == [2.0, 2.0]
        assert [s["state"]["t"] for s in envs.get_states()] == [2, 2]
    finally:
        envs.close()


def test_a_model_raising_while_acting(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    algo = step_record_ppo(tmp_path).build()
    policy = algo.get_policy()
    forward = policy.compute_action_inputs  # the model's forward, whichever acting method runs it
    calls = {"n": 0}

    def flaky(obs: np.ndarray, **kwargs: Any) -> Any:
        calls["n"] += 1
        if calls["n"] == 32 + 10:  # in the second iteration, mid-episode
            raise InjectedError("injected failure in the model's forward")
        return forward(obs, **kwargs)

    monkeypatch.setattr(policy, "compute_action_inputs", flaky)
    try:
        check_recovers(algo, tmp_path, InjectedError)
    finally:
        algo.stop()


def test_evaluation_that_raises_starts_fresh_episodes(tmp_path: Path) -> None:
    algo = step_record_ppo(tmp_path, fail_in="step", fail_at=3).evaluation(evaluation_duration=2).build()
    try:
        with pytest.raises(InjectedError):
            algo.evaluate()
        metrics = algo.evaluate()
        assert metrics["episode_len_mean"] == LENGTH
    finally:
        algo.stop()


def _tictactoe() -> cairn.AlgorithmConfig:
    from tests.env_runner.test_turn_based import make_tictactoe, shared_policy

    return (cairn.PPOConfig().environment(make_tictactoe)
            .training(train_batch_size=96, minibatch_size=48, num_epochs=1)
            .env_runners(num_envs_per_env_runner=3)
            .multi_agent(policies={"shared"}, policy_mapping_fn=shared_policy).debugging(seed=0))


@pytest.mark.filterwarnings("error:You are calling 'step\\(\\)'")  # Gymnasium: a terminated env stepped
@pytest.mark.parametrize("kind", ["parallel", "turn_based"])
@pytest.mark.parametrize("hook", ["on_episode_step", "on_episode_end"])
def test_multi_agent_runners_discard_the_fragment(tmp_path: Path, kind: str, hook: str) -> None:
    """Parallel (MultiAgentCartPole) and turn-based (tic-tac-toe) runners: a hook raising
    mid-step discards the fragment; the policies' sampled-step counters (which turn-based
    runners count as the agents act) and the runner's episodes are as before it."""
    config = small_ma_ppo() if kind == "parallel" else _tictactoe()
    # One fragment per iteration: the iteration that raises is the fragment that raises (an
    # iteration of several rounds keeps those before it counted: tests/algorithms/ppo/test_train_batch.py).
    steps = 16 * config.num_envs_per_env_runner
    config = config.training(train_batch_size=steps, minibatch_size=min(config.minibatch_size, steps))
    algo = config.env_runners(rollout_fragment_length=16).callbacks(RaiseOnce).build()
    runner = algo.env_runner_group.local
    assert runner is not None
    try:
        algo.train()
        counters, episodes = dict(algo.counters), runner.num_episodes
        timesteps = {pid: p.global_timestep for pid, p in algo.policies.items()}
        raise_in([hook])
        with pytest.raises(InjectedError):
            algo.train()
        assert (algo.counters, runner.num_episodes) == (counters, episodes)
        assert {pid: p.global_timestep for pid, p in algo.policies.items()} == timesteps
        assert algo.train()["training_iteration"] == 2
        assert runner.num_episodes == algo.counters["num_episodes_lifetime"]
        assert_resumes_exactly(algo, tmp_path / "after_fault")
    finally:
        algo.stop()


def test_an_env_whose_close_raises_does_not_keep_stop_from_releasing_the_rest(tmp_path: Path) -> None:
    """The first env copy's ``close()`` raises: ``stop()`` raises that error, after it closed
    every other env (the second training env, the evaluation env) and called
    ``on_algorithm_stop``; a runner left half-stopped would keep its envs (child processes,
    remote actors) for good, since a second ``stop()`` meets the same error first."""
    from tests.callbacks.hooks import CALLS, CountingCallbacks
    from tests.fault_injection import CLOSED

    algo = step_record_ppo(tmp_path, fail_in="close", fail_at=1).callbacks(CountingCallbacks).build()
    algo.train()
    algo.evaluate(num_episodes=1)
    runner, evaluation = algo.env_runner_group.local, algo.evaluation_runner
    assert runner is not None and evaluation is not None
    envs = [*runner.vector_envs.envs, *evaluation.vector_envs.envs]
    CLOSED.clear()
    CALLS.clear()
    with pytest.raises(InjectedError, match="in close"):
        algo.stop()
    assert sorted(map(id, CLOSED)) == sorted(map(id, envs)) and len(envs) == 3
    assert CALLS["on_algorithm_stop"] == 1
