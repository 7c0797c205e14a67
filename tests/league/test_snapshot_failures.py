"""A snapshot's add or removal that raises leaves the league and the algorithm agreeing: the pool
is exactly the algorithm's policies other than main, and the next train() goes on."""

import pytest

from tests.fault_injection import InjectedError
from tests.league.games import small_league


def _raise_once(algo, name: str, *, after: bool) -> list[str]:
    """Make ``algo.<name>`` raise InjectedError once, before (or after) the real call; the IDs it
    was called with are returned (filled in as it is called)."""
    real, calls = getattr(algo, name), []

    def failing(policy_id, *args, **kwargs):
        calls.append(policy_id)
        if len(calls) > 1:
            return real(policy_id, *args, **kwargs)
        if after:
            real(policy_id, *args, **kwargs)
        raise InjectedError(f"{name}({policy_id!r}) failed")

    setattr(algo, name, failing)
    return calls


def _assert_consistent(algo) -> None:
    league = algo.league
    assert sorted(league.pool) == sorted(pid for pid in algo.policies if pid != "main")
    assert set(league.ratings.table) == {"main", *league.pool}
    assert set(league.payoff.table) <= set(league.pool)
    assert all(plan["opponent"] in (None, *league.pool) for plan in league.plans.values())


@pytest.mark.parametrize("after", [False, True], ids=["before_the_algorithm_removed_it", "after"])
def test_a_removal_that_raises_leaves_the_pool_equal_to_the_policies(after):
    algo = small_league(max_snapshots=2, matchmaking="uniform").build()
    try:
        for _ in range(2):
            algo.train()
        assert algo.league.pool == ["main_v1", "main_v2"]
        calls = _raise_once(algo, "remove_policy", after=after)
        with pytest.raises(InjectedError):
            algo.train()  # snapshot main_v3, then main_v1's removal raises
        assert calls == ["main_v1"]
        _assert_consistent(algo)
        # Kept by the algorithm, kept by the league with its rating and payoff; else forgotten.
        assert algo.league.pool == (["main_v2", "main_v3"] if after else ["main_v1", "main_v2", "main_v3"])
        result = algo.train()  # main_v4; the pool shrinks back to max_snapshots
        _assert_consistent(algo)
        assert result["league"]["pool"] == ["main_v3", "main_v4"]
    finally:
        algo.stop()


@pytest.mark.parametrize("after", [False, True], ids=["before_the_algorithm_added_it", "after"])
def test_an_add_that_raises_leaves_the_pool_equal_to_the_policies(after):
    algo = small_league(max_snapshots=2, matchmaking="uniform").build()
    try:
        algo.train()
        calls = _raise_once(algo, "add_policy", after=after)
        with pytest.raises(InjectedError):
            algo.train()
        assert calls == ["main_v2"]
        _assert_consistent(algo)
        # The iteration learned before its snapshot: it counts, and its result is kept.
        assert algo.iteration == 2 and algo.last_result["training_iteration"] == 2
        assert algo.last_result["time_this_iter_s"] > 0 and algo.last_result["env_steps_per_s"] > 0
        assert algo.league.pool == (["main_v1", "main_v2"] if after else ["main_v1"])
        assert algo.league.snapshots_taken == (2 if after else 1)  # no name is taken twice
        result = algo.train()
        _assert_consistent(algo)
        assert result["league"]["pool"] == (["main_v2", "main_v3"] if after else ["main_v1", "main_v2"])
    finally:
        algo.stop()


def test_a_snapshot_the_env_runner_refuses_is_in_neither_the_pool_nor_the_algorithm(monkeypatch):
    """The env runner's update raises while a snapshot is added: the algorithm, its runner and
    the league all keep the old policy set (on main the algorithm and the pool kept main_v2,
    which the runner never got), and the next train() snapshots main_v2 for real."""
    algo = small_league(max_snapshots=2, matchmaking="uniform").build()
    try:
        algo.train()
        runner = algo.env_runner_group.local
        real, calls = runner.update_policies, []

        def refuse_once(config, policies):
            calls.append(sorted(policies))
            if len(calls) == 1:
                raise InjectedError("the env runner refused the snapshot")
            real(config, policies)

        monkeypatch.setattr(runner, "update_policies", refuse_once)
        with pytest.raises(InjectedError):
            algo.train()
        assert calls[0] == ["main", "main_v1", "main_v2"]
        _assert_consistent(algo)
        assert algo.league.pool == ["main_v1"] and algo.league.snapshots_taken == 1
        assert set(runner.policies) == set(algo.policies) == set(algo.config.policies) == {"main", "main_v1"}
        result = algo.train()
        _assert_consistent(algo)
        assert result["league"]["pool"] == ["main_v1", "main_v2"]
        assert set(runner.policies) == set(algo.policies)
    finally:
        algo.stop()
