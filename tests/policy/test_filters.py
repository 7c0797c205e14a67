"""MeanStdFilter: VecNormalize-style running normalisation of observations."""

from __future__ import annotations

import numpy as np
import pytest

from cairn.policy.filters import MeanStdFilter


def _data() -> np.ndarray:
    return np.random.default_rng(0).normal([3.0, -1.0, 0.0], [2.0, 0.1, 5.0], size=(900, 3))


def test_clip_and_epsilon() -> None:
    f = MeanStdFilter(3, clip=2.0, epsilon=1e-8)
    f.update(_data())
    x = np.array([[3.0, -1.0, 0.0], [1e3, -1e3, 0.1]], np.float32)
    out = f.apply(x.copy())
    expected = np.clip((x - f.mean) / (f.std + 1e-8), -2.0, 2.0)
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-6)
    assert out[1].tolist()[:2] == [2.0, -2.0]


def test_a_constant_feature_stays_finite() -> None:
    f = MeanStdFilter(1)
    f.update(np.full((10, 1), 4.0))
    out = f.apply(np.array([[4.0], [4.5]], np.float32))
    assert out.tolist() == [[0.0], [10.0]]  # zero deviation stays 0; any other is clipped


def test_remote_deltas_merge_to_the_same_statistics() -> None:
    data = _data()
    alone, learner, remote = MeanStdFilter(3), MeanStdFilter(3), MeanStdFilter(3)
    alone.update(data)
    learner.update(data[:300])
    remote.set_state(learner.get_state())
    remote.update(data[300:500])
    remote.update(data[500:])
    learner.merge_delta(remote.pop_delta())
    assert learner.count == alone.count == 900
    np.testing.assert_allclose(learner.mean, alone.mean, rtol=1e-12)
    np.testing.assert_allclose(learner.m2, alone.m2, rtol=1e-10)
    assert remote.pop_delta()["count"] == 0


def test_state_round_trip_is_exact() -> None:
    f = MeanStdFilter(3)
    f.update(_data())
    g = MeanStdFilter(3)
    g.set_state(f.get_state())
    x = _data()[:5].astype(np.float32)
    np.testing.assert_array_equal(g.apply(x.copy()), f.apply(x.copy()))
    f.update(x)
    g.update(x)
    np.testing.assert_array_equal(g.m2, f.m2)
    with pytest.raises(ValueError, match="expected \\(4,\\)"):
        MeanStdFilter(4).set_state(f.get_state())
