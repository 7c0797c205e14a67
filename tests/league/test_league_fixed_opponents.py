"""Fixed opponents in training: matchmaking draws them like pool members in turn-based and
parallel games, the turn-based env runner seats them (their moves from the runner's generator,
no rows of theirs in the batches), their games update ratings and payoff, and a run with one
resumes bit for bit (the parallel runner's: test_league_parallel_opponents.py)."""

import copy
import json
import subprocess
import sys
from collections import Counter

import numpy as np
import pytest
from pettingzoo.classic import connect_four_v3, rps_v2

from cairn.config.league_settings import league_settings
from cairn.envs.pettingzoo_env import make_pettingzoo_env
from cairn.errors import CheckpointFormatError, ConfigError, EnvError
from cairn.league import League
from tests.conftest import ROOT
from tests.helpers import weights_digest
from tests.league.games import CountingRandomLegal, make_rounds_of_rock_paper_scissors, small_league
from tests.league.test_league_resume import _CONTINUE

FIXED = {"random_legal": "random_legal", "heuristic": "cairn.envs.connect_four:connect_four_heuristic"}


def _league(env=None, **kwargs) -> League:
    league = League(league_settings(opponents=FIXED, **kwargs), seed=0)
    league.set_agents(connect_four_v3.env() if env is None else env)
    league.pool = ["main_v1", "main_v2"]
    return league


@pytest.mark.parametrize("game", ["turn-based", "parallel"])
@pytest.mark.parametrize("matchmaking", ["uniform", "pfsp", "latest"])
def test_draws_include_fixed_opponents_in_proportion(matchmaking, game):
    # Turn-based connect four and simultaneous rock-paper-scissors alike: the env runners of both
    # seat scripted opponents in training.
    env = connect_four_v3.env() if game == "turn-based" else rps_v2.parallel_env()
    league = _league(env, matchmaking=matchmaking, self_play_fraction=0.0)
    # PFSP: main always beats main_v2 (weight 0) and scores 0.5 against random_legal (weight 0.25).
    for _ in range(10):
        league.payoff.record("main_v2", 1.0, is_snapshot=True)
        league.payoff.record("random_legal", 0.5, is_snapshot=False)
    games = 4000
    drawn = Counter(league.mapping.draw_game(league.rng)["opponent"] for _ in range(games))
    expected = {"uniform": {"main_v1": 0.25, "main_v2": 0.25, "random_legal": 0.25, "heuristic": 0.25},
                "pfsp": {"main_v1": 1 / 2.25, "random_legal": 0.25 / 2.25, "heuristic": 1 / 2.25},
                "latest": {"main_v2": 1.0}}[matchmaking]  # latest: the newest snapshot, never a fixed one
    assert set(drawn) == set(expected)
    for opponent, share in expected.items():
        assert abs(drawn[opponent] / games - share) < 0.03, (opponent, drawn)


def test_scripted_games_update_ratings_and_payoff():
    league = _league()
    before = dict(league.ratings.table)
    league.record_episodes([{"policy_returns": {"main": [1.0], "heuristic": [-1.0]}},
                            {"policy_returns": {"heuristic": [1.0], "main": [-1.0]}},
                            {"policy_returns": {"main": [0.0], "random_legal": [0.0]}}])
    metrics = league.metrics()
    assert metrics["payoff"] == {"heuristic": {"wins": 1, "draws": 0, "losses": 1},
                                 "random_legal": {"wins": 0, "draws": 1, "losses": 0}}
    assert metrics["win_rate"] == {"heuristic": 0.5, "random_legal": 0.5} and metrics["games"] == 3
    assert league.ratings.table["heuristic"] != before["heuristic"]
    assert not league.payoff.recent_against_snapshots  # a fixed opponent never triggers a snapshot


def test_fixed_opponent_named_like_main_is_refused():
    with pytest.raises(ConfigError, match="'main_v1'"):
        League(league_settings(opponents={"main_v1": "random_legal"}), seed=0)


