"""Observation filters: running normalisation that travels with the policy.

The filter belongs to the policy (not to the env runner) so that a policy restored alone, or
exported, normalises observations exactly as it did in training.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping
from typing import Any

import numpy as np

from cairn.errors import ConfigError, ObservationSpaceError

__all__ = ["NoFilter", "MeanStdFilter", "make_filter", "mean_std_state_problem", "FILTER_NAMES"]

FILTER_NAMES = ("NoFilter", "MeanStdFilter")


class NoFilter:
    """Passes observations through unchanged."""

    name = "NoFilter"

    def update(self, batch: np.ndarray) -> None:
        """Nothing to learn."""

    def apply(self, batch: np.ndarray) -> np.ndarray:
        return batch

    def get_state(self, *, copy: bool = True) -> dict[str, Any]:
        """Only the name: the filter has no state."""
        return {"name": self.name}

    def check_state(self, state: Mapping[str, Any]) -> None:
        """Nothing to check: the filter has no state."""

    def set_state(self, state: dict[str, Any]) -> None:
        """Stateless."""

    def pop_delta(self) -> dict[str, Any] | None:
        return None

    def merge_delta(self, delta: dict[str, Any]) -> None:
        """Stateless."""


def _merge(
    n_a: int, mean_a: np.ndarray, m2_a: np.ndarray, n_b: int, mean_b: np.ndarray, m2_b: np.ndarray
) -> tuple[int, np.ndarray, np.ndarray]:
    """Chan et al.'s parallel update of (count, mean, sum of squared deviations)."""
    n = n_a + n_b
    if n_b == 0:
        return n_a, mean_a, m2_a
    delta = mean_b - mean_a
    mean = mean_a + delta * (n_b / n)
    m2 = m2_a + m2_b + delta * delta * (n_a * n_b / n)
    return n, mean, m2


