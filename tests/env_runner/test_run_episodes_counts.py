"""``EnvRunner.run_episodes(n)`` on a runner with several env copies: which episodes count is
decided before their lengths are known, so short episodes are not favoured.

The rule (docs/architecture.md, "Evaluation episodes"): env copy ``i`` of ``k`` plays the first
``n // k + (1 if i < n % k else 0)`` episodes it starts, and only the copies that still owe
episodes are stepped. Before, the runner stepped every copy and kept the first ``n`` episodes to
*end*: a copy in a short episode ended it and started another while a long one was still in
flight, so short episodes were over-represented (below: a mean length of 2.2 where the true
mean is 5). The envs here draw each episode's length from {1, 9} with
probability one half each (a true mean of 5), from the reset seed the runner sends, and keep the
lengths of the episodes they finished, so the tests can say exactly which episodes were played.
"""

from __future__ import annotations

import re
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from pettingzoo import AECEnv
from pettingzoo.utils import OrderEnforcingWrapper

import cairn
from cairn.env_runner import EnvRunner
from tests.env_runner.two_agent_parallel import TwoAgentParallel, two_policy_ppo

SHORT, LONG = 1, 9
TRUE_MEAN = (SHORT + LONG) / 2


def _draw_length(seed: int | None) -> int:
    return SHORT if np.random.default_rng(seed).random() < 0.5 else LONG


