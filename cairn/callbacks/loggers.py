"""Ready-made callbacks that log a run to MLflow or Weights & Biases (docs/callbacks.md).

Both log the same things: the config's keys as parameters (nested values as JSON text), every
numeric value of each ``train()`` result as a metric at ``step = training_iteration`` (W&B's
``step_metric``; nested keys joined with ``/``: ``learners/default_policy/policy_loss``), and
each checkpoint that ``algorithm.save()`` writes to local disk as an artifact directory (a
checkpoint on an object store is recorded by its URL). Use them as
``config.callbacks(cairn.callbacks.MLflowLogger)`` or with ``cairn train --mlflow`` /
``--wandb``. The client libraries are the extras ``cairn-rl[mlflow]`` and ``cairn-rl[wandb]``,
imported when a run starts.

A logger that fails (its store becomes unwritable, its service goes down) does not stop
training: the failure is a :class:`~cairn.errors.LoggerWarning` naming the logger, the hook and
the error, and training goes on without that entry. A subclass with ``strict = True`` raises
instead (but a failure logging a checkpoint is always a warning: the save succeeded). A missing
client library is still an error at the start. A metric whose name MLflow refuses (``win%``) is
left out of the MLflow run with one warning per name, and every other metric is logged.

A run starts at the first ``train()`` result (or the first ``save()``), not when the algorithm
is built: building or restoring an algorithm whose config (or checkpoint) names a logger writes
no file and opens no connection (a checkpoint's loading has no side effects outside the
process; docs/security.md).
"""

from __future__ import annotations

import functools
import json
import os
import threading
import time
import warnings
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from cairn._compat.mlflow_internals import validate_metric
from cairn.callbacks.base import Callbacks
from cairn.errors import FrameworkUnavailableError, LoggerWarning
from cairn.result_names import flat_metrics

__all__ = ["MLflowLogger", "WandbLogger", "flat_metrics", "flat_params"]

#: MLflow refuses longer parameter values.
_MAX_PARAM_CHARS = 6000

_Hook = Callable[..., None]


def _warns(hook: _Hook) -> _Hook:
    """``hook`` of a logger, whose failure is a :class:`LoggerWarning` unless the logger is
    ``strict`` (module docstring); a missing client library raises."""
    @functools.wraps(hook)
    def guarded(self: Any, **kwargs: Any) -> None:
        try:
            hook(self, **kwargs)
        except FrameworkUnavailableError:
            raise
        except Exception as exc:
            if getattr(self, "strict", False):
                raise
            warnings.warn(LoggerWarning(
                f"{type(self).__name__}.{hook.__name__} failed ({type(exc).__name__}: {exc}); "
                "training goes on without this entry. Fix the logger's store or service (set "
                "strict = True on a subclass of the logger to stop training instead)."), stacklevel=3)
    return guarded


def flat_params(config: Mapping[str, Any]) -> dict[str, str]:
    """The config's keys as text parameters (dicts and lists as JSON), cut to what MLflow takes."""
    return {key: (value if isinstance(value, str) else json.dumps(value, default=str, sort_keys=True))
            [:_MAX_PARAM_CHARS] for key, value in config.items()}


def _import(module: str, extra: str) -> Any:
    try:
        return __import__(module)
    except ImportError as exc:
        raise FrameworkUnavailableError(
            f"The {module} logger needs the {module} package ({exc}). Fix: pip install 'cairn-rl[{extra}]'."
        ) from exc


def _local_dir(checkpoint: str) -> Path | None:
    return None if "://" in checkpoint else Path(checkpoint)


