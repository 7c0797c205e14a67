"""The acting path's mask checks and categorical draws call numpy's ufunc reductions directly
(``np.logical_or.reduce``, ``np.maximum.reduce``, ``np.add.reduce``) instead of the ndarray
methods that wrap them, for speed on a few rows per call. These tests hold them to the slow path
they replaced, written out below with the ndarray methods, bit for bit, on inputs chosen to make
the two disagree if they could: NaN and infinite scores, mask entries of exactly 0.5 and NaN,
rows with no legal action, empty batches, several sub-actions, float64 scores, and uniform draws
that land exactly on CDF entries. The draws come from two generators with one seed, so both
paths see the same uniforms.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence

import gymnasium as gym
import numpy as np
import pytest

from cairn.errors import ActionMaskError
from cairn.numpy_acting import row_means
from cairn.policy.action_masking import check_masks, legal_actions
from cairn.policy.distributions import distribution_for


def _segments(mask: np.ndarray, sizes: Sequence[int]) -> list[np.ndarray]:
    return np.split(mask, np.cumsum(sizes)[:-1], axis=1) if len(sizes) > 1 else [mask]


def slow_check_masks(mask: np.ndarray, sizes: Sequence[int]) -> tuple[int, ...]:
    """The rows :func:`check_masks` must name (empty: it must not raise), with ndarray methods."""
    empty = np.zeros(mask.shape[0], dtype=bool)
    for segment in _segments(mask, sizes):
        empty |= ~(segment > 0.5).any(axis=1)
    return tuple(int(i) for i in np.flatnonzero(empty)) if empty.any() else ()


def slow_legal_actions(raw: np.ndarray, inputs: np.ndarray, mask: np.ndarray,
                       sizes: Sequence[int]) -> np.ndarray:
    columns = raw.reshape(raw.shape[0], -1)
    fixed = None
    for k, (segment, scores) in enumerate(zip(_segments(mask, sizes), _segments(inputs, sizes))):
        chosen = columns[:, k]
        illegal = segment[np.arange(chosen.shape[0]), chosen] <= 0.5
        if illegal.any():
            fixed = columns.copy() if fixed is None else fixed
            for row in np.flatnonzero(illegal):  # the best legal score (a NaN first, as argmax)
                legal = [j for j in range(segment.shape[1]) if segment[row, j] > 0.5]
                values = [float(scores[row, j]) for j in legal]
                nans = [j for j, v in zip(legal, values, strict=True) if np.isnan(v)]
                fixed[row, k] = (nans[0] if nans else legal[int(np.argmax(values))] if legal
                                 else 0)  # no legal action (check_masks raises first): index 0
    return raw if fixed is None else fixed.reshape(raw.shape)


def slow_sample_and_logp(logits: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Categorical inverse-CDF sampling and the sample's logp, as the acting path did it."""
    top = logits.max(axis=-1, keepdims=True)
    cdf = np.cumsum(np.exp(logits - top), axis=-1)
    u = rng.random((cdf.shape[0], 1), dtype=np.float32) * cdf[:, -1:]
    raw = np.minimum((cdf <= u).sum(axis=-1), cdf.shape[-1] - 1).astype(np.int64)
    logp = logits[np.arange(len(raw)), raw] - top[:, 0] - np.log(cdf[:, -1])
    return raw, logp.astype(np.float32, copy=False)


def same(a: np.ndarray, b: np.ndarray) -> bool:
    """Equal dtype, shape and bytes (NaNs included)."""
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def adversarial_masks(rng: np.random.Generator, rows: int, width: int) -> np.ndarray:
    mask = rng.choice(np.array([0.0, 1.0, 0.5, 0.5000001, np.nan, -1.0, 2.0], np.float32), (rows, width))
    if rows:
        mask[0] = 0.0  # a row with no legal action at all
    return mask


@pytest.mark.parametrize("sizes", [(7,), (3, 2), (1,), (2, 1, 3)])
@pytest.mark.parametrize("rows", [0, 1, 2, 9])
def test_mask_checks_and_legal_actions_equal_the_slow_path(sizes: tuple[int, ...], rows: int) -> None:
    rng = np.random.default_rng(sum(sizes) * 100 + rows)
    for _ in range(50):
        mask = adversarial_masks(rng, rows, sum(sizes))
        expected = slow_check_masks(mask, sizes)
        if expected:
            with pytest.raises(ActionMaskError) as caught:
                check_masks(mask, sizes)
            assert caught.value.rows == expected
        else:
            check_masks(mask, sizes)
        if not rows:
            continue  # legal_actions takes at least one row (numpy cannot reshape 0 rows to [0, -1])
        scores = rng.standard_normal((rows, sum(sizes))).astype(np.float32)
        scores[rng.random(scores.shape) < 0.1] = np.nan
        raw = np.stack([rng.integers(n, size=rows) for n in sizes], axis=-1).astype(np.int64)
        if len(sizes) == 1 and rng.random() < 0.5:
            raw = raw[:, 0]  # a Discrete action's raw shape is [B]
        assert same(legal_actions(raw, scores, mask, sizes), slow_legal_actions(raw, scores, mask, sizes))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("rows", [0, 1, 2, 8, 33])
