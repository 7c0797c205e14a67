"""algo.evaluate() with fixed opponents: evaluation["league"] holds main's greedy games against
each, equal to play_games over the same games; evaluation episodes draw nothing from the league."""

import re
import warnings

import pytest

from cairn.env_runner.make_env import make_env
from cairn.env_runner.scripted_opponents import resolve_opponent
from cairn.errors import EnvError
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


def test_evaluation_says_how_many_of_its_games_differ():
    # Greedy main against a deterministic scripted opponent plays one game per seat, repeated;
    # evaluation["league"] says so (distinct_games), as cairn evaluate does.
    opponents = {"leftmost": "tests.league.games:leftmost_legal", "random_legal": "random_legal"}
    algo = small_league(opponents=opponents, evaluation_games=6).build()
    try:
        evaluation = algo.evaluate(num_episodes=1)["league"]
        assert evaluation["leftmost"]["games"] == 6 and evaluation["leftmost"]["distinct_games"] == 2
        assert evaluation["random_legal"]["distinct_games"] == 6
    finally:
        algo.stop()


def test_no_fixed_opponents_no_league_evaluation():
    algo = small_league().build()
    try:
        assert "league" not in algo.evaluate(num_episodes=1)
    finally:
        algo.stop()


#: keep_best metrics as the issue and docs name them: the slash-joined names of progress.csv (the
#: training win rate against the fixed opponent drawn in training, and the evaluation's), and the
#: older dotted path into the result.
def _evaluation_win_rate(result: dict) -> float:
    return result["evaluation"]["league"]["random_legal"]["win_rate"]


KEEP_BEST = {
    "league/win_rate/random_legal": lambda result: result["league"]["win_rate"]["random_legal"],
    "evaluation/league/random_legal/win_rate": _evaluation_win_rate,
    "evaluation.league.random_legal.win_rate": _evaluation_win_rate,
}


def test_checkpoint_manager_keeps_the_best_by_win_rate_against_a_fixed_opponent(tmp_path):
    import cairn
    from cairn.cli.runlog import progress_row

    config = small_league(opponents={"random_legal": "random_legal"}, evaluation_games=4, max_snapshots=1)
    algo = config.evaluation(evaluation_interval=1, evaluation_duration=1).build()
    managers = {metric: cairn.CheckpointManager(tmp_path / str(k), keep_last=1, keep_best=(metric, "max", 1))
                for k, metric in enumerate(KEEP_BEST)}
    rates: dict[str, dict[str, float]] = {metric: {} for metric in KEEP_BEST}
    try:
        for _ in range(3):
            result = {**algo.train(), "time_total_s": 1.0}
            # The training win rate is the progress.csv column of that name (one naming).
            training_rate = KEEP_BEST["league/win_rate/random_legal"](result)
            assert progress_row(result)["league/win_rate/random_legal"] == training_rate
            for metric, manager in managers.items():
                rates[metric][manager.save(algo, result)] = KEEP_BEST[metric](result)
    finally:
        algo.stop()
    assert len(set(rates["league/win_rate/random_legal"].values())) > 1  # the best is a real choice
    for metric, manager in managers.items():
        best = max(rates[metric].values())
        newest_best = [path for path, rate in rates[metric].items() if rate == best][-1]
        assert manager.best() == newest_best, metric
        assert [c.metric for c in manager.checkpoints() if c.path == newest_best] == [best]


def test_a_fixed_opponents_move_outside_the_space_in_evaluation_names_it_and_its_spec():
    spec = "tests.league.games:plays_outside_the_space"
    algo = small_league(opponents={"bad": spec}, evaluation_games=2).build()
    try:
        with pytest.raises(EnvError, match=re.escape(f"fixed opponent 'bad' ({spec!r}) played 99, outside")):
            algo.league.evaluate(algo.config, algo.get_policy("main"))
    finally:
        algo.stop()


def test_evaluation_metrics_leave_out_scripted_opponents_as_training_results_do():
    """The rule of train() and evaluate() alike: policy_episode_return_mean has a row only for the
    policies cairn runs; a scripted opponent's games are in the league section (W/D/L). Played
    here on a runner that seats the fixed opponent (a training runner, as evaluate_episodes takes
    any runner), so that its returns are in the episodes."""
    from cairn.algorithms.evaluation import evaluate_episodes
    from cairn.env_runner.env_runner import EnvRunner

    algo = small_league(opponents={"random_legal": "random_legal"}, self_play_fraction=0.0).build()
    runner = EnvRunner(algo.config, algo.policies, worker_index=0, num_envs=1)
    try:
        episodes = runner.run_episodes(4)
        seated = {pid for episode in episodes for pid in episode["policy_returns"]}
        assert seated == {"main", "random_legal"}  # the runner did seat the scripted opponent
        metrics = evaluate_episodes(runner, algo.config, algo.policies, 4)
        assert set(metrics["policy_episode_return_mean"]) == {"main"}
        assert "random_legal" not in algo.train()["policy_episode_return_mean"]
    finally:
        runner.stop()
        algo.stop()
