"""A league is algorithm state: a checkpoint restored in a fresh process continues with the same
pool, ratings, payoff and opponent draws (num_env_runners=0); a subset restore of main drops
the pool cleanly."""

import json
import os
import subprocess
import sys

import pytest

import cairn
from tests.conftest import ROOT
from tests.helpers import assert_trains_identically, assert_trees_equal, weights_digest
from tests.league.games import small_league

_CONTINUE = """
import json, sys
sys.path.insert(0, {root!r})
import cairn
from tests.helpers import weights_digest
algo = cairn.Algorithm.from_checkpoint({path!r})
for _ in range(2):
    algo.train()
print(json.dumps([weights_digest(algo), sorted(algo.policies), algo.league.get_state()], sort_keys=True))
"""


@pytest.mark.slow
def test_league_resumes_bit_for_bit_in_a_new_process(tmp_path):
    algo = small_league(max_snapshots=2, matchmaking="pfsp").build()
    for _ in range(3):  # three snapshots taken, the first removed: the pool is v2, v3
        algo.train()
    path = algo.save(tmp_path / "c")
    for _ in range(2):
        algo.train()
    league = algo.league.get_state()
    assert league["pool"] == ["main_v4", "main_v5"] and league["payoff"]["table"]
    expected = json.dumps([weights_digest(algo), sorted(algo.policies), league], sort_keys=True)
    algo.stop()
    out = subprocess.run([sys.executable, "-c", _CONTINUE.format(root=str(ROOT), path=str(path))],
                         capture_output=True, text=True, check=True, cwd=ROOT).stdout.strip()
    assert out.splitlines()[-1] == expected


def test_subset_restore_of_main_drops_the_pool(tmp_path):
    algo = small_league().build()
    for _ in range(2):
        algo.train()
    assert algo.league.pool == ["main_v1", "main_v2"]
    path = algo.save(tmp_path / "c")
    algo.stop()
    only_main = cairn.Algorithm.from_checkpoint(path, policy_ids=["main"])
    try:
        assert sorted(only_main.policies) == ["main"] and only_main.league.pool == []
        assert set(only_main.league.ratings.table) == {"main"} and only_main.league.payoff.table == {}
        assert all(plan["opponent"] is None for plan in only_main.league.plans.values())
        result = only_main.train()  # plays self-play only, then snapshots on: no name taken twice
        assert result["league"]["pool"] == ["main_v3"]
        assert sorted(only_main.policies) == ["main", "main_v3"]
    finally:
        only_main.stop()


def test_a_user_mapping_at_restore_is_refused(tmp_path):
    algo = small_league().build()
    path = algo.save(tmp_path / "c")
    algo.stop()
    with pytest.raises(cairn.errors.ConfigError, match="policy_mapping_fn"):
        cairn.Algorithm.from_checkpoint(path, policy_mapping_fn=lambda agent_id, **kw: "main")


def test_an_incremental_save_links_the_frozen_snapshots_weights(tmp_path):
    algo = small_league(snapshot_every_iterations=2).build()
    try:
        for _ in range(2):
            algo.train()
        first = algo.save(tmp_path / "c1")
        algo.train()  # main learns, the snapshot main_v1 only plays
        second = algo.save(tmp_path / "c2", previous=first)
    finally:
        algo.stop()
    name = "policy_state.safetensors"
    for pid, linked in (("main_v1", True), ("main", False)):
        a, b = (tmp_path / c / "policies" / pid / name for c in ("c1", "c2"))
        assert os.path.samefile(a, b) is linked, pid
    assert str(second).endswith("c2")


def test_a_snapshot_that_cannot_be_added_leaves_the_league_as_it_was():
    from cairn.policy.spec import PolicySpec
    from tests.league.games import make_connect_four

    probe = make_connect_four({})
    spec = PolicySpec(observation_space=probe.observation_space("player_0"),
                      action_space=probe.action_space("player_0"))
    config = small_league().multi_agent(policies={"main": spec, "MAIN_V1": spec})  # the name, ignoring case
    algo = config.build()
    try:
        before = algo.league.get_state()
        with pytest.raises(cairn.errors.ConfigError, match="main_v1"):
            algo.train()
        after = algo.league.get_state()
        assert after["pool"] == [] and after["snapshots_taken"] == 0
        assert sorted(algo.policies) == ["MAIN_V1", "main"]
        assert after["games"] >= before["games"]
    finally:
        algo.stop()