def test_batches_against_scripted_opponents_hold_only_mains_moves():
    spec = "tests.league.games:CountingRandomLegal"
    algo = small_league(opponents={"counting": spec}, self_play_fraction=0.0,
                        snapshot_every_iterations=1000).build()
    try:
        runner = algo.env_runner_group.local
        runner.sample(5)  # some moves in flight first: the count below must carry them over

        def pending() -> int:
            return sum(len(env["pending_agents"]) for env in runner.get_state()["current_obs"])

        before, CountingRandomLegal.moves = pending(), 0
        steps = 40
        batches = runner.sample(steps)
        assert set(batches) == {"main"} and CountingRandomLegal.moves > 0
        main_moves = steps * runner.num_envs - CountingRandomLegal.moves  # one move per env per step
        assert len(batches["main"]) == before + main_moves - pending()
        played = [e["policy_returns"] for e in runner.get_metrics()]
        assert played and all(set(r) == {"main", "counting"} for r in played)
        result = algo.train()["league"]
        record = result["payoff"]["counting"]
        assert record["wins"] + record["draws"] + record["losses"] == result["games"] > 0
        assert set(result["rating"]) == {"main", "counting"}
    finally:
        algo.stop()


@pytest.mark.slow
def test_league_with_a_fixed_opponent_resumes_bit_for_bit(tmp_path):
    algo = small_league(opponents={"random_legal": "random_legal"}, matchmaking="uniform").build()
    for _ in range(8):  # train until the scripted opponent is to move in a game (any seed)
        algo.train()
        in_flight = algo.env_runner_group.local.get_state()["current_obs"]
        if algo.iteration >= 2 and any(env["agent_pids"].get(env["to_move"]["agent"]) == "random_legal"
                                       for env in in_flight):
            break
    path = algo.save(tmp_path / "c")
    in_flight = algo.env_runner_group.local.get_state()["current_obs"]
    # Saved with the scripted opponent to move in a game in flight (its mapping restored, not drawn
    # again; its move, drawn after the restore, from the restored runner generator).
    assert any(env["agent_pids"].get(env["to_move"]["agent"]) == "random_legal" for env in in_flight)
    for _ in range(2):
        algo.train()
    league, last = algo.league.get_state(), algo.iteration
    assert league["payoff"]["table"]["random_legal"]
    assert league["pool"] == [f"main_v{last - 1}", f"main_v{last}"]
    expected = json.dumps([weights_digest(algo), sorted(algo.policies), league], sort_keys=True)
    algo.stop()
    out = subprocess.run([sys.executable, "-c", _CONTINUE.format(root=str(ROOT), path=str(path))],
                         capture_output=True, text=True, check=True, cwd=ROOT).stdout.strip()
    assert out.splitlines()[-1] == expected


def test_an_edited_scripted_move_in_flight_is_refused():
    algo = small_league(opponents={"random_legal": "random_legal"}, matchmaking="uniform").build()
    try:
        algo.train()
        runner = algo.env_runner_group.local
        for _ in range(200):  # step until an env's scripted opponent is to move (any seed)
            state = runner.get_state()
            scripted = [i for i, env in enumerate(state["current_obs"])
                        if env["agent_pids"].get(env["to_move"]["agent"]) == "random_legal"]
            if scripted:
                break
            runner.sample(1)
        assert scripted
        edited = copy.deepcopy(state)
        edited["current_obs"][scripted[0]]["to_move"]["obs"] = np.zeros(3, np.float32)
        with pytest.raises(CheckpointFormatError, match="scripted opponent"):
            runner.set_state(edited)
        after = runner.get_state()
        assert json.dumps(after["current_obs"][scripted[0]]["agent_pids"]) == \
            json.dumps(state["current_obs"][scripted[0]]["agent_pids"])
        runner.set_state(state)  # the unedited state restores
        assert runner.sample(4)
    finally:
        algo.stop()