def test_categorical_draws_and_logp_equal_the_slow_path(dtype: type, rows: int) -> None:
    dist = distribution_for(gym.spaces.Discrete(7))
    data = np.random.default_rng(rows)
    for trial in range(60):
        logits = data.standard_normal((rows, 7)).astype(dtype) * data.choice([0.01, 1.0, 30.0])
        if trial % 3 == 0:  # masked scores, a tie at the top, infinities and NaN
            logits[data.random(logits.shape) < 0.4] = -1e9
            logits[:, 3] = logits[:, 2]
        if trial % 5 == 0 and rows:
            logits[0, 0], logits[-1, -1] = np.inf, -np.inf
        if trial % 7 == 0 and rows:
            logits[rows // 2, 1] = np.nan
        seed = int(data.integers(2**32))
        with np.errstate(invalid="ignore", over="ignore"):
            raw, logp = dist.sample_numpy_and_logp(logits, np.random.default_rng(seed))
            slow_raw, slow_logp = slow_sample_and_logp(logits, np.random.default_rng(seed))
            only = dist.sample_numpy(logits, np.random.default_rng(seed))
        assert same(raw, slow_raw) and same(logp, slow_logp) and same(only, slow_raw)


def test_a_uniform_on_a_cdf_entry_takes_the_same_action() -> None:
    """``u`` equal to a CDF entry: the count of entries at or below it decides, on both paths.
    Scores of equal probability make the CDF's entries exact multiples that a float32 uniform can
    hit; a generator that always returns the same value forces the hit."""

    class Fixed(np.random.Generator):
        def __init__(self, value: float) -> None:
            super().__init__(np.random.PCG64(0))
            self.value = value

        def random(self, size=None, dtype=np.float64, out=None):  # type: ignore[no-untyped-def,override]
            return np.full(size, self.value, dtype=dtype)

    dist = distribution_for(gym.spaces.Discrete(4))
    logits = np.zeros((3, 4), np.float32)
    for value in (0.0, 0.25, 0.5, 0.75, np.nextafter(np.float32(1.0), np.float32(0.0))):
        raw, logp = dist.sample_numpy_and_logp(logits, Fixed(float(value)))
        slow_raw, slow_logp = slow_sample_and_logp(logits, Fixed(float(value)))
        assert same(raw, slow_raw) and same(logp, slow_logp)


def adversarial_rows(rng: np.random.Generator, rows: int, width: int, dtype: type) -> np.ndarray:
    """Q-values whose sum rounds differently in another order or precision, and whose mean is
    rounded twice by a division in float64: magnitudes over the dtype's range, subnormal ones
    included, signs mixed, and NaN and infinite entries now and then."""
    low, high = {np.float16: (-8, 5), np.float32: (-45, 39), np.float64: (-320, 308)}[dtype]
    scale = 10.0 ** rng.integers(low, high, (rows, width)).astype(float)
    values = rng.choice([-1.0, 1.0], (rows, width)) * rng.random((rows, width)) * scale
    special = rng.random((rows, width))
    values[special < 0.02] = np.nan
    values[(special >= 0.02) & (special < 0.04)] = np.inf
    return values.astype(dtype)


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
@pytest.mark.parametrize("width", [0, 1, 2, 3, 7, 18])
@pytest.mark.parametrize("rows", [0, 1, 2, 32])
def test_row_means_equal_ndarray_mean(dtype: type, width: int, rows: int) -> None:
    """The dueling head's mean over actions (DQN acting, targets and update) skips ``mean``'s wrapper:
    it must give ``mean``'s bits, on rows that make a sum in another order or dtype, or a division
    in another precision, come out different, and on strided views as the network's outputs can be."""
    rng = np.random.default_rng(rows * 1000 + width * 10 + np.dtype(dtype).itemsize)
    for _ in range(20):
        values = adversarial_rows(rng, rows, width, dtype)
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # a mean of no columns is NaN, warned
            for x in (values, np.asfortranarray(values), values[::-1], values[:, ::2]):
                got, expected = row_means(x), x.mean(axis=1, keepdims=True)
                assert same(got, expected), (got, expected)
