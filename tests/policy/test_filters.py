"""MeanStdFilter: VecNormalize-style running normalisation of observations."""

from __future__ import annotations

import gymnasium as gym
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


_BAD_STATES = {
    "count": -5, "m2": np.array([1.0, -1.0, 1.0]), "mean": np.array([np.nan, 0.0, 0.0]),
    "clip": 0.0, "epsilon": -1.0,
}


@pytest.mark.parametrize("value", [-5, 2.5, True, float("inf"), "7"], ids=str)
def test_a_count_that_is_not_a_whole_number_is_refused(value: object) -> None:
    f = MeanStdFilter(3)
    f.update(_data())
    before = f.get_state()
    with pytest.raises(ValueError, match="'count'"):
        f.set_state({**before, "count": value})
    assert f.count == before["count"]


@pytest.mark.parametrize(("key", "value"), [
    ("m2", np.array([1.0, -1.0, 1.0])), ("m2", np.array([1.0, np.inf, 1.0])),
    ("mean", np.array([np.nan, 0.0, 0.0])), ("mean", np.array([0.0, -np.inf, 0.0])),
    ("clip", 0.0), ("clip", -3.0), ("clip", float("nan")), ("epsilon", 0.0), ("epsilon", -1.0),
], ids=lambda v: str(v) if isinstance(v, str) else "")
def test_a_state_that_would_normalise_to_nonsense_is_refused_and_changes_nothing(key: str,
                                                                                 value: object) -> None:
    # Each of these was restored silently before, and then turned every observation into NaN
    # (a negative or infinite m2, a NaN mean), into 0 (clip 0, an infinite m2) or into one bound
    # (a negative clip).
    f = MeanStdFilter(3)
    f.update(_data())
    before = f.get_state()
    x = _data()[:4].astype(np.float32)
    expected = f.apply(x.copy())
    with pytest.raises(ValueError, match=f"MeanStdFilter state: '{key}'"):
        f.set_state({**before, key: value})
    np.testing.assert_array_equal(f.apply(x.copy()), expected)


_F32 = np.finfo(np.float32)


@pytest.mark.parametrize(("key", "value"), [
    ("mean", np.array([1e300, 0.0, 0.0])), ("mean", np.array([0.0, -1e39, 0.0])),
    ("m2", np.array([1e300, 0.0, 1.0])), ("epsilon", 1e-45), ("epsilon", 1e-40), ("epsilon", 1e39),
], ids=lambda v: str(v) if isinstance(v, str) else "")
def test_a_state_finite_in_float64_but_not_in_the_float32_constants_is_refused(key: str,
                                                                               value: object) -> None:
    # The filter acts with float32 constants (constants(), and the exported models embed them).
    # Restored silently before: a mean of 1e300 became inf, so every value of that feature
    # normalised to one bound; an m2 of 1e300 gave a std whose inverse is 0 in float32, so every
    # value normalised to 0; epsilon 1e-45 on this constant feature (m2 0) gave an infinite
    # inverse std, so its mean value normalised to NaN and every other to a bound.
    f = MeanStdFilter(3)
    f.update(np.column_stack([_data()[:, 0], np.full(900, 4.0), _data()[:, 2]]))
    assert f.m2[1] == 0.0  # the constant feature
    before = f.get_state()
    x = np.array([[3.0, 4.0, 0.0], [2.0, 4.5, 1.0]], np.float32)
    expected = f.apply(x.copy())
    with pytest.raises(ValueError, match=f"MeanStdFilter state: '{key}'.*float32"):
        f.set_state({**before, key: value})
    np.testing.assert_array_equal(f.apply(x.copy()), expected)  # unchanged
    g = MeanStdFilter(3)  # and the next restore works
    g.set_state(before)
    np.testing.assert_array_equal(g.apply(x.copy()), expected)


@pytest.mark.parametrize(("key", "value"), [
    ("mean", np.array([float(_F32.max), 0.0, -float(_F32.max)])), ("epsilon", float(_F32.tiny)),
    ("epsilon", float(_F32.max) / 2), ("m2", np.array([1e70, 0.0, 1.0])),
], ids=lambda v: str(v) if isinstance(v, str) else "")
def test_a_state_at_the_edges_of_float32_is_restored_and_acts_finitely(key: str, value: object) -> None:
    # The largest mean, the smallest normal epsilon (on a constant feature: the largest inverse
    # std), a large epsilon and a std near float32's largest all stay finite in float32.
    f = MeanStdFilter(3)
    f.update(np.column_stack([_data()[:, 0], np.full(900, 4.0), _data()[:, 2]]))
    f.set_state({**f.get_state(), key: value})
    mean, inv_std = f.constants()
    assert np.isfinite(mean).all() and np.isfinite(inv_std).all() and (inv_std > 0).all()
    assert np.isfinite(f.apply(np.array([[3.0, 4.0, 0.0], [2.0, 4.5, 1.0]], np.float32))).all()


