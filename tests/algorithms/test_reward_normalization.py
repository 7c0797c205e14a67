"""RewardNormalizer against a plain re-statement of VecNormalize's reward scaling."""

from __future__ import annotations

import numpy as np
import pytest

import cairn
from cairn.algorithms.reward_normalization import RewardNormalizer, RunningMeanStd


class _Reference:
    """VecNormalize's norm_reward written step by step over ``[T, E]`` arrays: per env a
    discounted return, a running (count, mean, var) with prior count 1e-4 updated each step
    with all envs' returns, rewards divided by sqrt(var + eps) and clipped, returns zeroed
    after a done."""

    def __init__(self, num_envs: int, gamma: float, clip: float) -> None:
        self.ret = np.zeros(num_envs)
        self.count, self.mean, self.var = 1e-4, 0.0, 1.0
        self.gamma, self.clip = gamma, clip

    def _update(self, x: np.ndarray) -> None:
        n, bm, bv = x.shape[0], x.mean(), x.var()
        delta, tot = bm - self.mean, self.count + x.shape[0]
        m2 = self.var * self.count + bv * n + np.square(delta) * self.count * n / tot
        self.mean, self.var, self.count = self.mean + delta * n / tot, m2 / tot, tot

    def step(self, r: np.ndarray, done: np.ndarray) -> np.ndarray:
        self.ret = self.ret * self.gamma + r
        self._update(self.ret)
        out = np.clip(r / np.sqrt(self.var + 1e-8), -self.clip, self.clip)
        self.ret[done] = 0.0
        return out


def _batches(seed: int, steps: int, envs: int, n: int):
    rng = np.random.default_rng(seed)
    for _ in range(n):
        yield (rng.normal(-3.0, 4.0, (steps, envs)).astype(np.float32), rng.random((steps, envs)) < 0.05)


def _env_major(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a.T).reshape(-1)


def test_matches_vecnormalize_step_by_step_across_batches() -> None:
    steps, envs = 37, 3
    ref, norm = _Reference(envs, 0.9, 10.0), RewardNormalizer(gamma=0.9, clip=10.0)
    streams = np.repeat(np.array([11, -5, 2**40]), steps)
    for rewards, dones in _batches(0, steps, envs, 4):
        expected = np.stack([ref.step(rewards[t], dones[t]) for t in range(steps)])
        got = norm.normalize(_env_major(rewards), _env_major(dones), streams)
        np.testing.assert_array_equal(got, _env_major(expected).astype(np.float32))
    assert (norm.stats.count, norm.stats.var) == (ref.count, ref.var)
    assert norm.returns == dict(zip([11, -5, 2**40], ref.ret.tolist()))


def test_running_return_continues_only_its_own_stream() -> None:
    norm = RewardNormalizer(gamma=0.5, clip=1e9)
    norm.normalize(np.array([1.0, 2.0], np.float32), np.array([False, False]), np.array([1, 2]))
    assert norm.returns == {1: 1.0, 2: 2.0}
    # Stream 2 first this time: its return carries over by ID, not by position.
    norm.normalize(np.array([4.0, 4.0], np.float32), np.array([False, True]), np.array([2, 1]))
    assert norm.returns == {2: 5.0, 1: 0.0}


def test_ragged_trajectories_update_once_per_batch() -> None:
    norm = RewardNormalizer(gamma=1.0, clip=1e9)
    rewards = np.array([1.0, 1.0, 1.0, 2.0], np.float32)  # stream 7: 3 rows, stream 8: 1 row
    out = norm.normalize(rewards, np.array([False, True, False, False]), np.array([7, 7, 7, 8]))
    running = np.array([1.0, 2.0, 1.0, 2.0])  # reset after the done
    expected = RunningMeanStd()
    expected.update(running)
    assert norm.stats.get_state() == expected.get_state()
    np.testing.assert_array_equal(out, (rewards / np.sqrt(expected.var + 1e-8)).astype(np.float32))
    assert norm.returns == {7: 1.0, 8: 2.0}


def test_rewards_are_clipped() -> None:
    norm = RewardNormalizer(gamma=0.99, clip=0.5)
    out = norm.normalize(np.array([100.0, -100.0], np.float32), np.zeros(2, bool), np.array([0, 1]))
    assert out.tolist() == [0.5, -0.5]


