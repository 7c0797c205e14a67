"""When snapshots are due: snapshot n at the end of iteration n*K; by win rate over a full
window against the snapshots (the first one at once, when there is none)."""

from typing import Any

import pytest
import torch

from cairn.config.league_settings import league_settings
from cairn.errors import ConfigError
from cairn.league import League
from cairn.league.snapshots import snapshot_due
from tests.league.games import small_league


def test_every_k_iterations():
    settings = league_settings(snapshot_every_iterations=3)
    due = [i for i in range(1, 13) if snapshot_due(settings, i, has_snapshot=True, recent_scores=[1.0] * 100)]
    assert due == [3, 6, 9, 12]


def test_by_win_rate_over_a_full_window():
    settings = league_settings(snapshot_win_rate=0.75, win_rate_window=4)
    assert snapshot_due(settings, 1, has_snapshot=False, recent_scores=[])  # nothing to measure against
    assert not snapshot_due(settings, 2, has_snapshot=True, recent_scores=[1.0, 1.0, 1.0])  # window not full
    assert not snapshot_due(settings, 2, has_snapshot=True, recent_scores=[1.0, 1.0, 0.5, 0.0])
    assert snapshot_due(settings, 2, has_snapshot=True, recent_scores=[1.0, 1.0, 0.5, 0.5])
    both = league_settings(snapshot_win_rate=0.75, snapshot_every_iterations=5, win_rate_window=4)
    assert snapshot_due(both, 5, has_snapshot=True, recent_scores=[])


def test_fixed_opponents_are_resolved_at_build():
    league = League(league_settings(opponents={"rnd": "random_legal"}), seed=0)
    assert callable(league.fixed_opponents["rnd"])
    with pytest.raises(ConfigError, match="no_such_module"):
        League(league_settings(opponents={"bad": "no_such_module:fn"}), seed=0)


def test_the_league_step_runs_under_the_configured_torch_threads():
    """``end_iteration`` (a snapshot builds a policy and checks its outputs in small forwards)
    runs with ``config.torch_num_threads``, as sampling and learning do; under torch's default
    threads each snapshot cost ~0.3 s on a busy 2-core machine (bench/league_speed.py)."""
    previous = torch.get_num_threads()
    torch.set_num_threads(2)
    algo = small_league().resources(torch_num_threads=1).build()
    seen: list[int] = []
    end_iteration = algo.league.end_iteration

    def spy(algorithm: Any) -> dict[str, Any]:
        seen.append(torch.get_num_threads())
        return end_iteration(algorithm)

    algo.league.end_iteration = spy  # type: ignore[method-assign]
    try:
        algo.train()
        after = torch.get_num_threads()
    finally:
        algo.stop()
        torch.set_num_threads(previous)
    assert seen == [1] and algo.league.pool == ["main_v1"]
    assert after == 2  # the caller's setting comes back


def test_a_snapshot_the_user_removes_leaves_the_pool_and_training_goes_on():
    # Before, remove_policy took the snapshot out of the algorithm only: the pool kept it and
    # the next train() failed drawing it ("maps agent 'player_0' to 'main_v1', which is not one
    # of the policies").
    algo = small_league(max_snapshots=3, matchmaking="uniform", self_play_fraction=0.0).build()
    try:
        for _ in range(2):
            algo.train()
        assert algo.league.pool == ["main_v1", "main_v2"]
        with pytest.raises(ConfigError, match="policy_mapping_fn"):
            algo.remove_policy("main_v1", policy_mapping_fn=lambda agent_id, episode, **kw: "main")
        with pytest.raises(ConfigError, match="league's main"):
            algo.remove_policy("main")
        assert algo.league.pool == ["main_v1", "main_v2"] and "main_v1" in algo.policies
        algo.remove_policy("main_v1")
        assert algo.league.pool == ["main_v2"] and sorted(algo.policies) == ["main", "main_v2"]
        assert "main_v1" not in algo.league.ratings.table
        result = algo.train()
        assert algo.league.pool == ["main_v2", "main_v3"]
        assert set(result["league"]["pool"]) == {"main_v2", "main_v3"}
    finally:
        algo.stop()


