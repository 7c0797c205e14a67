"""cairn.Callbacks: every hook is called as documented, custom metrics reach the result, the
callbacks class travels in the config and the checkpoint, runs in remote env runners, and a
callback can stop `cairn train`."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import cairn
from cairn.callbacks import Callbacks
from cairn.cli import main
from cairn.errors import ConfigError, UnsafeCheckpointError
from tests.callbacks.hooks import (
    CALLS,
    CountingCallbacks,
    EpisodeLength,
    EvaluationTally,
    FiveStepEnv,
    LateReport,
    NotCallbacks,
    SeesReplay,
    StopAtTwo,
    make_five_step_ma_cartpole,
)
from tests.checkpoint.attacks import edit_json
from tests.helpers import small_ma_ppo, small_ppo


@pytest.fixture(autouse=True)
def _fresh_counts() -> None:
    CALLS.clear()
    LateReport.seen.clear()
    LateReport.release.clear()


def test_on_algorithm_init_sees_the_whole_checked_algorithm() -> None:
    """The hook runs after a subclass's own parts are built and its policies checked: an
    off-policy algorithm's replay buffers exist (they were made after the hook, which got an
    AttributeError reading them), and a policy the algorithm refuses never reaches the hook."""
    algo = (cairn.DQNConfig().environment("CartPole-v1").training(train_batch_size=32, minibatch_size=16)
            .callbacks(SeesReplay).build())
    try:
        # Readable (each policy's buffer is made with its first transitions).
        assert CALLS["on_algorithm_init"] == 1 and CALLS["replay_buffers_at_init"] == 0
    finally:
        algo.stop()
    CALLS.clear()
    plain = cairn.PolicySpec(cairn.Policy)  # APPO needs a policy with a target network
    with pytest.raises(ConfigError, match="without a target network"):
        (cairn.APPOConfig().environment("CartPole-v1").multi_agent(policies={"default_policy": plain})
         .callbacks(CountingCallbacks).build())
    assert CALLS["on_algorithm_init"] == 0


def test_evaluation_episodes_reach_the_algorithms_callbacks_instance() -> None:
    """The evaluation runner's episode hooks run on the algorithm's callbacks instance (as the
    local env runner's do), so what they keep on it is there in ``on_evaluate_end``: with a
    runner of its own, the count was 0 with no error. Also for ``evaluate(seed=...)``'s fresh
    runner, and after a restore."""
    algo = small_ppo().callbacks(EvaluationTally).build()
    try:
        assert algo.evaluate(3)["episodes_seen_by_hooks"] == 3
        assert algo.evaluation_runner is not None and algo.evaluation_runner.callbacks is algo.callbacks
        assert algo.evaluate(2, seed=5)["episodes_seen_by_hooks"] == 2
        restored = cairn.Algorithm.from_state(algo.get_state())
        try:
            assert restored.evaluate(2)["episodes_seen_by_hooks"] == 2
        finally:
            restored.stop()
    finally:
        algo.stop()


def test_evaluation_plays_exactly_the_episodes_it_reports() -> None:
    """``evaluate(n)`` stops stepping once its n-th episode ends: the episode hooks see the n
    episodes it reports and no more (it stepped in batches of 64 steps, which with five-step
    episodes ran and reported to the hooks 12 episodes for ``evaluate(2)``)."""
    algo = (small_ppo().environment(FiveStepEnv).callbacks(EvaluationTally).build())
    try:
        for n in (1, 2, 3):
            metrics = algo.evaluate(n)
            assert metrics["num_episodes"] == metrics["episodes_seen_by_hooks"] == n
            assert metrics["episode_lens"] == [5] * n
        assert algo.evaluate(2, seed=1)["episodes_seen_by_hooks"] == 2
    finally:
        algo.stop()
    # The parallel (PettingZoo) sampler.
    multi = small_ma_ppo().environment(make_five_step_ma_cartpole).callbacks(EvaluationTally).build()
    try:
        metrics = multi.evaluate(3)
        assert metrics["num_episodes"] == metrics["episodes_seen_by_hooks"] == 3
        assert all(length <= 5 for length in metrics["episode_lens"])
    finally:
        multi.stop()


def test_every_hook_is_called_with_its_documented_arguments(tmp_path: Path) -> None:
    algo = small_ppo().env_runners(num_envs_per_env_runner=2).callbacks(CountingCallbacks).build()
    assert isinstance(algo.callbacks, CountingCallbacks) and CALLS["on_algorithm_init"] == 1
    result = algo.train()
    steps = result["num_env_steps_sampled_lifetime"]
    assert CALLS["on_episode_step"] == steps  # one per env step of every episode
    assert CALLS["on_sample_end"] == 1 and CALLS["sampled_rows"] == steps
    assert CALLS["on_episode_start"] == 2 + CALLS["on_episode_end"]  # two envs, each always in one
    assert CALLS["on_episode_end"] == result["num_episodes_lifetime"] > 0
    assert CALLS["on_train_result"] == 1 and result["callback_saw_iteration"] == 1
    algo.evaluate(2)
    assert CALLS["on_evaluate_end"] == 1
    path = algo.save(tmp_path / "ckpt")
    assert CALLS["on_checkpoint_saved"] == 1
    restored = cairn.Algorithm.from_checkpoint(path)
    assert isinstance(restored.callbacks, CountingCallbacks)
    assert CALLS["on_algorithm_init"] == 2 and CALLS["on_checkpoint_loaded"] == 1
    restored.restore(path)
    assert CALLS["on_checkpoint_loaded"] == 2
    restored.train()  # the restored algorithm's hooks run
    assert CALLS["on_train_result"] == 2
    algo.stop()
    restored.stop()
    assert CALLS["on_algorithm_stop"] == 2


def test_custom_metrics_are_aggregated_over_the_metrics_window() -> None:
    algo = small_ppo().callbacks(CountingCallbacks).build()
    for _ in range(2):
        result = algo.train()
    lengths = [e["length"] for e in algo.recent_episodes]
    metrics = result["custom_metrics"]
    assert metrics["length_mean"] == pytest.approx(np.mean(lengths))
    assert metrics["length_mean"] == pytest.approx(result["episode_len_mean"])
    assert metrics["length_min"] == min(lengths) and metrics["length_max"] == max(lengths)
    assert metrics["steps_seen_mean"] == pytest.approx(np.mean(lengths))  # one step hook per step
    assert metrics["env_index_max"] == 0
    assert small_ppo().build().train()["custom_metrics"] == {}  # no callbacks: empty, present


def test_the_config_stores_one_reference_and_refuses_other_classes(tmp_path: Path) -> None:
    config = small_ppo().callbacks(CountingCallbacks)
    assert config.to_dict()["callbacks_class"] == "tests.callbacks.hooks:CountingCallbacks"
    assert cairn.AlgorithmConfig.from_dict(config.to_dict()).callbacks_class == config.callbacks_class
    assert small_ppo().callbacks("tests.callbacks.hooks:StopAtTwo").build().callbacks.__class__ is StopAtTwo
    with pytest.raises(ConfigError, match="subclass of cairn.Callbacks"):
        small_ppo().callbacks(NotCallbacks)
    with pytest.raises(ConfigError, match="subclass of cairn.Callbacks"):
        small_ppo().callbacks(CountingCallbacks())
    with pytest.raises(UnsafeCheckpointError, match="not a subclass of cairn.callbacks.base.Callbacks"):
        small_ppo().callbacks("tests.callbacks.hooks:NotCallbacks").build()
    # A checkpoint naming another class or the standard library is refused.
    path = small_ppo().callbacks(CountingCallbacks).build().save(tmp_path / "ckpt")
    for reference in ("tests.callbacks.hooks:NotCallbacks", "os:system"):
        def rename(state: dict, ref: str = reference) -> None:
            state["config"]["callbacks_class"] = ref
        edit_json(Path(path), "algorithm_state.json", rename)
        with pytest.raises(UnsafeCheckpointError):
            cairn.Algorithm.from_checkpoint(path)


def test_custom_metrics_in_flight_resume_exactly(tmp_path: Path) -> None:
    algo = small_ppo().callbacks(EpisodeLength).build()
    algo.train()
    in_flight = algo.env_runner_group.local.get_state()["episodes"][0]
    assert in_flight["custom_metrics"]["len"] == in_flight["length"] > 0
    path = algo.save(tmp_path / "ckpt")
    restored = cairn.Algorithm.from_checkpoint(path)
    first, second = algo.train(), restored.train()
    assert first["custom_metrics"] == second["custom_metrics"] != {}
    assert first["custom_metrics"]["len_mean"] == pytest.approx(first["episode_len_mean"])


def test_hooks_run_in_multi_agent_runners() -> None:
    algo = small_ma_ppo(2).callbacks(CountingCallbacks).build()
    result = algo.train()
    assert CALLS["on_episode_step"] == result["num_env_steps_sampled_lifetime"]
    assert result["custom_metrics"]["length_mean"] == pytest.approx(result["episode_len_mean"])


def test_a_callback_stops_cairn_train(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["train", "--algo", "PPO", "--env", "CartPole-v1", "--stop-iters", "10", "--out",
                 str(tmp_path / "run"), "-q", "--config", "train_batch_size=128", "minibatch_size=64",
                 "callbacks_class=tests.callbacks.hooks:StopAtTwo"])
    assert code == 0
    rows = (tmp_path / "run" / "progress.csv").read_text().strip().splitlines()
    assert len(rows) == 3  # the header and two iterations
    results = [json.loads(line) for line in (tmp_path / "run" / "result.jsonl").read_text().splitlines()]
    assert [r["done"] for r in results] == [False, True]
    said = capsys.readouterr().out
    assert "stopped after iteration 2: the callbacks' on_train_result set result['done']" in said


def test_custom_metrics_reach_progress_csv(tmp_path: Path) -> None:
    assert main(["train", "--algo", "PPO", "--env", "CartPole-v1", "--stop-iters", "2", "--out",
                 str(tmp_path / "run"), "-q", "--config", "train_batch_size=128", "minibatch_size=64",
                 "callbacks_class=tests.callbacks.hooks:CountingCallbacks"]) == 0
    header = (tmp_path / "run" / "progress.csv").read_text().splitlines()[0].split(",")
    assert "custom_metrics/length_mean" in header and "custom_metrics/steps_seen_max" in header


def test_the_base_class_hooks_do_nothing() -> None:
    hooks = Callbacks()
    assert hooks.on_train_result(algorithm=None, result={}) is None


def test_a_background_save_reports_the_iteration_it_was_taken_at(tmp_path: Path) -> None:
    algo = small_ppo().callbacks(LateReport).build()
    algo.train()
    future = algo.save(tmp_path / "ckpt", blocking=False)
    algo.train()  # the writer's report waits until this iteration is done
    LateReport.release.set()
    assert future.result() == str(tmp_path / "ckpt")
    assert LateReport.seen == [(1, 2, str(tmp_path / "ckpt"))]  # taken at 1, reported during 2
    algo.stop()
