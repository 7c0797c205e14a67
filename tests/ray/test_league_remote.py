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


def _opponents_per_iteration(algo, iterations, kill_before=None):
    """The opponent of each game the remote runner finished (None: self-play), in the order the
    driver recorded them, one list per ``train()``; the runner is killed (and so recreated in
    that train()) before iteration ``kill_before`` (1-based)."""
    import ray

    from tests.ray.actors import kill_and_wait

    seen: list[list] = []
    record = algo.league.record_episodes

    def spy(episodes):
        episodes = list(episodes)
        seen[-1].extend(next((p for p in e.get("policy_returns") or {} if p != "main"), None)
                        for e in episodes)
        return record(episodes)

    algo.league.record_episodes = spy
    for iteration in range(1, iterations + 1):
        if iteration == kill_before:
            (actor,) = algo.env_runner_group.remote_actors()
            pid = ray.get(actor.pid.remote())
            kill_and_wait(actor)
        seen.append([])
        result = algo.train()
    if kill_before is not None:
        assert result["num_env_runner_restarts"] == 1
        (actor,) = algo.env_runner_group.remote_actors()
        assert ray.get(actor.pid.remote()) != pid
    return seen


def test_a_recreated_runner_draws_on_instead_of_repeating_its_predecessors_games(ray_cluster):
    # Before, a runner recreated after a fault got a league copy seeded as its predecessor's was
    # (seed, worker, snapshots taken): it drew the very games its predecessor had drawn since
    # the last snapshot, in the same order. Now each sample's games come from a stream keyed by
    # where the runner stands, which a recreated runner is brought to: it draws the games the
    # runner would have drawn from there.
    def config():
        return (small_league(snapshot_every_iterations=1000, max_snapshots=None, matchmaking="uniform",
                             self_play_fraction=0.25,
                             opponents={"a": "random_legal", "b": "tests.league.games:leftmost_legal",
                                        "c": "cairn.envs.connect_four:connect_four_heuristic"})
                .env_runners(num_env_runners=1, num_envs_per_env_runner=1))

    algo = config().build()
    try:
        killed = _opponents_per_iteration(algo, 2, kill_before=2)
    finally:
        algo.stop()
    twin = config().build()
    try:
        kept = _opponents_per_iteration(twin, 2)
    finally:
        twin.stop()
    assert killed[0] == kept[0] and len(killed[0]) >= 3  # the same first iteration
    first, recreated = killed
    count = min(len(first), len(recreated))
    assert count >= 3 and recreated[:count] != first[:count]  # not the predecessor's games again
    # The runner kept alive finished the game in flight (if any), then drew what the recreated
    # runner, starting fresh games from the same position, drew.
    count = min(len(recreated), len(kept[1]) - 1)
    assert count >= 3 and recreated[:count] in (kept[1][:count], kept[1][1:count + 1]), (recreated, kept[1])