@pytest.mark.parametrize("game", ["turn-based", "parallel"])
@pytest.mark.parametrize("name, played", [("out_of_space", "9"), ("not_an_action", "'left'")])
def test_a_scripted_move_outside_the_space_is_an_error_naming_the_opponent(game, name, played):
    # Before, the turn-based runner let PettingZoo's bare "AssertionError: action is not in action
    # space" through, and a parallel game without its own check played the bad action.
    config = small_league(opponents={"broken": f"tests.league.games:{name}"}, self_play_fraction=0.0)
    if game == "parallel":
        config = config.environment(make_rounds_of_rock_paper_scissors, env_config={"rounds": 5})
    algo = config.build()
    try:
        space = r"Discrete\(7\)" if game == "turn-based" else r"Discrete\(3\)"
        words = (rf"scripted opponent 'broken' \('tests.league.games:{name}'\) played {played}, "
                 rf"outside the action space {space}")
        with pytest.raises(EnvError, match=words):
            algo.train()
        with pytest.raises(EnvError, match=words):  # the same clear error again, not a broken runner
            algo.train()
    finally:
        algo.stop()


def test_a_scripted_move_its_mask_forbids_is_an_error_in_training():
    # Played, the env would end the game as the opponent's forfeit: main's win rate, rating and
    # payoff against it (what keep_best and PFSP read) would count the broken opponent's losses.
    config = small_league(opponents={"broken": "tests.league.games:first_forbidden"}, self_play_fraction=0.0)
    tictactoe = {"env_module": "pettingzoo.classic.tictactoe_v3"}
    algo = config.environment(make_pettingzoo_env, env_config=tictactoe).build()
    try:
        words = (r"scripted opponent 'broken' \('tests.league.games:first_forbidden'\) played \d, "
                 "which its action mask forbids")
        with pytest.raises(EnvError, match=words):
            algo.train()
    finally:
        algo.stop()


def test_random_legal_in_training_plays_actions_of_a_space_that_starts_at_1():
    # Before, the runner's random_legal played mask positions as actions: in Discrete(3, start=1)
    # with 2 and 3 legal, position 0 was played as action 1, which the mask forbids (an EnvError
    # here; a forfeit passing for main's win where unchecked), and action 3 never.
    from tests.league.games import OneBasedMoves, make_one_based_moves

    config = (small_league(opponents={"random_legal": "random_legal"}, self_play_fraction=0.0)
              .environment(make_one_based_moves, env_config={"moves": 4}))
    algo = config.build()
    try:
        algo.train()
        envs = [env for env in algo.env_runner_group.local.envs if isinstance(env, OneBasedMoves)]
        played = [action for env in envs for _, action in env.played]
        assert len(envs) == 2 and set(played) == {2, 3}
        result = algo.train()
        assert result["league"]["payoff"]["random_legal"]["wins"] == 0  # draws only: no forfeit
    finally:
        algo.stop()


def test_a_fixed_opponent_whose_spec_a_restore_replaces_starts_a_new_rating_and_payoff_row(tmp_path):
    """config_overrides that keep a fixed opponent's name but replace its spec (the fix the
    missing-opponent error offers) leave the old opponent's games out of the ratings and payoff:
    they were another program's, and PFSP would weigh the new one by the old one's win rate. An
    opponent whose spec is unchanged keeps its row."""
    from cairn import Algorithm

    opponents = {"swapped": "random_legal", "kept": "random_legal"}
    algo = small_league(opponents=opponents, self_play_fraction=0.0, snapshot_every_iterations=100).build()
    try:
        while not {"swapped", "kept"} <= set(algo.league.payoff.table):
            algo.train()
        kept_row, kept_rating = list(algo.league.payoff.table["kept"]), algo.league.ratings.table["kept"]
        assert algo.league.ratings.table["swapped"] != League(league_settings(), 0).ratings.table["main"]
        path = algo.save(str(tmp_path))
        settings = dict(algo.config.league_config)
    finally:
        algo.stop()
    replaced = {**settings, "opponents": {**opponents, "swapped": "tests.league.games:CountingRandomLegal"}}
    restored = Algorithm.from_checkpoint(path, config_overrides={"league_config": replaced})
    try:
        league = restored.league
        assert "swapped" not in league.payoff.table and "swapped" not in league.win_rates()
        default = League(league_settings(), 0).ratings.table["main"]
        assert league.ratings.table["swapped"] == default
        assert league.payoff.table["kept"] == kept_row and league.ratings.table["kept"] == kept_rating
    finally:
        restored.stop()
    same = Algorithm.from_checkpoint(path)  # no override: every row comes back
    try:
        assert {"swapped", "kept"} <= set(same.league.payoff.table)
    finally:
        same.stop()
