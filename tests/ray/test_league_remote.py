"""A league with a remote Ray env runner: its copy of the league's mapping draws the games
(snapshots included, each pushed with add_policy), and every game it finishes reaches the
driver's ratings and payoff; a checkpoint restores the league."""

import pytest

from tests.league.games import small_league

pytestmark = [pytest.mark.ray, pytest.mark.slow]


def test_remote_runner_plays_the_pool_and_reports_every_game(ray_cluster, tmp_path):
    algo = small_league(self_play_fraction=0.0).env_runners(num_env_runners=1).build()
    try:
        results = [algo.train() for _ in range(3)]
        path = algo.save(tmp_path / "c")
        state = algo.league.get_state()
    finally:
        algo.stop()
    league = results[-1]["league"]
    assert league["games"] == results[-1]["num_episodes_lifetime"]
    assert league["pool"] == ["main_v2", "main_v3"]
    assert sum(sum(row) for row in state["payoff"]["table"].values()) > 0  # games against snapshots
    restored = type(algo).from_checkpoint(path)
    try:
        assert restored.league.get_state()["pool"] == state["pool"]
        assert restored.league.ratings.get_state() == state["ratings"]
        assert restored.train()["league"]["games"] > league["games"]
    finally:
        restored.stop()
