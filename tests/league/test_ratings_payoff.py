"""Ratings (openskill) and the payoff table follow games with known winners; games of a
trained league reach them through the env runners' episodes."""

import json

from openskill.models import PlackettLuce

import cairn
from cairn.callbacks.loggers import flat_metrics
from cairn.cli.runlog import progress_row
from cairn.config.league_settings import league_settings
from cairn.league import League
from tests.league.games import small_league


def _game(main: float, opponent: str, other: float) -> dict:
    return {"return": main + other, "length": 9, "policy_returns": {"main": [main], opponent: [other]}}


def test_games_with_known_winners_update_payoff_and_ratings():
    league = League(league_settings(), seed=0)
    league.pool = ["main_v1", "main_v2"]
    league.ratings.ensure("main_v1")
    league.ratings.ensure("main_v2")
    games = [_game(1.0, "main_v1", -1.0), _game(-1.0, "main_v1", 1.0), _game(0.0, "main_v2", 0.0),
             _game(1.0, "main_v2", -1.0),
             {"return": 0.0, "length": 7, "policy_returns": {"main": [1.0, -1.0]}},
             _game(1.0, "gone_v0", -1.0)]  # an opponent no longer in the pool: counted, not rated
    league.record_episodes(games)
    assert league.payoff.table == {"main_v1": [1, 0, 1], "main_v2": [1, 1, 0]}
    assert league.win_rates() == {"main_v1": 0.5, "main_v2": 0.75}
    assert (league.games, league.self_play_games) == (6, 1)

    model = PlackettLuce()  # the same games rated by hand, in order
    r = {p: model.rating() for p in ("main", "main_v1", "main_v2")}
    for winner_first, opp, ranks in (("main", "main_v1", [0, 1]), ("main", "main_v1", [1, 0]),
                                     ("main", "main_v2", [0, 0]), ("main", "main_v2", [0, 1])):
        [[a], [b]] = model.rate([[r[winner_first]], [r[opp]]], ranks=ranks)
        r[winner_first], r[opp] = a, b
    assert league.ratings.table == {p: (x.mu, x.sigma) for p, x in r.items()}
    assert league.ratings.table["main"][0] > 25.0 > league.ratings.table["main_v2"][0]

    metrics = league.metrics()
    assert metrics["payoff"]["main_v1"] == {"wins": 1, "draws": 0, "losses": 1}
    logged = dict(flat_metrics({"league": metrics}))  # what TensorBoard/MLflow/CSV get
    assert logged["league/win_rate/main_v2"] == 0.75 and logged["league/games"] == 6
    assert logged["league/rating/main"] == metrics["rating"]["main"]


def test_training_rates_every_game_main_played_against_the_pool():
    # Seed 1: its third iteration finishes games against main_v2, in the pool it ends with (the payoff
    # keeps rows for the pool only, and which games finish there is the seed's chance).
    algo = small_league(self_play_fraction=0.0).debugging(seed=1).build()
    try:
        results = [algo.train() for _ in range(3)]
        league = results[-1]["league"]
        assert league["pool"] == ["main_v2", "main_v3"]
        assert sorted(algo.policies) == ["main", "main_v2", "main_v3"]
        assert algo.policies_to_train == ["main"]
        assert league["games"] == algo.counters["num_episodes_lifetime"]
        rows = sum(sum(r) for r in algo.league.payoff.table.values())
        assert rows > 0 and set(league["rating"]) == {"main", "main_v2", "main_v3"}
        for episode in algo.recent_episodes:  # one main seat and at most one opponent per game
            assert "main" in episode["policy_returns"] and len(episode["policy_returns"]) <= 2
        row = progress_row(results[-1])  # progress.csv and TensorBoard of cairn train
        assert row["league/rating/main"] == league["rating"]["main"]
        assert row["league/games"] == league["games"] and row["league/pool_size"] == 2
        assert {f"league/win_rate/{o}" for o in league["win_rate"]} <= set(row)
    finally:
        algo.stop()