def test_incremental_saves_of_a_league_rewrite_only_main(tmp_path):
    """Issue 39: with incremental saves a league checkpoint rewrites only what changed. The
    snapshots (frozen, acting as opponents) keep the weights file of the previous checkpoint
    (a hard link), main's is written anew, and the checkpoint restores the live state."""
    import os

    import cairn
    from cairn.checkpoint import load_algorithm_state
    from tests.helpers import assert_trees_equal

    arrays = "policy_state.safetensors"
    algo = small_league(max_snapshots=None, self_play_fraction=0.0).build()
    manager = cairn.CheckpointManager(tmp_path / "run", keep_last=None)
    try:
        paths = []
        for _ in range(3):
            paths.append(manager.save(algo, algo.train()))
        first, second, third = (str(p) for p in paths)
        assert algo.league.pool == ["main_v1", "main_v2", "main_v3"]
        assert algo.league.get_state()["payoff"]["table"]["main_v1"]  # the snapshots played

        def inode(path: str, pid: str) -> int:
            return os.stat(f"{path}/policies/{pid}/{arrays}").st_ino

        assert inode(first, "main_v1") == inode(second, "main_v1") == inode(third, "main_v1")
        assert inode(second, "main_v2") == inode(third, "main_v2")
        assert inode(second, "main") != inode(third, "main")
        stored = load_algorithm_state(third)["policies"]
        assert sorted(stored) == sorted(algo.policies)
        for pid, policy in algo.policies.items():
            assert_trees_equal(stored[pid], policy.get_state(), pid)
    finally:
        algo.stop()


def test_a_policy_added_under_a_snapshot_name_is_refused():
    # Before, add_policy("main_v2", ...) was taken; at the end of the next iteration the league's
    # snapshot main_v2 silently replaced it, was left out of the pool, and so at every iteration
    # after: the pool never grew again and no error said why.
    from cairn.policy.policy import Policy

    algo = small_league(max_snapshots=1).build()
    try:
        algo.train()
        algo.train()  # main_v2 in, main_v1 out (max_snapshots=1)
        assert algo.league.pool == ["main_v2"]
        other = Policy.from_state(algo.get_policy("main").get_state(copy=True))
        for pid in ("main_v3", "main_v1", "main_v2"):  # the next snapshot's, a removed one's, a pool member's
            with pytest.raises(ConfigError, match=rf"add_policy\('{pid}'\).*'main_v<n>' are the league's"):
                algo.add_policy(pid, other)
        assert sorted(algo.policies) == ["main", "main_v2"]
        algo.add_policy("sparring", other, policies_to_train=["main"])  # any other name is a user's
        assert algo.train()["league"]["pool"] == ["main_v3"]
        assert sorted(algo.policies) == ["main", "main_v3", "sparring"]
    finally:
        algo.stop()


def test_a_configured_policy_named_like_the_next_snapshot_is_an_error_not_replaced():
    import numpy as np
    from pettingzoo.classic import connect_four_v3

    import cairn

    env = connect_four_v3.env()
    spaces = cairn.PolicySpec(observation_space=env.observation_space("player_0"),
                              action_space=env.action_space("player_0"))
    algo = (small_league().multi_agent(policies={"main": cairn.PolicySpec(), "main_v1": spaces},
                                       policies_to_train=["main"]).build())
    try:
        before = algo.get_policy("main_v1").get_weights()
        assert any(not np.array_equal(w, algo.get_policy("main").get_weights()[k]) for k, w in before.items())
        for _ in range(2):  # the same clear error each time, the user's policy kept
            with pytest.raises(ConfigError, match=r"next snapshot is 'main_v1'.*has a policy 'main_v1'"):
                algo.train()
            after = algo.get_policy("main_v1").get_weights()
            assert all(np.array_equal(after[k], w) for k, w in before.items()) and algo.league.pool == []
        algo.remove_policy("main_v1")
        assert algo.train()["league"]["pool"] == ["main_v1"]
    finally:
        algo.stop()


