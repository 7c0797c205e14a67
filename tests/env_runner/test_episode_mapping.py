"""A policy mapping drawn per episode (RLlib's league / self-play pattern): the mapping
function is called once per (episode, agent), at the agent's first step in that episode, and
every row of that agent in that episode goes to the policy it returned; so each policy's rows
equal the env steps it acted. The envs and the mapping are in :mod:`tests.env_runner.episode_draws`."""

from __future__ import annotations

import dataclasses
from collections import Counter

import numpy as np
import pytest

from cairn.env_runner import EnvRunner
from tests.env_runner import episode_draws as draws

SMALL = {"train_batch_size": 64, "minibatch_size": 32, "num_epochs": 1}


def _config(env, num_envs: int = 2):
    return draws.config(env).training(**SMALL).env_runners(num_envs_per_env_runner=num_envs)


def _clear() -> None:
    for log in (draws.ACTED, draws.CALLS, draws.RESETS, draws.DRAWS):
        log.clear()


@pytest.fixture(autouse=True)
def _fresh_counts():
    _clear()
    yield
    _clear()


def _rows(batches) -> Counter[str]:
    return Counter({pid: len(batch) for pid, batch in batches.items()})


def assert_rows_went_to_the_policy_that_acted(batches, parity_column: int) -> None:
    """By content: each opponent's rows all come from episodes of its parity."""
    for pid, parity in (("opp_a", 0), ("opp_b", 1)):
        if pid in batches:
            assert set(np.unique(batches[pid]["obs"][:, parity_column])) == {parity}, pid


def assert_called_once_per_episode_and_agent() -> None:
    keys = [(serial, agent) for serial, agent, _ in draws.CALLS]
    assert len(keys) == len(set(keys)), Counter(keys).most_common(3)


def test_parallel_env_rows_go_to_the_policy_drawn_for_their_episode():
    algo = _config(draws.make_duel).build()
    try:
        runner = algo.env_runner_group.local
        draws.CALLS.clear()  # calls made while building (probing the env's agents)
        for _ in range(3):  # fragments cut episodes, and hold several of them
            draws.ACTED.clear()
            batches = runner.sample(17)
            assert _rows(batches) == draws.expected_rows()
            assert_rows_went_to_the_policy_that_acted(batches, parity_column=1)
        assert draws.expected_rows()["opp_a"] and draws.expected_rows()["opp_b"]
        assert_called_once_per_episode_and_agent()
    finally:
        algo.stop()


def test_turn_based_game_rows_go_to_the_policy_drawn_for_their_game():
    # One env: a game's first mover is mapped right after its reset (with several, reset_all
    # resets them all before the first movers are mapped, and the draw reads the last reset).
    algo = _config(draws.make_counted_game, num_envs=1).build()
    try:
        runner = algo.env_runner_group.local
        draws.CALLS.clear()
        batches = runner.sample(15)  # three whole five-move games: no move pending
        assert _rows(batches) == draws.expected_rows()
        assert set(batches) == set(draws.POLICIES)
        assert_rows_went_to_the_policy_that_acted(batches, parity_column=0)
        assert_called_once_per_episode_and_agent()
    finally:
        algo.stop()


@pytest.mark.parametrize("make_env", [draws.make_duel, draws.make_counted_game])
def test_an_episode_in_flight_keeps_its_saved_mapping_across_a_restore(make_env):
    algo = _config(make_env, num_envs=1).build()
    try:
        runner = algo.env_runner_group.local
        draws.CALLS.clear()
        runner.sample(3)  # mid-episode in both envs
        state = runner.get_state()
        in_flight = {serial for serial, _, _ in draws.CALLS if serial == max(s for s, _, _ in draws.CALLS)}
        calls_before = len(draws.CALLS)
        restored = EnvRunner(algo.config, algo.policies)
        restored.set_state(state)
        assert not restored.get_state()["needs_reset"]
        assert len(draws.CALLS) == calls_before  # restored from the state, not drawn again
        draws.ACTED.clear()
        batches = restored.sample(12)
        assert {serial for serial, _ in draws.ACTED} >= in_flight  # the episode went on
        assert not [c for c in draws.CALLS[calls_before:] if c[0] in in_flight]
        if make_env is draws.make_duel:  # turn-based: the moves before the save come with it
            assert _rows(batches) == draws.expected_rows()
        parity_column = 1 if make_env is draws.make_duel else 0
        assert_rows_went_to_the_policy_that_acted(batches, parity_column=parity_column)
        assert_called_once_per_episode_and_agent()
    finally:
        algo.stop()