def test_cairn_train_league_shows_win_rate_and_rating(tmp_path, capsys):
    from cairn.cli import main

    run = tmp_path / "run"
    assert main(["train", "--algo", "PPO", "--env", "pettingzoo.classic.connect_four_v3", "--league",
                 "--config", "train_batch_size=64", "minibatch_size=32", "num_epochs=1",
                 'model={"hidden": [8]}', "--seed", "0", "--stop-iters", "2", "--out", str(run)]) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("iter")]
    assert len(lines) == 2 and all("win_rate" in line and "rating" in line for line in lines)
    assert "return_mean" not in lines[0]
    saved = json.loads((run / "config.json").read_text())
    assert saved["league_config"]["matchmaking"] == "pfsp" and list(saved["policies"]) == ["main"]
    assert saved["league_config"]["snapshot_every_iterations"] == 10  # the issue's --league default
    assert saved["league_config"]["opponents"] == {"random_legal": "random_legal"}
    header = (run / "progress.csv").read_text().splitlines()[0]
    assert "league/rating/main" in header and "league/games" in header


def test_cairn_league_prints_ratings_and_payoff(tmp_path, capsys):
    from cairn.cli import main

    algo = small_league().build()
    try:
        for _ in range(2):
            algo.train()
        path = algo.save(tmp_path / "c")
        state = algo.league.get_state()
    finally:
        algo.stop()
    assert main(["league", str(path), "--json"]) == 0
    table = json.loads(capsys.readouterr().out)
    assert table["pool"] == state["pool"] and table["games"] == state["games"]
    assert {p: [r["mu"], r["sigma"]] for p, r in table["ratings"].items()} == state["ratings"]
    rows = {o: [r["wins"], r["draws"], r["losses"]] for o, r in table["payoff"].items()}
    assert rows == state["payoff"]["table"]
    assert main(["league", str(path)]) == 0
    out = capsys.readouterr().out
    assert "main against" in out and all(pid in out for pid in state["ratings"])
    plain = cairn.PPOConfig().environment("CartPole-v1").training(train_batch_size=64, minibatch_size=32)
    other = plain.build()
    no_league = other.save(tmp_path / "plain")
    other.stop()
    assert main(["league", str(no_league)]) == 2
    assert "holds no league" in capsys.readouterr().err


def test_cairn_train_takes_league_settings_from_config(tmp_path, capsys):
    from cairn.cli import main
    from cairn.config.league_settings import league_settings

    settings = json.dumps(league_settings(snapshot_every_iterations=1, max_snapshots=1))
    run = tmp_path / "run"
    assert main(["train", "--algo", "PPO", "--env", "pettingzoo.classic.connect_four_v3",
                 "--config", "train_batch_size=64", "minibatch_size=32", "num_epochs=1",
                 f"league_config={settings}", "--seed", "0", "--stop-iters", "2", "--out", str(run),
                 "--checkpoint-every", "1"]) == 0
    capsys.readouterr()
    assert main(["league", str(run), "--json"]) == 0
    table = json.loads(capsys.readouterr().out)
    assert table["pool"] == ["main_v2"] and table["iteration"] == 2



def test_a_game_of_more_than_two_seats_is_scored_per_seat():
    """With three seats main holds two and the opponent one (the league's mapping): main's score
    is its mean return per seat against the opponent's, not its seats' sum (which made a game
    that every seat tied main's win)."""
    league = League(league_settings(), seed=0)
    league.pool = ["main_v1"]
    league.ratings.ensure("main_v1")
    games = [{"return": 3.0, "length": 5, "policy_returns": {"main": [1.0, 1.0], "main_v1": [1.0]}},
             {"return": 2.5, "length": 5, "policy_returns": {"main": [1.5, 0.5], "main_v1": [0.5]}},
             {"return": 0.5, "length": 5, "policy_returns": {"main": [0.5, 0.5], "main_v1": [1.0]}}]
    league.record_episodes(games)
    assert league.payoff.table == {"main_v1": [1, 1, 1]}
