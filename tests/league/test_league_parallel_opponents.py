"""Fixed opponents in training in simultaneous (PettingZoo parallel) games: the parallel env
runner seats them (their actions from the runner's generator, drawn when their observation
arrives), the batches hold no rows of theirs, their games update ratings and payoff, and a run
with one seated at the save resumes bit for bit in a fresh process."""

import copy
import json
import subprocess
import sys

import pytest

from cairn.envs.pettingzoo_env import make_pettingzoo_env
from cairn.errors import CheckpointFormatError
from tests.conftest import ROOT
from tests.helpers import weights_digest
from tests.league.games import CountingRandomLegal, small_league, small_parallel_league
from tests.league.test_league_resume import _CONTINUE


def _scripted_in_flight(state) -> int:
    return sum(len(env["scripted_actions"]) for env in state["current_obs"])


def test_batches_against_scripted_opponents_hold_only_mains_rows():
    # PettingZoo's own rock-paper-scissors (rps_v2), five rounds a game.
    spec = "tests.league.games:CountingRandomLegal"
    config = small_league(opponents={"counting": spec}, self_play_fraction=0.0,
                          snapshot_every_iterations=1000)
    algo = config.environment(make_pettingzoo_env, env_config={"env_module": "pettingzoo.classic.rps_v2",
                                                                "max_cycles": 5}).build()
    try:
        runner = algo.env_runner_group.local
        runner.sample(3)  # a game in flight first: the opponent's drawn, not yet played, actions count
        before, CountingRandomLegal.moves = _scripted_in_flight(runner.get_state()), 0
        steps = 20
        batches = runner.sample(steps)
        played = CountingRandomLegal.moves + before - _scripted_in_flight(runner.get_state())
        assert set(batches) == {"main"} and played > 0
        # Both players act at every step of every game: main's rows are the rest.
        assert len(batches["main"]) == 2 * steps * runner.num_envs - played == steps * runner.num_envs
        games = [e["policy_returns"] for e in runner.get_metrics()]
        assert games and all(set(r) == {"main", "counting"} for r in games)
        result = algo.train()["league"]
        record = result["payoff"]["counting"]
        assert record["wins"] + record["draws"] + record["losses"] == result["games"] > 0
        assert set(result["rating"]) == {"main", "counting"}
    finally:
        algo.stop()


@pytest.mark.slow
def test_parallel_league_with_a_fixed_opponent_resumes_bit_for_bit(tmp_path):
    algo = small_parallel_league(opponents={"random_legal": "random_legal"}, matchmaking="uniform").build()
    for _ in range(2):
        algo.train()
    path = algo.save(tmp_path / "c")
    # Saved with the scripted opponent seated in a game in flight, its next action drawn (restored,
    # not drawn again); its later actions come from the restored runner generator.
    assert _scripted_in_flight(algo.env_runner_group.local.get_state()) > 0
    for _ in range(2):
        algo.train()
    league = algo.league.get_state()
    assert league["payoff"]["table"]["random_legal"] and league["pool"] == ["main_v3", "main_v4"]
    expected = json.dumps([weights_digest(algo), sorted(algo.policies), league], sort_keys=True)
    algo.stop()
    out = subprocess.run([sys.executable, "-c", _CONTINUE.format(root=str(ROOT), path=str(path))],
                         capture_output=True, text=True, check=True, cwd=ROOT).stdout.strip()
    assert out.splitlines()[-1] == expected


@pytest.mark.parametrize("edit", ["outside_the_space", "missing", "for_mains_seat"])
def test_an_edited_scripted_action_in_flight_is_refused(edit):
    algo = small_parallel_league(opponents={"random_legal": "random_legal"}, matchmaking="uniform").build()
    try:
        for _ in range(2):
            algo.train()
        runner = algo.env_runner_group.local
        state = runner.get_state()
        seated = [i for i, env in enumerate(state["current_obs"]) if env["scripted_actions"]]
        assert seated  # seed 0: an env's opponent has its next action drawn
        edited = copy.deepcopy(state)
        entry = edited["current_obs"][seated[0]]
        agent = next(iter(entry["scripted_actions"]))
        if edit == "outside_the_space":
            entry["scripted_actions"][agent] = 3  # Discrete(3)
        elif edit == "missing":
            entry["scripted_actions"] = {}
        else:
            main_seat = next(a for a, pid in entry["agent_pids"].items() if pid == "main")
            entry["scripted_actions"][main_seat] = 0
        with pytest.raises(CheckpointFormatError, match="scripted_actions"):
            runner.set_state(edited)
        runner.set_state(state)  # the unedited state restores, and its games go on
        assert runner.get_state()["current_obs"][seated[0]]["scripted_actions"] == \
            state["current_obs"][seated[0]]["scripted_actions"]
        assert runner.sample(4)
    finally:
        algo.stop()