def test_state_round_trip_is_exact() -> None:
    norm = RewardNormalizer(gamma=0.9, clip=10.0)
    streams = np.repeat(np.array([3, 4]), 20)
    gen = _batches(1, 20, 2, 3)
    for rewards, dones in [next(gen), next(gen)]:
        norm.normalize(_env_major(rewards), _env_major(dones), streams)
    copy = RewardNormalizer(gamma=0.9, clip=10.0)
    copy.set_state(norm.get_state())
    assert copy.get_state().keys() == norm.get_state().keys()
    rewards, dones = next(gen)
    np.testing.assert_array_equal(copy.normalize(_env_major(rewards), _env_major(dones), streams),
                                  norm.normalize(_env_major(rewards), _env_major(dones), streams))
    assert copy.stats.get_state() == norm.stats.get_state()


def test_get_state_copies() -> None:
    norm = RewardNormalizer(gamma=0.9)
    norm.normalize(np.ones(2, np.float32), np.zeros(2, bool), np.array([0, 1]))
    state = norm.get_state()
    norm.normalize(np.ones(2, np.float32), np.zeros(2, bool), np.array([0, 1]))
    assert state["returns"].tolist() == [1.0, 1.0]


@pytest.mark.parametrize("value", [0, -1.0])
def test_reward_clip_must_be_positive(value: float) -> None:
    from cairn import PPOConfig
    from cairn.errors import ConfigError

    with pytest.raises(ConfigError, match="reward_clip"):
        PPOConfig().training(reward_clip=value)
    with pytest.raises(ConfigError, match="normalize_rewards"):
        PPOConfig().training(normalize_rewards="yes")


def test_a_batch_that_opens_an_episode_starts_its_running_return_at_zero() -> None:
    """A stream's first row may open a new episode though the last batch ended mid-episode
    (the envs were reset after an error, or restored afresh): ``firsts`` marks it, and the
    cut episode's return does not carry into the new one."""
    norm = RewardNormalizer(gamma=0.5, clip=1e9)
    streams = np.array([1, 1, 2, 2])
    norm.normalize(np.ones(4, np.float32), np.zeros(4, bool), streams)
    assert norm.returns == {1: 1.5, 2: 1.5}
    firsts = np.array([True, False, False, False])  # stream 1 was reset, stream 2 goes on
    norm.normalize(np.full(4, 2.0, np.float32), np.zeros(4, bool), streams, firsts)
    assert norm.returns == {1: 2.0 * 0.5 + 2.0, 2: (1.5 * 0.5 + 2.0) * 0.5 + 2.0}
    ragged = RewardNormalizer(gamma=0.5, clip=1e9)  # the once-per-batch path reads them too
    ragged.returns = {1: 1.5, 2: 1.5}
    ragged.normalize(np.full(3, 2.0, np.float32), np.zeros(3, bool), np.array([1, 1, 2]),
                     np.array([True, False, False]))
    assert ragged.returns == {1: 3.0, 2: 1.5 * 0.5 + 2.0}


def test_ppo_starts_the_running_return_afresh_after_a_sample_that_raised() -> None:
    """After an env error the runner resets its envs: the first batch after it holds a new
    episode (paying 2 a step where the cut one paid 1), whose running return starts at 0."""
    import cairn
    from tests.algorithms.constant_obs_envs import make_flaky_constant_env

    algo = (cairn.PPOConfig().environment(make_flaky_constant_env, env_config={"fail_at": 8})
            .training(train_batch_size=5, minibatch_size=5, num_epochs=1, gamma=0.5, normalize_rewards=True)
            .env_runners(rollout_fragment_length=5).debugging(seed=0).build())
    try:
        algo.train()
        norm = algo.reward_normalizers["default_policy"]
        assert list(norm.returns.values()) == [sum(0.5**k for k in range(5))]
        with pytest.raises(RuntimeError, match="flaky env"):
            algo.train()
        algo.train()
        assert list(norm.returns.values()) == [sum(2.0 * 0.5**k for k in range(5))]
    finally:
        algo.stop()


def test_a_stream_missing_from_a_batch_keeps_its_running_return() -> None:
    """A trajectory that has no row in one batch (a turn-based player whose move is still
    pending) goes on in a later one: its running return waits for it. Ended ones are not kept."""
    norm = RewardNormalizer(gamma=0.5, clip=1e9)
    norm.normalize(np.array([1.0, 4.0], np.float32), np.array([False, True]), np.array([1, 3]))
    norm.normalize(np.array([2.0], np.float32), np.array([False]), np.array([2]))
    assert norm.returns == {1: 1.0, 2: 2.0}  # stream 3 ended: nothing to carry
    norm.normalize(np.array([4.0, 1.0], np.float32), np.array([False, False]), np.array([1, 1]))
    assert norm.returns == {1: (1.0 * 0.5 + 4.0) * 0.5 + 1.0, 2: 2.0}


