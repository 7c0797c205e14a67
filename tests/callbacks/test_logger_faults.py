"""Faults that must not misreport (issue 37 item 5): a logger whose store fails mid-run is a
warning naming it and training goes on (unless the logger is strict); a callback failing after
a save never reports the committed save as failed."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

import cairn
from cairn.callbacks import MLflowLogger
from cairn.checkpoint.reader import load_algorithm_state
from cairn.errors import LoggerWarning
from tests.helpers import small_ppo

pytest.importorskip("mlflow", reason="the mlflow extra (make test installs it)")


@pytest.fixture
def mlruns(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    store = tmp_path / "mlruns"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", store.as_uri())
    monkeypatch.setenv("MLFLOW_EXPERIMENT_NAME", "cairn-faults")
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    return store


def _break(store: Path) -> None:
    """The store becomes unwritable mid-run: its directory is now a file."""
    shutil.rmtree(store)
    store.write_text("not a directory any more")


def test_an_mlflow_store_failing_mid_run_warns_and_training_goes_on(mlruns, tmp_path):
    algo = small_ppo().callbacks(MLflowLogger).build()
    algo.train()
    _break(mlruns)
    with pytest.warns(LoggerWarning, match="MLflowLogger.on_train_result failed"):
        result = algo.train()
    assert result["training_iteration"] == 2 and algo.iteration == 2
    with pytest.warns(LoggerWarning, match="MLflowLogger.on_checkpoint_saved failed"):
        path = algo.save(tmp_path / "c2")
    assert path == str(tmp_path / "c2") and load_algorithm_state(path)["iteration"] == 2
    with pytest.warns(LoggerWarning, match="MLflowLogger.on_checkpoint_saved failed"):
        assert algo.save(tmp_path / "c3", blocking=False).result() == str(tmp_path / "c3")
    manager = cairn.CheckpointManager(tmp_path / "managed")
    with pytest.warns(LoggerWarning, match="MLflowLogger"):
        assert manager.save(algo) == str(tmp_path / "managed" / "checkpoint_000002")
    with pytest.warns(LoggerWarning, match="MLflowLogger.on_algorithm_stop failed"):
        algo.stop()


class StrictMLflowLogger(MLflowLogger):
    strict = True


def test_a_strict_logger_stops_training_but_never_fails_a_committed_save(mlruns, tmp_path):
    algo = small_ppo().callbacks(StrictMLflowLogger).build()
    algo.train()
    _break(mlruns)
    with pytest.raises(Exception, match="not a directory|No such file|Not a directory"):
        algo.train()
    with pytest.warns(LoggerWarning, match="StrictMLflowLogger.on_checkpoint_saved raised"):
        path = algo.save(tmp_path / "c")
    assert load_algorithm_state(path)["iteration"] == algo.iteration
    with pytest.raises(Exception):  # noqa: B017 - the store's own error, whatever MLflow raises
        algo.stop()


class FailingReport(cairn.Callbacks):
    def on_checkpoint_saved(self, *, algorithm, checkpoint):
        raise NotADirectoryError(f"cannot copy {checkpoint} to the artifact store")


@pytest.mark.parametrize("blocking", [True, False])
def test_a_callback_failing_after_a_save_does_not_fail_the_save(tmp_path, blocking):
    algo = small_ppo().callbacks(FailingReport).build()
    try:
        expected = r"FailingReport.on_checkpoint_saved raised NotADirectoryError.*was saved and is intact"
        with pytest.warns(LoggerWarning, match=expected):
            saved = algo.save(tmp_path / "c", blocking=blocking)
            location = saved if blocking else saved.result()
        assert location == str(tmp_path / "c")
        assert load_algorithm_state(location)["iteration"] == 0
    finally:
        algo.stop()  # no background failure is owed
