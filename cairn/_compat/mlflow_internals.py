"""MLflow's internals that cairn relies on.

Touches ``mlflow.utils.validation._validate_metric``: the check MLflow's tracking stores run on
each metric of a ``log_batch`` (its name's characters and length, a path-like name, the value,
timestamp and step).

Why: one metric that fails it makes MLflow refuse the whole batch, so every metric of every
iteration would be lost; :class:`cairn.callbacks.MLflowLogger` runs the same check first and
leaves out only the refused metrics. MLflow's public ``validate_param_and_metric_name`` checks the
characters only. Where the function is missing, nothing is checked here and the store's own check
on the batch decides, as before.

Supported: ``mlflow-skinny>=2.10,<4`` (pyproject.toml). The function has kept its name and
signature from MLflow 2.10 through 3.x.
"""

from __future__ import annotations

from typing import Any

__all__ = ["validate_metric"]


def validate_metric(name: str, value: float, timestamp: int, step: int) -> None:
    """Raise MLflow's own error when MLflow's stores would refuse this metric; return None when
    they take it (or when this MLflow has no such check)."""
    try:
        from mlflow.utils.validation import _validate_metric
    except ImportError:
        return
    check: Any = _validate_metric
    check(name, value, timestamp, step)
