"""The ready-made loggers against the real services: MLflow with its local file store, read back
with MLflow's own client; Weights & Biases in offline mode, read back from its run files."""

from __future__ import annotations

import time
import warnings
from pathlib import Path

import pytest

from cairn.callbacks import MLflowLogger, WandbLogger
from cairn.cli import main
from cairn.errors import LoggerWarning
from tests.callbacks.hooks import (
    BadNameMLflowLogger,
    BadNameWandbLogger,
    LateExperimentMLflowLogger,
    LateReport,
    LateWandbLogger,
    RacingMLflowLogger,
    RaiseAfterTraining,
)
from tests.helpers import small_ppo

mlflow = pytest.importorskip("mlflow", reason="the mlflow extra (make test installs it)")


@pytest.fixture
def mlflow_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    uri = (tmp_path / "mlruns").as_uri()
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.setenv("MLFLOW_EXPERIMENT_NAME", "cairn-tests")
    # MLflow 3 keeps the file store in maintenance mode behind this switch; it is still the
    # real local backend (no server, no database).
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    return uri


def test_mlflow_logs_params_metrics_and_the_checkpoint(mlflow_store: str, tmp_path: Path) -> None:
    from mlflow.tracking import MlflowClient

    algo = small_ppo().callbacks(MLflowLogger).build()
    for _ in range(2):
        algo.train()
    path = algo.save(tmp_path / "ckpt")
    algo.stop()
    run_id = algo.callbacks.run_id
    client = MlflowClient(mlflow_store)
    run = client.get_run(run_id)
    assert run.info.status == "FINISHED"
    assert client.get_experiment(run.info.experiment_id).name == "cairn-tests"
    params = run.data.params
    assert params["lr"] == str(algo.config.lr) and params["algo_class"] == "PPO"
    assert params["train_batch_size"] == "128"
    history = client.get_metric_history(run_id, "episode_return_mean")
    assert [m.step for m in history] == [1, 2]
    losses = client.get_metric_history(run_id, "learners/default_policy/policy_loss")
    assert [m.step for m in losses] == [1, 2]
    artifacts = [a.path for a in client.list_artifacts(run_id, f"checkpoints/{Path(path).name}")]
    assert f"checkpoints/{Path(path).name}/cairn_checkpoint.json" in artifacts
    assert run.data.tags["cairn.last_checkpoint"] == f"checkpoints/{Path(path).name}"


def test_mlflow_leaves_out_only_a_metric_whose_name_it_refuses(mlflow_store: str) -> None:
    from mlflow.tracking import MlflowClient

    algo = small_ppo().callbacks(BadNameMLflowLogger).build()
    with pytest.warns(LoggerWarning) as caught:
        results = [algo.train() for _ in range(4)]
    algo.stop()
    refused = [str(w.message) for w in caught if issubclass(w.category, LoggerWarning)]
    # One warning per bad name (win%_mean, _min, _max), not one per iteration: each names
    # its metric, what MLflow allows and the fix.
    bad = [f"custom_metrics/win%_{stat}" for stat in ("mean", "min", "max")]
    assert len(refused) == 3 and all(sum(f"'{n}'" in text for n in bad) == 1 for text in refused), refused
    assert {n for n in bad for text in refused if f"'{n}'" in text} == set(bad)
    assert all("alphanumerics" in text and "rename" in text for text in refused), refused
    client = MlflowClient(mlflow_store)
    run = client.get_run(algo.callbacks.run_id)
    assert not any("%" in name for name in run.data.metrics)
    # Every other metric is there at every step, with the values train() returned.
    for name in ("custom_metrics/len_mean", "episode_return_mean",
                 "learners/default_policy/policy_loss", "training_iteration"):
        history = client.get_metric_history(run.info.run_id, name)
        assert [m.step for m in history] == [1, 2, 3, 4], name
    lens = client.get_metric_history(run.info.run_id, "custom_metrics/len_mean")
    assert [m.value for m in lens] == [pytest.approx(r["custom_metrics"]["len_mean"]) for r in results]


def test_a_strict_mlflow_logger_stops_at_a_refused_metric_name(mlflow_store: str) -> None:
    from mlflow.exceptions import MlflowException

    algo = small_ppo().callbacks(BadNameMLflowLogger).build()
    algo.callbacks.strict = True
    with pytest.raises(MlflowException, match="win%"):
        algo.train()
    algo.stop()


