"""The names of a result's values: nested keys joined with ``/`` (``league/rating/main``,
``evaluation/league/random_legal/win_rate``, ``learners/default_policy/policy_loss``).

One naming for every place that names a metric: the league, evaluation and custom-metric columns
of progress.csv and TensorBoard (:mod:`cairn.cli.runlog`), the metrics MLflow and W&B log
(:mod:`cairn.callbacks.loggers`), and ``CheckpointManager(keep_best=...)``
(:func:`cairn.checkpoint.save_schedule.result_metric`, which also reads the dotted form).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterator, Mapping
from typing import Any

__all__ = ["flat_metrics", "flat_result", "is_finite_number"]


def flat_result(result: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Every value of ``result`` that is not a mapping, by name: nested keys joined with ``/``
    (after ``prefix``), in the result's order.

    >>> flat_result({"training_iteration": 3, "league": {"rating": {"main": 25.5}}})
    {'training_iteration': 3, 'league/rating/main': 25.5}
    """
    out: dict[str, Any] = {}
    for key, value in result.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.update(flat_result(value, f"{name}/"))
        else:
            out[name] = value
    return out


def is_finite_number(value: Any) -> bool:
    """A real number (not a bool) that is finite: an int or float, and numpy's scalars
    (``np.float32``, ``np.int64``: registered as :class:`numbers.Real`), which a metric computed
    with numpy is.

    >>> import numpy as np
    >>> [is_finite_number(v) for v in (1, 2.5, np.float32(3), np.int64(4), True, float("nan"), "5")]
    [True, True, True, True, False, False, False]
    """
    return isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)


def flat_metrics(result: Mapping[str, Any], prefix: str = "") -> Iterator[tuple[str, float]]:
    """``(name, value)`` for every finite number in a result, named as :func:`flat_result` names it."""
    for name, value in flat_result(result, prefix).items():
        if is_finite_number(value):
            yield name, float(value)