class MLflowLogger(Callbacks):
    """Logs to MLflow: one run per algorithm, in the tracking server and experiment of MLflow's
    usual environment (``MLFLOW_TRACKING_URI``, ``MLFLOW_EXPERIMENT_NAME``); the run is ended
    by ``algorithm.stop()``. :attr:`run_id` names it. A failure to log is a warning unless
    :attr:`strict` (module docstring)."""

    #: True: a failure to log (other than a checkpoint's) stops training with its error.
    strict: bool = False

    def __init__(self) -> None:
        self.run_id: str | None = None
        self._client: Any = None
        self._stopped = False
        self._refused: set[str] = set()  # metric names MLflow refuses, warned about once
        #: Held while a run starts: a background save reports from its writer thread, maybe
        #: while the first train() result arrives, and each would start its own run.
        self._start_lock = threading.Lock()

    def _start(self, algorithm: Any) -> bool:
        """Start the run unless it is running (or the algorithm was stopped); True when one is."""
        with self._start_lock:
            if self.run_id is None and not self._stopped:
                self._start_run(algorithm)
            return self.run_id is not None

    def _start_run(self, algorithm: Any) -> None:
        mlflow = _import("mlflow", "mlflow")
        from mlflow.tracking import MlflowClient

        self._client = MlflowClient()
        experiment_id = self._experiment_id(os.environ.get("MLFLOW_EXPERIMENT_NAME", "Default"))
        run = self._client.create_run(experiment_id, run_name=f"{type(algorithm).__name__}",
                                      tags={"cairn.algorithm": type(algorithm).__name__})
        self.run_id = run.info.run_id
        params = [mlflow.entities.Param(k, v) for k, v in flat_params(algorithm.config.to_dict()).items()]
        for start in range(0, len(params), 100):  # MLflow takes at most 100 params per batch
            self._client.log_batch(self.run_id, params=params[start:start + 100])

    def _experiment_id(self, name: str) -> str:
        """The ID of the experiment ``name``, created if missing. Another process (a parallel
        Tune trial) may create it between the look-up and the create: MLflow then refuses the
        create (``RESOURCE_ALREADY_EXISTS``), and the run goes into the one it created."""
        from mlflow.exceptions import MlflowException

        experiment = self._client.get_experiment_by_name(name)
        if experiment is not None:
            return str(experiment.experiment_id)
        try:
            return str(self._client.create_experiment(name))
        except MlflowException as exc:
            experiment = self._client.get_experiment_by_name(name)
            if exc.error_code != "RESOURCE_ALREADY_EXISTS" or experiment is None:
                raise
            return str(experiment.experiment_id)

    @_warns
    def on_train_result(self, *, algorithm: Any, result: dict[str, Any]) -> None:
        if not self._start(algorithm):
            return
        from mlflow.entities import Metric

        step = int(result.get("training_iteration", 0))
        stamp = int(1000 * time.time())
        metrics = [Metric(name, value, stamp, step) for name, value in flat_metrics(result)
                   if self._accepts(name, value, stamp, step)]
        for start in range(0, len(metrics), 1000):
            self._client.log_batch(self.run_id, metrics=metrics[start:start + 1000])

    def _accepts(self, name: str, value: float, stamp: int, step: int) -> bool:
        """Whether MLflow takes this metric, by MLflow's own check (the one its stores run on a
        batch). A refused name is one warning, the first time only, and the metric is left out:
        one bad name would otherwise fail the whole batch, every metric of every iteration."""
        if name in self._refused:
            return False
        try:
            validate_metric(name, value, stamp, step)
        except Exception as exc:
            if self.strict:
                raise
            self._refused.add(name)
            message = getattr(exc, "message", str(exc))
            warnings.warn(LoggerWarning(
                f"MLflowLogger leaves out the metric {name!r}: MLflow refuses it ({message}). The "
                "other metrics are logged. Fix: rename the metric (e.g. the custom_metrics key "
                "set in your callbacks) to a name MLflow allows."), stacklevel=4)
            return False
        return True

    @_warns
    def on_checkpoint_saved(self, *, algorithm: Any, checkpoint: str, iteration: int) -> None:
        if not self._start(algorithm):
            return
        local = _local_dir(checkpoint)
        if local is None:
            self._client.set_tag(self.run_id, "cairn.last_checkpoint", checkpoint)
            return
        self._client.log_artifacts(self.run_id, str(local), artifact_path=f"checkpoints/{local.name}")
        self._client.set_tag(self.run_id, "cairn.last_checkpoint", f"checkpoints/{local.name}")

    @_warns
    def on_algorithm_stop(self, *, algorithm: Any) -> None:
        self._stopped = True
        if self.run_id is not None:
            self._client.set_terminated(self.run_id)


class WandbLogger(Callbacks):
    """Logs to Weights & Biases: one run per algorithm in the project ``WANDB_PROJECT``
    (default ``"cairn"``), online or as W&B's environment says (``WANDB_MODE=offline``); the
    run is finished by ``algorithm.stop()``. :attr:`run` is the ``wandb`` run. A failure to log
    is a warning unless :attr:`strict` (module docstring)."""

    #: True: a failure to log (other than a checkpoint's) stops training with its error.
    strict: bool = False

    def __init__(self) -> None:
        self.run: Any = None
        self._stopped = False
        self._start_lock = threading.Lock()  #: held while a run starts (as MLflowLogger's)

    def _start(self, algorithm: Any) -> bool:
        """Start the run unless it is running (or the algorithm was stopped); True when one is."""
        with self._start_lock:
            if self.run is None and not self._stopped:
                wandb = _import("wandb", "wandb")
                self.run = wandb.init(project=os.environ.get("WANDB_PROJECT", "cairn"), reinit="create_new",
                                      config=json.loads(json.dumps(algorithm.config.to_dict(), default=str)),
                                      name=type(algorithm).__name__)
                # training_iteration is the x-axis of every metric, not W&B's own step: W&B drops
                # a row logged at a step below its last one, which would lose every iteration
                # trained again after restore() of an earlier checkpoint.
                self.run.define_metric("training_iteration")
                self.run.define_metric("*", step_metric="training_iteration")
            return self.run is not None

    @_warns
    def on_train_result(self, *, algorithm: Any, result: dict[str, Any]) -> None:
        if self._start(algorithm):
            self.run.log(dict(flat_metrics(result)), commit=True)

    @_warns
    def on_checkpoint_saved(self, *, algorithm: Any, checkpoint: str, iteration: int) -> None:
        if not self._start(algorithm):
            return
        local = _local_dir(checkpoint)
        if local is None:
            self.run.summary["cairn.last_checkpoint"] = checkpoint
            return
        import wandb

        artifact = wandb.Artifact(f"checkpoint-{self.run.id}", type="model",
                                  metadata={"iteration": iteration, "path": checkpoint})
        artifact.add_dir(str(local))
        self.run.log_artifact(artifact, aliases=["latest", local.name])

    @_warns
    def on_algorithm_stop(self, *, algorithm: Any) -> None:
        self._stopped = True
        if self.run is not None:
            self.run.finish()
            self.run = None