class MeanStdFilter:
    """``(obs - mean) / (std + eps)``, clipped to ``[-clip, clip]``, with running statistics.

    Statistics since the last :meth:`pop_delta` are also kept separately, so that copies of the
    policy on remote env runners can send what they saw to the learner to be merged.
    """

    name = "MeanStdFilter"

    def __init__(self, size: int, *, clip: float = 10.0, epsilon: float = 1e-8) -> None:
        self.size, self.clip, self.epsilon = size, clip, epsilon
        self.count = 0
        self.mean = np.zeros(size, dtype=np.float64)
        self.m2 = np.zeros(size, dtype=np.float64)
        self._delta = (0, np.zeros(size), np.zeros(size))
        self._cache: tuple[np.ndarray, np.ndarray] | None = None

    @property
    def std(self) -> np.ndarray:
        """Population standard deviation of everything seen so far (1 before any data)."""
        if self.count < 2:
            return np.ones(self.size)
        return np.sqrt(self.m2 / self.count)

    def update(self, batch: np.ndarray) -> None:
        """Merge the rows of ``batch`` into the statistics. Rows holding NaN or infinity (or
        values whose squares overflow) are an :class:`~cairn.errors.ObservationSpaceError`,
        with nothing changed: merged, one such value would make that feature's mean or variance
        NaN for the rest of the run, and so every later observation of it."""
        n = batch.shape[0]
        if n == 0:
            return
        b_mean = batch.mean(axis=0, dtype=np.float64)
        b_m2 = ((batch - b_mean) ** 2).sum(axis=0, dtype=np.float64)
        if not (np.isfinite(b_mean).all() and np.isfinite(b_m2).all()):
            raise _non_finite_error(batch)
        self.count, self.mean, self.m2 = _merge(self.count, self.mean, self.m2, n, b_mean, b_m2)
        self._delta = _merge(*self._delta, n, b_mean, b_m2)
        self._cache = None

    def constants(self) -> tuple[np.ndarray, np.ndarray]:
        """``(mean, 1 / (std + epsilon))`` as float32, exactly as :meth:`apply` uses them
        (exported models embed these)."""
        if self._cache is None:
            self._cache = (
                self.mean.astype(np.float32),
                (1.0 / (self.std + self.epsilon)).astype(np.float32),
            )
        return self._cache

    def apply(self, batch: np.ndarray) -> np.ndarray:
        mean, inv_std = self.constants()
        out = (batch - mean) * inv_std
        return np.clip(out, -self.clip, self.clip, out=out)

    def get_state(self, *, copy: bool = True) -> dict[str, Any]:
        """Count, mean and sum of squared deviations (``copy=False``: the arrays as views)."""
        return {
            "name": self.name,
            "clip": self.clip,
            "epsilon": self.epsilon,
            "count": self.count,
            "mean": self.mean.copy() if copy else self.mean,
            "m2": self.m2.copy() if copy else self.m2,
        }

    def check_state(self, state: Mapping[str, Any]) -> None:
        """Raise ValueError naming the entry when :meth:`set_state` would refuse ``state``."""
        problem = mean_std_state_problem(state, self.size)
        if problem is not None:
            raise ValueError(f"MeanStdFilter state: {problem}")

    def set_state(self, state: dict[str, Any]) -> None:
        """Restore :meth:`get_state`; a state that would normalise to nonsense (see
        :func:`mean_std_state_problem`) is a ValueError, and the filter is left as it was."""
        self.check_state(state)
        mean = np.asarray(state["mean"], dtype=np.float64)
        m2 = np.asarray(state["m2"], dtype=np.float64)
        self.count = int(state["count"])
        self.mean, self.m2 = mean.copy(), m2.copy()
        self.clip, self.epsilon = float(state["clip"]), float(state["epsilon"])
        self._delta = (0, np.zeros(self.size), np.zeros(self.size))
        self._cache = None

    def pop_delta(self) -> dict[str, Any] | None:
        """Return and forget the statistics gathered since the last call."""
        n, mean, m2 = self._delta
        self._delta = (0, np.zeros(self.size), np.zeros(self.size))
        return {"count": n, "mean": mean, "m2": m2}

    def merge_delta(self, delta: dict[str, Any]) -> None:
        """Add statistics gathered elsewhere (by a remote env runner's copy)."""
        self.count, self.mean, self.m2 = _merge(
            self.count, self.mean, self.m2, int(delta["count"]), delta["mean"], delta["m2"]
        )
        self._cache = None


def _non_finite_error(batch: np.ndarray) -> ObservationSpaceError:
    bad = np.argwhere(~np.isfinite(batch))
    where = (f"feature {int(bad[0][1])} (in flatten order) of observation {int(bad[0][0])} of the "
             f"batch is {float(batch[tuple(bad[0])])}" if len(bad) else "their squares overflow float64")
    return ObservationSpaceError(
        f"MeanStdFilter cannot learn from observations holding NaN or infinity: {where}. One such "
        "value would make that feature's running mean or variance NaN for the rest of the run. "
        "Fix: make the environment return finite observations (clip or replace them in an "
        "observation wrapper).")


def _positive_real(value: Any) -> bool:
    return (isinstance(value, (numbers.Real, np.floating, np.integer)) and not isinstance(value, bool)
            and math.isfinite(float(value)) and float(value) > 0)