def test_a_snapshot_samples_its_moves_from_generators_of_its_own():
    """A snapshot is a copy of main's weights, not of main's random generators: with a copy of
    those, main and its newest snapshot drew the same numbers, move for move. In a symmetric
    simultaneous game right after the snapshot (the same weights, every env starting a game
    against it when the oldest snapshot leaves) they then played the same move every round,
    and every game of the iteration was a draw."""
    import numpy as np

    from tests.league.games import small_parallel_league

    algo = small_parallel_league(self_play_fraction=0.0, matchmaking="latest", max_snapshots=1).build()
    scores: list[float] = []  # main's game results against a snapshot: 1 won, 0 drawn, -1 lost
    record = algo.league.record_episodes

    def spy(episodes: Any) -> None:
        episodes = list(episodes)
        scores.extend(float(np.sign(e["policy_returns"]["main"][0] - e["policy_returns"][other][0]))
                      for e in episodes for other in e["policy_returns"] if other != "main")
        record(episodes)

    algo.league.record_episodes = spy  # type: ignore[method-assign]
    try:
        for _ in range(2):
            algo.train()
        main, snapshot = (algo.get_policy(pid).get_state()["rng"] for pid in ("main", "main_v2"))
        played = len(scores)
        algo.train()  # against main_v2 alone, taken at the end of iteration 2 with main's weights then
        third = scores[played:]
    finally:
        algo.stop()
    assert len(third) >= 20 and set(third) != {0.0}, third  # not all draws
    assert main["numpy"] != snapshot["numpy"] and not np.array_equal(main["torch"], snapshot["torch"])


def test_a_snapshot_carries_weights_filter_and_counters_but_no_optimizer_moments(tmp_path):
    """Issue 39: adding a snapshot costs no more than copying weights. A frozen snapshot never
    steps its optimizer, so it carries main's weights, filter and counters and a fresh optimizer
    state (no Adam moments: they were twice the weights, in memory and in every checkpoint's
    snapshot files). Its copies are its own: main training on leaves the snapshot as taken."""
    from cairn.checkpoint import load_algorithm_state
    from tests.helpers import assert_trees_equal

    algo = (small_league(max_snapshots=None).env_runners(observation_filter="MeanStdFilter")
            .training(model={"hidden": [64]}).build())
    try:
        algo.train()  # main learns, then main_v1 is taken
        main, snapshot = algo.get_policy("main").get_state(), algo.get_policy("main_v1").get_state()
        assert main["optimizer"]["state"] and main["counters"]["num_grad_updates"] > 0
        assert snapshot["optimizer"]["state"] == {}
        assert snapshot["optimizer"]["param_groups"] == main["optimizer"]["param_groups"]
        for key in ("weights", "observation_filter", "counters", "exploration"):
            assert_trees_equal(snapshot[key], main[key], key)
        assert main["observation_filter"]["count"] > 0  # the filter copied is one that learnt

        path = algo.save(tmp_path / "c")
        stored = load_algorithm_state(path)["policies"]
        assert stored["main_v1"]["optimizer"]["state"] == {}
        assert_trees_equal(stored["main_v1"]["weights"], main["weights"], "stored weights")
        sizes = {pid: (tmp_path / "c/policies" / pid / "policy_state.safetensors").stat().st_size
                 for pid in ("main", "main_v1")}
        assert sizes["main_v1"] < 0.5 * sizes["main"]  # main's holds its two moments per weight

        algo.train()  # main learns on; the snapshot keeps what it was given
        assert_trees_equal(algo.get_policy("main_v1").get_state()["weights"], snapshot["weights"])
        # Put back into training, a snapshot starts with a fresh optimizer, as a new policy does.
        optimizer = algo.get_policy("main_v1").optimizer
        assert optimizer.state_dict()["state"] == {}
        assert [g["lr"] for g in optimizer.param_groups] == [algo.get_policy("main").config["lr"]]
    finally:
        algo.stop()