def test_cairn_train_mlflow_flag(mlflow_store: str, tmp_path: Path) -> None:
    from mlflow.tracking import MlflowClient

    assert main(["train", "--algo", "PPO", "--env", "CartPole-v1", "--stop-iters", "2", "--out",
                 str(tmp_path / "run"), "-q", "--mlflow", "--config", "train_batch_size=128",
                 "minibatch_size=64"]) == 0
    client = MlflowClient(mlflow_store)
    experiment = client.get_experiment_by_name("cairn-tests")
    (run,) = client.search_runs([experiment.experiment_id])
    assert run.info.status == "FINISHED"
    steps = client.get_metric_history(run.info.run_id, "num_env_steps_sampled_lifetime")
    assert [m.step for m in steps] == [1, 2]
    names = [a.path for a in client.list_artifacts(run.info.run_id, "checkpoints")]
    assert names == ["checkpoints/checkpoint_000002"]  # the final checkpoint


def test_wandb_offline_run_holds_config_metrics_and_checkpoint(tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("wandb", reason="the wandb extra (make test installs it)")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setenv("WANDB_PROJECT", "cairn-tests")
    algo = small_ppo().callbacks(WandbLogger).build()
    assert algo.callbacks.run is None  # the run starts at the first train() result
    for _ in range(2):
        result = algo.train()
    run = algo.callbacks.run
    algo.save(tmp_path / "ckpt")
    assert run.config["train_batch_size"] == 128 and run.config["algo_class"] == "PPO"
    assert run.summary["training_iteration"] == 2
    assert run.summary["episode_return_mean"] == pytest.approx(result["episode_return_mean"])
    algo.stop()
    (run_dir,) = (tmp_path / "wandb").glob("offline-run-*")
    run_file = next(run_dir.glob("*.wandb"))
    deadline = time.monotonic() + 120  # W&B's service process may still be flushing the file
    while b"cairn_checkpoint.json" not in run_file.read_bytes() and time.monotonic() < deadline:
        time.sleep(0.2)
    records = run_file.read_bytes()
    # The run file holds the logged history rows and the checkpoint artifact's manifest.
    for text in (b"episode_return_mean", b"learners/default_policy/policy_loss", b"checkpoint-",
                 b"cairn_checkpoint.json"):
        assert text in records, text


def test_wandb_logs_a_background_save_under_the_iteration_it_was_taken_at(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("wandb", reason="the wandb extra (make test installs it)")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    monkeypatch.setenv("WANDB_SILENT", "true")
    LateReport.release.clear()
    algo = small_ppo().callbacks(LateWandbLogger).build()
    algo.train()
    future = algo.save(tmp_path / "ckpt", blocking=False)  # taken at iteration 1
    algo.train()  # its report waits until iteration 2 is done
    LateReport.release.set()
    future.result()
    run_dir = Path(algo.callbacks.run.dir).parent  # offline-run-<time>-<id>
    algo.stop()
    run_file = next(run_dir.glob("*.wandb"))
    deadline = time.monotonic() + 120  # W&B's service process may still be flushing the file
    while b"cairn_checkpoint.json" not in run_file.read_bytes() and time.monotonic() < deadline:
        time.sleep(0.2)
    # The checkpoint artifact's metadata, as JSON text inside the run file's records.
    assert b'{"iteration":1,"path":' in run_file.read_bytes()


def test_wandb_keeps_a_metric_name_mlflow_refuses_and_every_other_metric(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("wandb", reason="the wandb extra (make test installs it)")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    monkeypatch.setenv("WANDB_SILENT", "true")
    algo = small_ppo().callbacks(BadNameWandbLogger).build()
    with warnings.catch_warnings():
        warnings.simplefilter("error", LoggerWarning)  # W&B takes the name: no failure at all
        for _ in range(2):
            result = algo.train()
    summary = algo.callbacks.run.summary
    assert summary["custom_metrics/win%_mean"] == 1.0
    assert summary["custom_metrics/len_mean"] == pytest.approx(result["custom_metrics"]["len_mean"])
    assert summary["episode_return_mean"] == pytest.approx(result["episode_return_mean"])
    algo.stop()


def test_wandb_logs_the_iterations_trained_again_after_restoring_an_earlier_checkpoint(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """W&B drops a row whose ``step`` is below the run's last one; iterations trained again
    after ``restore()`` of an earlier checkpoint must still reach the run."""
    pytest.importorskip("wandb", reason="the wandb extra (make test installs it)")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    monkeypatch.setenv("WANDB_SILENT", "true")
    algo = small_ppo().callbacks(WandbLogger).build()
    algo.train()
    first = algo.save(tmp_path / "ckpt")
    for _ in range(2):
        algo.train()
    algo.restore(first)
    result = algo.train()
    assert result["training_iteration"] == 2
    summary = algo.callbacks.run.summary  # the last row logged
    assert summary["training_iteration"] == 2
    assert summary["episode_return_mean"] == pytest.approx(result["episode_return_mean"])
    assert summary["time_this_iter_s"] == pytest.approx(result["time_this_iter_s"])
    algo.stop()


def test_cairn_train_loggers_log_and_end_their_run_when_the_configs_own_hooks_raise(
        mlflow_store: str, tmp_path: Path) -> None:
    """The loggers that ``--mlflow`` attaches run after the config's own callbacks: an own hook
    that raises must not keep them from logging the iteration (it counts, and ``last_result``
    holds it), the checkpoint (it was saved) or from ending their run when the algorithm stops
    (a run left RUNNING forever); the own hook's error still reaches the caller."""
    import argparse

    from mlflow.tracking import MlflowClient

    from cairn.cli.loggers import attach_loggers

    algo = small_ppo().callbacks(RaiseAfterTraining).build()
    attach_loggers(algo, argparse.Namespace(mlflow=True, wandb=False))
    (logger,) = algo.callbacks.loggers
    with pytest.raises(RuntimeError, match="on_train_result fails"):
        algo.train()
    assert algo.iteration == 1 and algo.last_result is not None
    with pytest.warns(LoggerWarning, match="on_checkpoint_saved fails"):
        path = algo.save(tmp_path / "ckpt")
    with pytest.raises(RuntimeError, match="on_algorithm_stop fails"):
        algo.stop()
    client = MlflowClient(mlflow_store)
    run = client.get_run(logger.run_id)
    assert run.info.status == "FINISHED"
    history = client.get_metric_history(run.info.run_id, "num_env_steps_sampled_lifetime")
    assert [(m.step, m.value) for m in history] == [(1, algo.last_result["num_env_steps_sampled_lifetime"])]
    names = [a.path for a in client.list_artifacts(run.info.run_id, "checkpoints")]
    assert names == [f"checkpoints/{Path(path).name}"]


def test_a_background_save_and_train_reporting_at_once_start_one_mlflow_run(
        mlflow_store: str, tmp_path: Path) -> None:
    """A background save's report (from its writer thread) and the first ``train()`` result
    both start the logger's run when none is running: both at once started two, one of them
    left RUNNING forever with the checkpoint or the first iterations' metrics."""
    from mlflow.tracking import MlflowClient

    RacingMLflowLogger.writer_starting.clear()
    RacingMLflowLogger.main_arrived.clear()
    algo = small_ppo().callbacks(RacingMLflowLogger).build()
    future = algo.save(tmp_path / "ckpt", blocking=False)  # the run starts in its report
    assert RacingMLflowLogger.writer_starting.wait(120), "the background save never reported"
    algo.train()
    path = future.result()
    algo.train()
    algo.stop()
    client = MlflowClient(mlflow_store)
    runs = client.search_runs([client.get_experiment_by_name("cairn-tests").experiment_id])
    assert [run.info.run_id for run in runs] == [algo.callbacks.run_id]
    (run,) = runs
    assert run.info.status == "FINISHED"
    history = client.get_metric_history(run.info.run_id, "training_iteration")
    assert [m.step for m in history] == [1, 2]
    assert run.data.tags["cairn.last_checkpoint"] == f"checkpoints/{Path(path).name}"


def test_an_mlflow_experiment_created_meanwhile_by_another_trial_takes_the_run(mlflow_store: str) -> None:
    """Parallel Tune trials (processes) each start a run in a new experiment: the one whose
    look-up missed the experiment that another created right after failed its create, lost its
    first iteration's metrics (a LoggerWarning) and started its run an iteration late."""
    from mlflow.tracking import MlflowClient

    algo = small_ppo().callbacks(LateExperimentMLflowLogger).build()
    with warnings.catch_warnings():
        warnings.simplefilter("error", LoggerWarning)
        for _ in range(2):
            algo.train()
    algo.stop()
    client = MlflowClient(mlflow_store)
    run = client.get_run(algo.callbacks.run_id)
    assert client.get_experiment(run.info.experiment_id).name == "cairn-tests"
    history = client.get_metric_history(run.info.run_id, "training_iteration")
    assert [m.step for m in history] == [1, 2]