def mean_std_state_problem(state: Mapping[str, Any], size: int) -> str | None:
    """What makes ``state`` unfit to be the state of a MeanStdFilter of ``size`` features, or
    None: ``mean`` and ``m2`` must be ``size`` finite numbers (``m2``, sums of squared
    deviations, >= 0; 0 when ``count`` < 2, and ``mean`` 0 when ``count`` is 0, as no data gives
    otherwise), ``count`` a whole number >= 0, ``clip`` and ``epsilon`` finite and > 0; and
    since the filter acts in float32, ``mean`` and the standard deviation from ``m2`` finite in
    float32 and ``epsilon`` within float32's normal range. Any other such state would normalise
    every observation to NaN, to 0 or to one bound without an error (a negative ``m2`` has no
    square root; ``clip`` 0 maps all to 0; a mean of 1e300 is infinite in float32)."""
    try:
        mean = np.asarray(state["mean"], dtype=np.float64)
        m2 = np.asarray(state["m2"], dtype=np.float64)
    except (KeyError, TypeError, ValueError) as exc:
        return f"'mean' and 'm2' must be arrays of numbers ({type(exc).__name__}: {exc})"
    if mean.shape != (size,) or m2.shape != (size,):
        return f"'mean' and 'm2' have shapes {mean.shape} and {m2.shape}, expected ({size},)"
    count = state.get("count")
    if (isinstance(count, bool) or not isinstance(count, (numbers.Real, np.floating, np.integer))
            or not math.isfinite(float(count)) or count < 0 or not float(count).is_integer()):
        return f"'count'={count!r:.100} must be a whole number >= 0"
    if not np.isfinite(mean).all():
        return "'mean' holds NaN or infinity"
    if not (np.isfinite(m2).all() and (m2 >= 0).all()):
        return "'m2' (sums of squared deviations) must be finite and >= 0"
    # What fewer than two observations give: nothing (mean and m2 0), or one (m2 0). Any other
    # m2 would be merged into the statistics of everything seen later, and a mean would
    # normalise without data behind it, both without an error.
    if count < 2 and m2.any():
        return (f"'m2' must be 0 for 'count'={int(float(count))} (fewer than two observations "
                "deviate from nothing)")
    if count == 0 and mean.any():
        return "'mean' must be 0 for 'count'=0 (no observation gave it)"
    for key in ("clip", "epsilon"):
        if not _positive_real(state.get(key)):
            return f"'{key}'={state.get(key)!r:.100} must be a finite number > 0"
    # The filter acts with float32 constants (constants(); exported models embed them): a mean
    # beyond float32's range becomes infinite (every value normalises to one bound), a std beyond
    # it has an inverse of 0 (every value normalises to 0), and an epsilon below float32's
    # smallest normal number gives a constant feature (std 0) an infinite inverse std (its mean
    # value normalises to NaN). An epsilon from the smallest normal up keeps 1 / (std + epsilon)
    # finite.
    limits = f"float32's range (magnitudes up to {_F32.max:.4g}), in which the filter acts"
    if not _float32_finite(mean):
        return f"'mean' holds values beyond {limits}"
    std = np.sqrt(m2 / float(count)) if float(count) >= 2 else np.ones(size)
    if not _float32_finite(std):
        return (f"'m2' gives a standard deviation beyond {limits} (its inverse would be 0, and every "
                "observation would normalise to 0)")
    epsilon = float(state["epsilon"])
    if not (float(_F32.tiny) <= epsilon and _float32_finite(np.array([epsilon]))):
        return (f"'epsilon'={state['epsilon']!r:.100} must be within float32's normal range "
                f"({_F32.tiny:.4g} to {_F32.max:.4g}), in which the filter acts (default 1e-08)")
    return None


_F32 = np.finfo(np.float32)


def _float32_finite(values: np.ndarray) -> bool:
    """Whether ``values`` stay finite when cast to float32 (as :meth:`MeanStdFilter.constants` casts)."""
    with np.errstate(over="ignore"):
        return bool(np.isfinite(values.astype(np.float32)).all())


def make_filter(name: str, size: int) -> NoFilter | MeanStdFilter:
    """Build the observation filter called ``name`` for observations of ``size`` floats."""
    if name == "MeanStdFilter":
        return MeanStdFilter(size)
    if name == "NoFilter":
        return NoFilter()
    raise ConfigError(f"Config 'observation_filter'={name!r} is unknown; choose one of {FILTER_NAMES}.")