def assert_each_opponent_has_the_rows_of_one_parity(batches) -> None:
    """Single-agent: the k-th episode's parity and the k-th draw's opponent go together, up to
    episodes started before the draws were counted: each opponent's rows have one parity, and
    not the same."""
    assert {"opp_a", "opp_b"} <= set(batches), set(batches)
    parities = {pid: set(np.unique(batches[pid]["obs"][:, 1])) for pid in ("opp_a", "opp_b")}
    assert all(len(p) == 1 for p in parities.values()) and parities["opp_a"] != parities["opp_b"], parities


@pytest.mark.parametrize("mode, num_envs", [("sync", 3), ("async", 1)])
def test_single_agent_env_rows_go_to_the_policy_drawn_for_their_episode(mode, num_envs):
    algo = draws.single_agent_config(mode, num_envs).build()
    try:
        runner = algo.env_runner_group.local
        _clear()  # draws made while building (probing the env)
        for _ in range(2):
            draws.ACTED.clear()
            batches = runner.sample(16)
            assert sum(map(len, batches.values())) == 16 * num_envs
            assert_each_opponent_has_the_rows_of_one_parity(batches)
            if mode == "sync":  # async: the env steps in its child process, which counts them
                assert _rows(batches) == draws.expected_single_agent_rows()
        # Restored mid-episode: each env's policy comes from the state, not from a new draw.
        state, draws_before = runner.get_state(), len(draws.DRAWS)
        restored = EnvRunner(algo.config, algo.policies)
        restored.set_state(state)
        assert not restored.get_state()["needs_reset"]
        assert restored.get_state()["episode_policy_ids"] == state["episode_policy_ids"]
        assert len(draws.DRAWS) == draws_before
        batches = restored.sample(16)
        assert_each_opponent_has_the_rows_of_one_parity(batches)
        restored.stop()
    finally:
        algo.stop()


def test_recurrent_state_belongs_to_the_episode_and_agent():
    """opp_a recurrent, opp_b feed-forward, drawn per episode in three env copies: each of
    opp_a's episodes starts from its initial state (nothing carried over from another episode
    of that env copy), and only opp_a's rows carry states."""
    config = draws.single_agent_config("sync", 3)
    lstm = {"use_lstm": True, "lstm_cell_size": 4, "max_seq_len": 4}
    config.policies["opp_a"] = dataclasses.replace(config.policies["opp_a"], config={"model": lstm})
    algo = config.build()
    try:
        runner = algo.env_runner_group.local
        _clear()
        batches = runner.sample(24)
        a, b = batches["opp_a"], batches["opp_b"]
        assert len(a) + len(b) == 24 * 3
        assert {"state_in_0", "state_in_1"} <= set(a) and not any(c.startswith("state_in") for c in b)
        assert _rows(batches) == draws.expected_single_agent_rows()
        first = a["obs"][:, 0] == 0  # the first step of an episode
        assert first.any() and (~first).any()
        assert not a["state_in_0"][first].any() and not a["state_in_1"][first].any()
        assert a["state_in_0"][~first].any(axis=1).all()
        algo.train()  # the learner takes the split batches (sequences cut at episode ends)
    finally:
        algo.stop()


def test_single_agent_state_without_the_episode_policies_maps_each_env_at_restore():
    """A runner state written before ``episode_policy_ids`` (the frozen fixtures': one policy
    for every episode) restores exactly; a saved policy the runner lacks starts fresh episodes."""
    algo = draws.single_agent_config("sync", 2).build()
    try:
        runner = algo.env_runner_group.local
        runner.sample(3)
        state = runner.get_state()
        old = {k: v for k, v in state.items() if k != "episode_policy_ids"}
        restored = EnvRunner(algo.config, algo.policies)
        _clear()
        restored.set_state(old)
        assert not restored.get_state()["needs_reset"]
        assert restored.get_state()["episode_policy_ids"] == draws.DRAWS == ["opp_a", "opp_b"]
        config = algo.config.copy().multi_agent(policies={"opp_a": algo.config.policies["opp_a"]},
                                                policy_mapping_fn=lambda aid, **kw: "opp_a")
        lacking = EnvRunner(config, {"opp_a": algo.get_policy("opp_a")})
        lacking.set_state({**state, "episode_policy_ids": ["opp_a", "opp_b"]})
        assert lacking.get_state()["needs_reset"]
        restored.stop()
        lacking.stop()
    finally:
        algo.stop()
