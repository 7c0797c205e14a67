"""A callback that raises leaves training usable (docs/callbacks.md, docs/fault-tolerance.md).

A hook raising inside ``sample()`` (the episode hooks, ``on_sample_end``) discards the
fragment and makes every env start a new episode, so that no finished episode is stepped on;
``on_train_result`` raising comes after the iteration completed: it counts, and its result
stays in ``algorithm.last_result``. The exception reaches the caller unchanged each time.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

import cairn
from tests.callbacks.hooks import CALLS, RaiseEveryStep
from tests.fault_injection import (
    InjectedError,
    RaiseOnce,
    assert_runner_in_step,
    check_recovers,
    make_step_record_env,
    raise_in,
    step_record_env_config,
)
from tests.helpers import assert_resumes_exactly, small_ppo


@pytest.fixture(autouse=True)
def _no_faults_left() -> Iterator[None]:
    yield
    raise_in(())


def _ppo(tmp_path: Path) -> cairn.PPOConfig:
    return (small_ppo(train_batch_size=64, minibatch_size=32)
            .environment(make_step_record_env, env_config=step_record_env_config(tmp_path))
            .env_runners(num_envs_per_env_runner=2).callbacks(RaiseOnce))


@pytest.mark.parametrize("hook", ["on_episode_start", "on_episode_step", "on_episode_end", "on_sample_end"])
def test_a_hook_raising_inside_sample_discards_the_fragment(tmp_path: Path, hook: str) -> None:
    algo = _ppo(tmp_path).build()
    try:
        check_recovers(algo, tmp_path, InjectedError, match=f"in {hook}", arm=lambda: raise_in([hook]))
    finally:
        algo.stop()


def test_on_episode_end_raising_never_steps_the_finished_episode(tmp_path: Path) -> None:
    """The reproduction of issue 36 (b): the episode whose end hook raised is over; the next
    ``train()`` resets its env instead of stepping it (StepRecordEnv raises if stepped), and a
    checkpoint saved meanwhile holds no env between episodes."""
    algo = _ppo(tmp_path).build()
    try:
        raise_in(["on_episode_end"])
        with pytest.raises(InjectedError):
            algo.train()
        assert_runner_in_step(algo)  # every env is in a new episode already
        restored = cairn.Algorithm.from_checkpoint(algo.save(tmp_path / "after_fault"))
        try:
            assert_runner_in_step(restored)
            restored.train()
        finally:
            restored.stop()
        algo.train()
    finally:
        algo.stop()


def test_on_train_result_raising_keeps_the_completed_iteration(tmp_path: Path) -> None:
    """Issue 36 (c): the iteration learned, so it counts; its result is not lost."""
    algo = _ppo(tmp_path).build()
    try:
        check_recovers(algo, tmp_path, InjectedError, match="in on_train_result", completes=True,
                       arm=lambda: raise_in(["on_train_result"]))
    finally:
        algo.stop()


def test_evaluation_inside_train_raising_keeps_the_completed_iteration(tmp_path: Path) -> None:
    """docs/fault-tolerance.md: the evaluation that ``train()`` runs comes after the iteration
    learned; when it raises (``on_evaluate_end``), the iteration counts, its result is kept, and
    a checkpoint saved then (its evaluation runner's state included) resumes exactly.
    (CartPole: a StepRecordEnv counts its episodes across resets, which a restore of a runner
    between episodes starts afresh, as documented.)"""
    algo = (small_ppo(train_batch_size=64, minibatch_size=32).callbacks(RaiseOnce)
            .evaluation(evaluation_interval=1, evaluation_duration=2).build())
    try:
        algo.train()
        counters = dict(algo.counters)
        raise_in(["on_evaluate_end"])
        with pytest.raises(InjectedError, match="in on_evaluate_end"):
            algo.train()
        assert algo.iteration == 2 and algo.counters != counters
        assert algo.last_result is not None and algo.last_result["training_iteration"] == 2
        assert "evaluation" not in algo.last_result
        # The timing train() would have returned is there too (Algorithm.last_result's promise).
        sampled = "num_env_steps_sampled_lifetime"
        elapsed = algo.last_result["time_this_iter_s"]
        assert elapsed > 0 and algo.last_result["env_steps_per_s"] == pytest.approx(
            (algo.counters[sampled] - counters[sampled]) / elapsed)
        assert_resumes_exactly(algo, tmp_path / "after_fault")
        assert "evaluation" in algo.last_result and algo.last_result["training_iteration"] == 4
    finally:
        algo.stop()


def test_when_the_new_episodes_cannot_start_the_next_sample_starts_them(tmp_path: Path) -> None:
    """``on_episode_end`` raises, then ``on_episode_start`` raises as the runner starts the new
    episodes: the first error reaches the caller; the next ``train()`` starts them."""
    algo = _ppo(tmp_path).build()
    try:
        algo.train()
        counters = dict(algo.counters)
        raise_in(["on_episode_end", "on_episode_start"])
        with pytest.raises(InjectedError, match="in on_episode_end"):
            algo.train()
        assert algo.env_runner_group.get_state()[0]["needs_reset"]
        assert algo.counters == counters
        assert algo.train()["training_iteration"] == 2
        assert_runner_in_step(algo)
    finally:
        algo.stop()


@pytest.mark.parametrize("mode", ["sync", pytest.param("async", marks=pytest.mark.slow)])
def test_a_hook_raising_on_every_step_ends_train_at_once_in_this_process(tmp_path: Path, mode: str) -> None:
    """The local runner retries nothing (issue 37 item 6 checks this side of the rule that
    stops remote runners after repeated failures): the first step's error ends train() as it
    is, and each later train() raises it again at once, with nothing counted."""
    CALLS.clear()
    algo = (_ppo(tmp_path).env_runners(gym_env_vectorize_mode=mode).callbacks(RaiseEveryStep).build())
    try:
        for attempt in (1, 2):
            with pytest.raises(RuntimeError, match="^RaiseEveryStep: this callback fails on every step$"):
                algo.train()
            assert CALLS["on_episode_step"] == attempt  # one call per train(): nothing retried
        assert algo.iteration == 0 and algo.get_policy().global_timestep == 0
    finally:
        algo.stop()


@pytest.mark.parametrize("hook", ["on_algorithm_init", "on_checkpoint_loaded"])
def test_an_algorithm_whose_build_or_load_hook_raises_is_stopped(tmp_path: Path, hook: str) -> None:
    """``build()`` or ``from_checkpoint()`` raises from the hook and hands no object back: the
    algorithm it built is stopped (its envs and runners released, ``on_algorithm_stop``
    called), not left for the garbage collector."""
    from tests.callbacks.hooks import RAISE_ON_LOAD, RaiseOnLoad

    config = small_ppo(train_batch_size=64, minibatch_size=32).callbacks(RaiseOnLoad)
    algo = config.build()
    path = algo.save(tmp_path / "c")
    algo.stop()
    CALLS.clear()
    RAISE_ON_LOAD.add(hook)
    try:
        with pytest.raises(RuntimeError, match=f"injected failure in {hook}"):
            config.build() if hook == "on_algorithm_init" else cairn.Algorithm.from_checkpoint(path)
    finally:
        RAISE_ON_LOAD.clear()
    assert CALLS["on_algorithm_init"] == CALLS["on_algorithm_stop"] == 1
