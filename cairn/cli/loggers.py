"""``cairn train --mlflow`` / ``--wandb``: the ready-made loggers of :mod:`cairn.callbacks`,
attached to the algorithm of this run only (the config's own callbacks run first; nothing about
them is stored in the config or the checkpoints)."""

from __future__ import annotations

import argparse
import functools
from typing import TYPE_CHECKING, Any

from cairn.callbacks import Callbacks, MLflowLogger, WandbLogger
from cairn.callbacks.base import report_checkpoint_saved
from cairn.release import release_all

if TYPE_CHECKING:
    from cairn.algorithms.algorithm import Algorithm

__all__ = ["add_logger_options", "attach_loggers", "LoggedCallbacks"]

def add_logger_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--mlflow", action="store_true",
                        help="also log the run to MLflow (MLFLOW_TRACKING_URI, MLFLOW_EXPERIMENT_NAME; "
                             "pip install 'cairn-rl[mlflow]')")
    parser.add_argument("--wandb", action="store_true",
                        help="also log the run to Weights & Biases (WANDB_PROJECT, WANDB_MODE; "
                             "pip install 'cairn-rl[wandb]')")


class LoggedCallbacks(Callbacks):
    """The algorithm's own callbacks, then each logger, for the algorithm-level hooks. Each runs
    also after one before it raised, and then the first error is raised: an own hook that fails
    keeps no logger from logging the iteration (it counted; ``last_result`` holds it), the saved
    checkpoint, or from ending its run at ``stop()``."""

    def __init__(self, own: Callbacks, loggers: list[Callbacks]) -> None:
        self.own, self.loggers = own, loggers

    def _each(self, hook: str, **kwargs: Any) -> None:
        release_all(*(functools.partial(getattr(target, hook), **kwargs)
                      for target in (self.own, *self.loggers)))

    def on_train_result(self, *, algorithm: Any, result: dict[str, Any]) -> None:
        self._each("on_train_result", algorithm=algorithm, result=result)

    def on_evaluate_end(self, *, algorithm: Any, evaluation_metrics: dict[str, Any]) -> None:
        self._each("on_evaluate_end", algorithm=algorithm, evaluation_metrics=evaluation_metrics)

    def on_checkpoint_saved(self, *, algorithm: Any, checkpoint: str, iteration: int) -> None:
        release_all(*(functools.partial(report_checkpoint_saved, target, algorithm=algorithm,
                                        checkpoint=checkpoint, iteration=iteration)
                      for target in (self.own, *self.loggers)))

    def on_checkpoint_loaded(self, *, algorithm: Any) -> None:
        self._each("on_checkpoint_loaded", algorithm=algorithm)

    def on_algorithm_stop(self, *, algorithm: Any) -> None:
        self._each("on_algorithm_stop", algorithm=algorithm)


def attach_loggers(algo: Algorithm, args: argparse.Namespace) -> None:
    """Start the loggers ``--mlflow``/``--wandb`` ask for on ``algo`` (their runs begin at the first
    ``train()`` result)."""
    loggers: list[Callbacks] = []
    if getattr(args, "mlflow", False):
        loggers.append(MLflowLogger())
    if getattr(args, "wandb", False):
        loggers.append(WandbLogger())
    if not loggers:
        return
    for logger in loggers:
        logger.on_algorithm_init(algorithm=algo)
    algo.callbacks = LoggedCallbacks(algo.callbacks, loggers)