@pytest.mark.parametrize(("count", "key"), [(0, "m2"), (1, "m2"), (0, "mean")])
def test_statistics_of_fewer_than_two_observations_that_no_data_gives_are_refused(count: int,
                                                                                   key: str) -> None:
    # No observation gives an m2 but 0 (one observation deviates from nothing) and none gives a
    # mean but 0. Restored, such a state passed the check and its m2 (or mean) leaked into the
    # statistics of everything seen later: a count-0 state with m2 100 merged with 900 rows of
    # std (2, 0.1, 5) gave std (2.0, 0.35, 5.0) instead, without an error.
    g = MeanStdFilter(3)
    state = {**g.get_state(), "count": count, key: np.array([0.0, 100.0, 0.0])}
    with pytest.raises(ValueError, match=f"'{key}'.*'count'={count}"):
        g.set_state(state)
    assert g.count == 0 and not g.m2.any() and not g.mean.any()
    one = MeanStdFilter(3)
    one.update(_data()[:1])  # what one observation does give: count 1, its mean, m2 0
    assert one.count == 1 and not one.m2.any()
    for good in (MeanStdFilter(3), one):
        g.set_state(good.get_state())
        np.testing.assert_array_equal(g.mean, good.mean)


@pytest.mark.parametrize("key", sorted(_BAD_STATES))
def test_a_policy_refuses_a_bad_filter_state_before_changing_anything(key: str) -> None:
    from cairn.errors import CheckpointFormatError
    from cairn.policy.policy import Policy
    from cairn.policy.state_check import check_policy_state
    from tests.helpers import small_ppo

    algo = small_ppo(train_batch_size=64, minibatch_size=32, num_epochs=1).env_runners(
        observation_filter="MeanStdFilter").build()
    try:
        algo.train()
        policy = algo.get_policy()
        state = policy.get_state()
        bad_filter = {**state["observation_filter"], key: _BAD_STATES[key]}
        if key in ("m2", "mean"):
            bad_filter[key] = np.concatenate([_BAD_STATES[key], [0.0]])  # CartPole: 4 features
        bad = {**state, "observation_filter": bad_filter}
        weights, filter_state = policy.get_weights(), policy.observation_filter.get_state()
        with pytest.raises(ValueError, match=f"'{key}'"):
            policy.set_state(bad)
        assert all(np.array_equal(v, policy.get_weights()[k]) for k, v in weights.items())
        assert policy.observation_filter.get_state()["count"] == filter_state["count"]
        np.testing.assert_array_equal(policy.observation_filter.get_state()["m2"], filter_state["m2"])
        with pytest.raises(ValueError, match=f"'{key}'"):
            Policy.from_state(bad)
        # A checkpoint's reader refuses it as a CheckpointFormatError naming the key.
        with pytest.raises(CheckpointFormatError, match=f"ckpt: observation_filter: '{key}'"):
            check_policy_state(bad, "ckpt", base=Policy)
    finally:
        algo.stop()


@pytest.mark.parametrize("value", [np.nan, np.inf, -np.inf], ids=str)
def test_a_non_finite_observation_is_refused_before_it_reaches_the_statistics(value: float) -> None:
    from cairn.errors import ObservationSpaceError

    f = MeanStdFilter(3)
    f.update(_data())
    before = f.get_state()
    batch = _data()[:4].astype(np.float32)
    batch[2, 1] = value
    with pytest.raises(ObservationSpaceError, match=f"feature 1 .* of observation 2 of the batch is {value}"):
        f.update(batch)
    after = f.get_state()
    assert after["count"] == before["count"]
    np.testing.assert_array_equal(after["mean"], before["mean"])
    np.testing.assert_array_equal(after["m2"], before["m2"])
    # Acting on it (no update) still clips it, as exported models do.
    assert np.isnan(f.apply(batch.copy())[2, 1]) if np.isnan(value) else \
        abs(f.apply(batch.copy())[2, 1]) == f.clip


class _OneBadObservation(gym.Env):
    """A Box(-inf, inf) env whose 30th step (over its life) observes ``bad`` in feature 0."""

    def __init__(self, bad: float) -> None:
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, (3,), np.float32)
        self.action_space = gym.spaces.Discrete(2)
        self.bad, self.t, self.n = bad, 0, 0

    def reset(self, *, seed: int | None = None, options: object = None) -> tuple[np.ndarray, dict]:
        self.t = 0
        return np.ones(3, np.float32), {}

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict]:
        self.t, self.n = self.t + 1, self.n + 1
        obs = np.random.default_rng(self.n).normal(size=3).astype(np.float32)
        if self.n == 30:
            obs[0] = self.bad
        return obs, 1.0, False, self.t >= 20, {}


def _make_one_bad(env_config: dict) -> gym.Env:
    return _OneBadObservation(float(env_config["bad"]))


@pytest.mark.parametrize("bad", ["nan", "inf"])
def test_an_env_that_observes_nan_once_raises_then_training_goes_on_with_finite_statistics(bad: str) -> None:
    # Before, the NaN entered the statistics: every later observation of that feature was NaN,
    # and so the losses and weights, with no error.
    import cairn
    from cairn.errors import ObservationSpaceError

    algo = (cairn.PPOConfig().environment(_make_one_bad, env_config={"bad": bad})
            .env_runners(observation_filter="MeanStdFilter")
            .training(train_batch_size=64, minibatch_size=32, num_epochs=1).debugging(seed=0).build())
    try:
        with pytest.raises(ObservationSpaceError, match="NaN or infinity"):
            algo.train()
        result = algo.train()  # the env observes finite values again: training goes on
        f = algo.get_policy().observation_filter
        assert np.isfinite(f.mean).all() and np.isfinite(f.m2).all()
        assert np.isfinite(result["learners"]["default_policy"]["total_loss"])
        assert all(np.isfinite(w).all() for w in algo.get_policy().get_weights().values())
    finally:
        algo.stop()