def test_turn_based_self_play_carries_each_players_return_across_batches() -> None:
    """One move per fragment: each batch holds one player's completed move only (ScriptedGame:
    player_0's moves pay 1 + 2, then 3 + 4; player_1's first pays 20 + 30)."""
    import cairn
    from tests.env_runner.test_turn_based import make_scripted, shared_policy

    algo = (cairn.PPOConfig().environment(make_scripted)
            .training(train_batch_size=1, minibatch_size=1, num_epochs=1, gamma=0.5, normalize_rewards=True)
            .multi_agent(policies={"shared"}, policy_mapping_fn=shared_policy).debugging(seed=0).build())
    try:
        for _ in range(4):  # moves 1..4: player_0's first and second moves complete, player_1's first
            algo.train()
        assert sorted(algo.reward_normalizers["shared"].returns.values()) == [3.0 * 0.5 + 7.0, 50.0]
    finally:
        algo.stop()


@pytest.mark.parametrize("ragged", [False, True])
def test_an_episode_that_starts_without_a_done_starts_its_return_at_zero(ragged: bool) -> None:
    """An env reset without a step that ends its episode (after an error, a runner's restart, a
    restore into another layout) starts a new episode: the batch's ``firsts`` row starts the
    running return over, as VecNormalize's ``reset()`` zeroes it, instead of adding the new
    episode's rewards to the old episode's return."""
    rng = np.random.default_rng(3)
    r1, r2 = rng.normal(size=8).astype(np.float32), rng.normal(size=8).astype(np.float32)
    streams = np.repeat([7, 9], 4)
    if ragged:  # unequal pieces: the once-per-batch path
        streams = np.array([7, 7, 7, 9, 9, 9, 9, 9])
    no_dones = np.zeros(8, dtype=bool)
    ends = np.zeros(8, dtype=bool)
    ends[[np.flatnonzero(streams == 7)[-1], 7]] = True  # both episodes end with the batch
    firsts = np.zeros(8, dtype=bool)
    firsts[[0, np.flatnonzero(streams == 9)[0]]] = True  # both envs were reset: new episodes

    cut = RewardNormalizer(gamma=0.99)  # the episodes of batch 1 were cut without a done
    cut.normalize(r1, no_dones, streams)
    out_cut = cut.normalize(r2, no_dones, streams, firsts)
    ended = RewardNormalizer(gamma=0.99)  # ...the same as episodes that ended
    ended.normalize(r1, ends, streams)
    out_ended = ended.normalize(r2, no_dones, streams, firsts)
    np.testing.assert_array_equal(out_cut, out_ended)
    assert cut.get_state()["var"] == ended.get_state()["var"]
    assert cut.returns == ended.returns


class RecordSamples(cairn.Callbacks):
    """Keeps the batches the local runner sampled (module-level: a checkpoint names it)."""

    samples: list = []

    def on_sample_end(self, *, samples, env_runner) -> None:
        RecordSamples.samples.append(samples)


def test_ppo_starts_the_return_over_where_a_restore_starts_new_episodes(tmp_path) -> None:
    """PPO gives its normaliser the batch's ``firsts``: after a restore with another number of
    envs (whose episodes start afresh, no done in between) env 0's return starts at 0."""
    import copy

    from tests.helpers import small_ppo

    algo = small_ppo(normalize_rewards=True).callbacks(RecordSamples).build()
    try:
        algo.train()
        path = algo.save(tmp_path / "c")
    finally:
        algo.stop()
    restored = cairn.Algorithm.from_checkpoint(path, config_overrides={"num_envs_per_env_runner": 2})
    try:
        norm = copy.deepcopy(restored.reward_normalizers["default_policy"])
        assert norm.returns[next(iter(norm.returns))] != 0.0  # env 0's episode was in flight
        RecordSamples.samples.clear()
        restored.train()
        batch = RecordSamples.samples[0]["default_policy"]
        assert batch["firsts"][0]  # the restored envs started new episodes
        norm.normalize(batch["rewards"], batch["terminateds"] | batch["truncateds"], batch["streams"],
                       batch["firsts"])
        assert restored.reward_normalizers["default_policy"].get_state()["var"] == norm.get_state()["var"]
    finally:
        restored.stop()


def _trained_normalizer() -> RewardNormalizer:
    norm = RewardNormalizer(gamma=0.9, clip=10.0)
    gen = _batches(2, 20, 2, 2)
    for rewards, dones in gen:
        norm.normalize(_env_major(rewards), _env_major(dones), np.repeat(np.array([3, 4]), 20))
    return norm


