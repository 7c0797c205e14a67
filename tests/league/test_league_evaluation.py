"""algo.evaluate() with fixed opponents: evaluation["league"] holds main's greedy games against
each, equal to play_games over the same games; evaluation episodes draw nothing from the league."""

import warnings

from cairn.env_runner.make_env import make_env
from cairn.env_runner.scripted_opponents import resolve_opponent
from cairn.league.games import play_games
from cairn.rng import rng_state
from tests.league.games import small_league

OPPONENTS = {"random_legal": "random_legal", "heuristic": "cairn.envs.connect_four:connect_four_heuristic"}


def test_evaluation_plays_each_fixed_opponent_as_play_games_does():
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # training draws fixed opponents: no warning
        algo = small_league(opponents=OPPONENTS, evaluation_games=6).build()
    try:
        algo.train()
        league = algo.league
        rng_before, plans_before = rng_state(league.rng), league.get_state()["plans"]
        evaluation = algo.evaluate(num_episodes=1)
        assert rng_state(league.rng) == rng_before and league.get_state()["plans"] == plans_before
        assert set(evaluation["league"]) == set(OPPONENTS)
        for name, spec in OPPONENTS.items():
            expected = play_games(lambda: make_env(algo.config), algo.get_policy("main"),
                                  resolve_opponent(spec), games=6, seed=league.evaluation_seed).to_dict()
            assert evaluation["league"][name] == expected
            assert expected["games"] == 6 and expected["illegal_moves"] == 0
        assert algo.evaluate(num_episodes=1)["league"] == evaluation["league"]  # the same games each time
    finally:
        algo.stop()


def test_no_fixed_opponents_no_league_evaluation():
    algo = small_league().build()
    try:
        assert "league" not in algo.evaluate(num_episodes=1)
    finally:
        algo.stop()


def test_checkpoint_manager_keeps_the_best_by_win_rate_against_a_fixed_opponent(tmp_path):
    import cairn

    metric = "evaluation.league.random_legal.win_rate"
    config = small_league(opponents={"random_legal": "random_legal"}, evaluation_games=4)
    algo = config.evaluation(evaluation_interval=1, evaluation_duration=1).build()
    manager = cairn.CheckpointManager(tmp_path / "ckpts", keep_last=1, keep_best=(metric, "max", 1))
    try:
        rates = {}
        for _ in range(3):
            result = algo.train()
            rates[manager.save(algo, result)] = result["evaluation"]["league"]["random_legal"]["win_rate"]
    finally:
        algo.stop()
    best = max(rates.values())
    newest_best = [path for path, rate in rates.items() if rate == best][-1]
    assert manager.best() == newest_best