def test_an_in_place_restore_of_an_earlier_checkpoint_drops_the_snapshots_taken_after_it(tmp_path):
    """algo.restore() of a checkpoint saved before the newest snapshots: those snapshots are not
    in the restored pool, and leave the algorithm with it (snapshot IDs are the league's alone),
    so that the next snapshots are taken under their numbers again instead of failing on a
    policy of that name."""
    algo = small_league().build()  # a snapshot each iteration, two kept
    try:
        for iteration in range(1, 6):
            algo.train()
            if iteration == 3:
                checkpoint = algo.save(str(tmp_path / "at3"))
        assert sorted(algo.policies) == ["main", "main_v4", "main_v5"]
        algo.restore(checkpoint)
        assert algo.league.pool == ["main_v2", "main_v3"]
        assert sorted(algo.policies) == ["main", "main_v2", "main_v3"]
        algo.train()
        algo.train()
        assert algo.league.pool == ["main_v4", "main_v5"]
        assert sorted(algo.policies) == ["main", "main_v4", "main_v5"]
    finally:
        algo.stop()


def _sample_directly(algo):
    """A fragment sampled by the local runner outside train() that finishes games (connect four
    games end within 42 moves: 64 steps in each of 2 env copies finish some)."""
    runner = algo.env_runner_group.local
    games = runner.num_episodes
    runner.sample(64)
    assert runner.num_episodes > games


def test_the_games_a_direct_sample_finished_are_in_the_checkpoint(tmp_path, monkeypatch):
    """Games finished by a direct ``runner.sample()`` wait on the runner until they are counted
    (league games, payoff, ratings, episode counters and window). A checkpoint saved meanwhile
    has them: the restored run goes on as the saving run does, and as a twin that never saved,
    down to the payoff each next game's opponent is drawn from (pfsp between two snapshots)."""
    from cairn.league.matchmaking import LeagueMapping

    draws: list[tuple[dict[str, float], dict[str, object]]] = []
    draw_game = LeagueMapping.draw_game

    def recorded(self, rng):
        game = draw_game(self, rng)
        draws.append((self.league.win_rates(), game))
        return game

    monkeypatch.setattr(LeagueMapping, "draw_game", recorded)

    def build():
        algo = small_league(matchmaking="pfsp").build()
        for _ in range(2):
            algo.train()
        assert algo.league.pool == ["main_v1", "main_v2"]
        _sample_directly(algo)
        return algo

    def train_and_draws(algo):
        draws.clear()
        algo.train()
        return list(draws)

    algo, twin = build(), build()
    try:
        restored = cairn.Algorithm.from_checkpoint(algo.save(tmp_path / "c"))
        try:
            saved_draws = train_and_draws(algo)
            assert saved_draws and saved_draws == train_and_draws(restored) == train_and_draws(twin)
            assert_trains_identically(algo, restored, iterations=1)
            twin.train()
            assert weights_digest(twin) == weights_digest(algo)
            assert_trees_equal(twin.get_state(), algo.get_state())
        finally:
            restored.stop()
    finally:
        algo.stop()
        twin.stop()


def test_an_in_place_restore_forgets_the_games_a_direct_sample_finished_before_it(tmp_path):
    """Games a direct ``runner.sample()`` finished before ``restore()`` belong to the run the
    restore leaves: the next train() counts none of them."""
    algo = small_league().build()
    try:
        algo.train()
        path = algo.save(tmp_path / "c")
        fresh = cairn.Algorithm.from_checkpoint(path)
        try:
            _sample_directly(algo)
            algo.restore(path)
            assert_trains_identically(algo, fresh, iterations=1)
        finally:
            fresh.stop()
    finally:
        algo.stop()


def test_games_a_direct_sample_finished_are_counted_after_run_episodes_on_the_same_runner():
    """``run_episodes`` on the local runner (evaluation games on the training runner) after a
    direct ``sample()`` keeps the games that sample finished waiting: the algorithm counts them
    (episode counter and window, the league's payoff) as a twin that never evaluated does."""
    algos = [small_league().build() for _ in range(2)]
    try:
        for algo in algos:
            algo.train()
            _sample_directly(algo)
        trained = algos[0].counters["num_episodes_lifetime"]
        evaluated = algos[0].env_runner_group.local.run_episodes(2)
        assert len(evaluated) == 2
        states = [algo.get_state() for algo in algos]
        for key in ("counters", "recent_episodes"):
            assert_trees_equal(states[0][key], states[1][key])
        assert_trees_equal(states[0]["league"]["payoff"], states[1]["league"]["payoff"])
        assert states[0]["counters"]["num_episodes_lifetime"] > trained  # the direct games count
        algos[0].train()  # and training goes on
    finally:
        for algo in algos:
            algo.stop()