@pytest.mark.parametrize(("key", "value"), [
    ("var", -1.0), ("var", float("nan")), ("mean", float("inf")), ("count", 0.0), ("count", -3.0),
    ("count", "7"), ("epsilon", 0.0), ("epsilon", -1e-8),
    ("returns", np.array([np.nan, 1.0])), ("returns", np.array([1.0])),
], ids=lambda v: str(v) if isinstance(v, str) else "")
def test_a_state_that_would_scale_rewards_to_nonsense_is_refused_and_changes_nothing(key, value) -> None:
    # Before, each was restored silently: a NaN or negative var (sqrt of var + eps) or a NaN
    # running return scaled every later reward to NaN; returns shorter than stream_ids dropped
    # running returns (zip stops at the shorter).
    norm = _trained_normalizer()
    before = norm.get_state()
    bad = {**before, key: value}
    if key == "returns" and len(value) == 1:
        bad["stream_ids"] = before["stream_ids"]  # 2 ids, 1 return
    with pytest.raises(ValueError, match=f"Reward normaliser state: .*'{key}'"):
        norm.set_state(bad)
    after = norm.get_state()
    assert {k: v for k, v in after.items() if not isinstance(v, np.ndarray)} == \
        {k: v for k, v in before.items() if not isinstance(v, np.ndarray)}
    np.testing.assert_array_equal(after["returns"], before["returns"])


def test_ppo_refuses_a_bad_reward_normaliser_state_and_keeps_its_own(tmp_path) -> None:
    algo = (cairn.PPOConfig().environment("CartPole-v1")
            .training(train_batch_size=64, minibatch_size=32, num_epochs=1, normalize_rewards=True)
            .debugging(seed=0).build())
    try:
        algo.train()
        state = algo.get_state()
        live = algo.reward_normalizers["default_policy"].get_state()
        bad_norm = {**state["extra"]["reward_normalizers"]["default_policy"], "var": -4.0}
        bad = {**state, "extra": {**state["extra"], "reward_normalizers": {"default_policy": bad_norm}}}
        with pytest.raises(ValueError, match="'var'=-4.0 must be >= 0"):
            algo.set_state(bad)
        assert algo.reward_normalizers["default_policy"].get_state()["var"] == live["var"]
        algo.train()  # still works
    finally:
        algo.stop()


@pytest.mark.parametrize("value", [np.nan, np.inf, -np.inf], ids=str)
def test_a_non_finite_reward_is_refused_before_it_reaches_the_statistics(value: float) -> None:
    from cairn.errors import EnvError

    norm = _trained_normalizer()
    before = norm.get_state()
    rewards = np.ones(40, np.float32)
    rewards[23] = value
    with pytest.raises(EnvError, match=f"reward of {value} \\(row 23"):
        norm.normalize(rewards, np.zeros(40, bool), np.repeat(np.array([3, 4]), 20))
    after = norm.get_state()
    assert after["var"] == before["var"] and after["count"] == before["count"]
    np.testing.assert_array_equal(after["returns"], before["returns"])


def _one_nan_reward(env_config: dict) -> object:
    import gymnasium as gym

    class OneNanReward(gym.Wrapper):
        """CartPole whose 30th step (over its life) pays NaN."""

        n = 0

        def step(self, action: int) -> tuple:
            obs, reward, terminated, truncated, info = self.env.step(action)
            self.n += 1
            return obs, float("nan") if self.n == 30 else reward, terminated, truncated, info

    return OneNanReward(gym.make("CartPole-v1"))


def test_ppo_refuses_a_nan_reward_before_it_reaches_the_normaliser_or_the_weights() -> None:
    # Before, the NaN made the normaliser's variance NaN for good: every later learner reward,
    # advantage, loss and weight was NaN, with no error.
    from cairn.errors import EnvError

    algo = (cairn.PPOConfig().environment(_one_nan_reward)
            .training(train_batch_size=64, minibatch_size=32, num_epochs=1, normalize_rewards=True)
            .debugging(seed=0).build())
    try:
        with pytest.raises(EnvError, match="reward of nan"):
            algo.train()
        result = algo.train()  # the env pays finite rewards again: training goes on
        assert np.isfinite(algo.reward_normalizers["default_policy"].stats.var)
        assert np.isfinite(result["learners"]["default_policy"]["total_loss"])
        assert all(np.isfinite(w).all() for w in algo.get_policy().get_weights().values())
    finally:
        algo.stop()