class CoinLength(gym.Env):  # type: ignore[type-arg]
    """One agent; each episode lasts 1 or 9 steps (drawn from the reset seed), reward 1 a step.
    ``finished``: the lengths of the episodes it ended, in order."""

    observation_space = gym.spaces.Box(0.0, 100.0, (1,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, env_config: dict[str, Any] | None = None) -> None:
        self.finished: list[int] = []
        self.fail_at_step: int | None = None  # raise at this step of the env's life (a test sets it)
        self.steps = 0
        self.length, self.t = 0, 0

    def reset(self, *, seed: int | None = None, options: Any = None) -> tuple[np.ndarray, dict[str, Any]]:
        self.length, self.t = _draw_length(seed), 0
        return np.array([0.0], np.float32), {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        self.steps += 1
        if self.fail_at_step is not None and self.steps == self.fail_at_step:
            raise RuntimeError("injected env failure")
        self.t += 1
        done = self.t >= self.length
        if done:
            self.finished.append(self.length)
        return np.array([self.t], np.float32), 1.0, done, False, {}


def make_coin_length(env_config: dict[str, Any]) -> CoinLength:
    return CoinLength(env_config)


class CoinLengthParallel(TwoAgentParallel):
    """Two agents (parallel API); each episode lasts 1 or 9 steps, drawn from the reset seed."""

    metadata = {"name": "coin_length_parallel_v0", "render_modes": []}

    def __init__(self) -> None:
        super().__init__()
        self.finished: list[int] = []
        self.length = 0

    def reset(self, seed: int | None = None, options: Any = None) -> tuple[dict[str, Any], dict[str, Any]]:
        self.length = _draw_length(seed)
        return super().reset(seed, options)

    def step(self, actions: dict[str, Any]) -> tuple[dict[str, Any], ...]:
        self.t += 1
        end = self.t >= self.length
        obs = {a: self._obs(a) for a in self.agents}
        rewards = {a: 1.0 if a == "agent_0" else 0.0 for a in self.agents}  # the return is the length
        terminated = {a: end for a in self.agents}
        truncated = {a: False for a in self.agents}
        if end:
            self.agents = []
            self.finished.append(self.length)
        return obs, rewards, terminated, truncated, {a: {} for a in obs}


def make_coin_length_parallel(env_config: dict[str, Any]) -> CoinLengthParallel:
    return CoinLengthParallel()


class CoinLengthGame(AECEnv):  # type: ignore[misc]
    """Two players alternate; a game lasts 1 or 9 moves, drawn from the reset seed."""

    metadata = {"name": "coin_length_game_v0", "render_modes": []}

    def __init__(self) -> None:
        super().__init__()
        self.possible_agents = ["player_0", "player_1"]
        self.render_mode = None
        self.finished: list[int] = []
        self.length, self._moves = 0, 0

    def observation_space(self, agent: str) -> gym.Space[Any]:
        return gym.spaces.Box(0.0, 100.0, (2,), np.float32)

    def action_space(self, agent: str) -> gym.Space[Any]:
        return gym.spaces.Discrete(2)

    def observe(self, agent: str) -> np.ndarray:
        return np.array([self._moves, self.possible_agents.index(agent)], np.float32)

    def reset(self, seed: int | None = None, options: Any = None) -> None:
        self.length, self._moves = _draw_length(seed), 0
        self.agents = list(self.possible_agents)
        self.agent_selection = "player_0"
        self.rewards = dict.fromkeys(self.agents, 0.0)
        self._cumulative_rewards = dict.fromkeys(self.agents, 0.0)
        self.terminations = dict.fromkeys(self.agents, False)
        self.truncations = dict.fromkeys(self.agents, False)
        self.infos: dict[str, dict[str, Any]] = {a: {} for a in self.agents}

    def step(self, action: Any) -> None:
        if self.terminations[self.agent_selection]:
            self._was_dead_step(action)
            return
        self._cumulative_rewards[self.agent_selection] = 0.0
        self._moves += 1
        self.rewards = {"player_0": 1.0, "player_1": 0.0}  # the game's return is its length
        if self._moves == self.length:
            self.terminations = dict.fromkeys(self.agents, True)
            self.finished.append(self.length)
        self.agent_selection = self.possible_agents[self._moves % 2]
        self._accumulate_rewards()


def make_coin_length_game(env_config: dict[str, Any]) -> AECEnv:
    return OrderEnforcingWrapper(CoinLengthGame())


def _config(kind: str, num_envs: int) -> cairn.AlgorithmConfig:
    if kind in ("single_agent", "async"):
        config: cairn.AlgorithmConfig = cairn.PPOConfig().environment(make_coin_length).debugging(seed=0)
        if kind == "async":  # each copy in a child process: the runner steps some of them only
            config = config.env_runners(gym_env_vectorize_mode="async")
    elif kind == "recurrent":  # the copies that wait keep their LSTM states
        config = (cairn.PPOConfig().environment(make_coin_length).debugging(seed=0)
                  .training(model={"use_lstm": True, "lstm_cell_size": 8, "max_seq_len": 4}))
    elif kind == "parallel":
        config = two_policy_ppo(make_coin_length_parallel)
    else:
        config = (cairn.PPOConfig().environment(make_coin_length_game)
                  .multi_agent(policies={"a", "b"}, policy_mapping_fn={"player_0": "a", "player_1": "b"})
                  .debugging(seed=0))
    return config.env_runners(num_envs_per_env_runner=num_envs)


def _runner(kind: str, num_envs: int) -> tuple[cairn.Algorithm, EnvRunner]:
    algo = _config(kind, num_envs).build()
    return algo, EnvRunner(algo.config, algo.policies, seed_offset=7)


def _finished(runner: EnvRunner) -> list[list[int]]:
    return [list(env.unwrapped.finished) for env in runner.envs]


def _quotas(n: int, k: int) -> list[int]:
    return [n // k + (1 if i < n % k else 0) for i in range(k)]


KINDS = ["single_agent", "recurrent", "parallel", "turn_based"]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(("num_envs", "counts"), [(3, (8, 2, 3, 1, 6)), (4, (4, 7))])
def test_each_env_copy_plays_its_share_and_nothing_else(kind: str, num_envs: int, counts: tuple[int, ...]):
    """Exactly which episodes count: env copy i plays its first quota_i episodes and no more, and
    the episodes returned are those (their lengths, as the envs recorded them)."""
    algo, runner = _runner(kind, num_envs)
    try:
        for n in counts:
            before = [len(f) for f in _finished(runner)]
            episodes = runner.run_episodes(n)
            played = [f[b:] for f, b in zip(_finished(runner), before)]
            assert [len(p) for p in played] == _quotas(n, num_envs), (n, played)
            assert sorted(e["length"] for e in episodes) == sorted(x for p in played for x in p)
            assert sorted(e["return"] for e in episodes) == sorted(float(x) for p in played for x in p)
    finally:
        runner.stop()
        algo.stop()


@pytest.mark.parametrize("kind", KINDS)
def test_the_mean_length_is_the_true_one_with_many_env_copies(kind: str):
    """Eight copies, eight episodes a call: the first eight to end were mostly short ones (a mean
    near 2 where the true mean is 5). 40 calls, 320 episodes: the mean's standard deviation is
    4 / sqrt(320) = 0.22; the tolerance is 1 (the lengths come from seeded numpy draws only)."""
    algo, runner = _runner(kind, 8)
    try:
        lengths = [e["length"] for _ in range(40) for e in runner.run_episodes(8)]
        assert len(lengths) == 320
        assert abs(np.mean(lengths) - TRUE_MEAN) < 1.0, np.mean(lengths)
    finally:
        runner.stop()
        algo.stop()


@pytest.mark.parametrize("kind", KINDS)
def test_equal_seeds_give_equal_episodes_with_several_env_copies(kind: str):
    results = []
    for _ in range(2):
        algo, runner = _runner(kind, 3)
        try:
            results.append([runner.run_episodes(n) for n in (5, 2, 7)])
        finally:
            runner.stop()
            algo.stop()
    assert results[0] == results[1]


def test_async_envs_play_the_episodes_of_sync_ones():
    """In "async" mode the runner steps only the child processes that owe episodes; the episodes
    are those of "sync" mode (the same seeds, in the same order)."""
    results = []
    for kind in ("single_agent", "async"):
        algo, runner = _runner(kind, 3)
        try:
            results.append([runner.run_episodes(n) for n in (5, 1, 7)])
        finally:
            runner.stop()
            algo.stop()
    assert results[0] == results[1]
    assert [len(episodes) for episodes in results[0]] == [5, 1, 7]


class EndsByEnvCopy(cairn.Callbacks):
    """Keeps the env copy of each episode that ends (on the instance the runner holds)."""

    def __init__(self) -> None:
        self.ends: list[int] = []

    def on_episode_end(self, *, episode: Any, env_runner: Any) -> None:
        self.ends.append(episode.env_index)


def test_games_against_a_scripted_opponent_count_by_share():
    """Connect four against a league's fixed opponent (a scripted player, which moves on the
    runner's generator): three copies, seven games; the copies play 3, 2 and 2 games, the
    opponent sits in them, and equal seeds give equal games."""
    from collections import Counter

    from tests.league.games import small_league

    results = []
    for _ in range(2):
        algo = small_league(opponents={"random_legal": "random_legal"}, self_play_fraction=0.0) \
            .callbacks(EndsByEnvCopy).build()
        runner = EnvRunner(algo.config, algo.policies, num_envs=3)
        try:
            episodes = runner.run_episodes(7)
            assert isinstance(runner.callbacks, EndsByEnvCopy)
            assert Counter(runner.callbacks.ends) == {0: 3, 1: 2, 2: 2}
            assert all(set(e["policy_returns"]) == {"main", "random_legal"} for e in episodes)
            results.append(episodes)
        finally:
            runner.stop()
            algo.stop()
    assert results[0] == results[1]


def test_an_env_error_mid_run_leaves_the_runner_playing_whole_shares():
    """An env copy raises in the middle of run_episodes: the error propagates, nothing of that
    run is reported, and the next call plays each copy's share from fresh episodes."""
    algo, runner = _runner("single_agent", 3)
    try:
        runner.envs[1].unwrapped.fail_at_step = 4
        with pytest.raises(RuntimeError, match="injected env failure"):
            runner.run_episodes(9)
        assert runner.get_metrics() == []
        before = [len(f) for f in _finished(runner)]
        episodes = runner.run_episodes(7)
        played = [f[b:] for f, b in zip(_finished(runner), before)]
        assert [len(p) for p in played] == [3, 2, 2]
        assert sorted(e["length"] for e in episodes) == sorted(x for p in played for x in p)
        assert runner.sample(4)  # and training sampling goes on (every copy stepped again)
    finally:
        runner.stop()
        algo.stop()


@pytest.mark.parametrize("kind", KINDS)
def test_the_episodes_a_direct_sample_finished_stay_waiting_through_run_episodes(kind: str):
    """A direct ``sample()`` finishes episodes, which wait on the runner until ``train()`` or
    ``get_state()`` counts them (``get_metrics()``). ``run_episodes`` on that runner, returning
    or raising, leaves them waiting: it used to drop them, and the counters, the episode window
    and a league's payoff missed those games. A twin runner that samples alike and never
    evaluates says which episodes wait."""
    algo, twin = _runner(kind, 3)
    runners = [twin, EnvRunner(algo.config, algo.policies, seed_offset=7),
               EnvRunner(algo.config, algo.policies, seed_offset=7)]
    try:
        for runner in runners:
            runner.sample(20)  # episodes of 1 or 9 steps: 3 copies x 20 steps finish some
        expected = twin.get_metrics()
        assert expected
        evaluated = runners[1].run_episodes(4)
        assert len(evaluated) == 4
        assert runners[1].get_metrics() == expected
        broken, calls = runners[2].envs[1].unwrapped, []

        def fails_at_the_third_step(*args: Any) -> Any:
            calls.append(args)
            if len(calls) == 3:
                raise RuntimeError("injected env failure")
            return type(broken).step(broken, *args)

        broken.step = fails_at_the_third_step
        with pytest.raises(RuntimeError, match="injected env failure"):
            runners[2].run_episodes(9)
        assert runners[2].get_metrics() == expected
        assert len(runners[2].run_episodes(3)) == 3 and runners[2].get_metrics() == []
    finally:
        for runner in runners:
            runner.stop()
        algo.stop()


@pytest.mark.parametrize("bad", [-1, 2.0, True, "3"])
def test_a_count_that_is_not_an_int_of_at_least_0_is_refused_by_name(bad: Any):
    from cairn.errors import ConfigError

    algo, runner = _runner("single_agent", 2)
    try:
        named = re.escape(f"run_episodes(num_episodes={bad!r}): pass an int")
        with pytest.raises(ConfigError, match=named):
            runner.run_episodes(bad)
        assert runner.run_episodes(0) == []
        assert len(runner.run_episodes(3)) == 3
    finally:
        runner.stop()
        algo.stop()
