"""``cairn evaluate CKPT --opponent ... --games N``: wins, draws and losses of a checkpoint's
policy against random_legal, a scripted opponent or another of its policies, through the real
command line; equal to ``play_games`` on the restored policy; bad opponents and one-player envs
refused with the fix."""

from __future__ import annotations

import json

import pytest
from pettingzoo.utils.env_logger import EnvLogger

import cairn
from cairn.cli import main
from cairn.env_runner.make_env import make_env
from cairn.env_runner.scripted_opponents import random_legal
from cairn.envs import connect_four_heuristic
from cairn.envs.pettingzoo_env import make_pettingzoo_env
from cairn.league.games import play_games

CONNECT_FOUR = {"env_module": "pettingzoo.classic.connect_four_v3"}


@pytest.fixture(autouse=True)
def _quiet_illegal_moves():
    EnvLogger.suppress_output()
    yield
    EnvLogger.unsuppress_output()


@pytest.fixture(scope="module")
def league_checkpoint(tmp_path_factory):
    """Connect four, "main" (player_0) against "past" (player_1): one tiny PPO iteration."""
    algo = (cairn.PPOConfig().environment(make_pettingzoo_env, env_config=CONNECT_FOUR)
            .training(train_batch_size=64, minibatch_size=32, num_epochs=1, model={"hidden": [16]})
            .multi_agent(policies={"main", "past"},
                         policy_mapping_fn={"player_0": "main", "player_1": "past"})
            .debugging(seed=0).build())
    try:
        algo.train()
        return str(algo.save(tmp_path_factory.mktemp("league") / "ckpt"))
    finally:
        algo.stop()


def _json(capsys, argv):
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)


def _played(checkpoint, main_id, opponent, games, seed):
    algo = cairn.Algorithm.from_checkpoint(checkpoint)
    try:
        other = algo.get_policy(opponent) if isinstance(opponent, str) else opponent
        return play_games(lambda: make_env(algo.config), algo.get_policy(main_id), other,
                          games=games, seed=seed).to_dict()
    finally:
        algo.stop()


def test_wins_draws_losses_against_random_legal_equal_play_games(league_checkpoint, capsys):
    report = _json(capsys, ["evaluate", league_checkpoint, "--opponent", "random_legal", "--games", "10",
                            "--seed", "3", "--json", "-q"])
    expected = _played(league_checkpoint, "main", random_legal, 10, 3)
    assert {k: report[k] for k in expected} == expected
    assert report["policy_id"] == "main" and report["opponent"] == "random_legal" and report["seed"] == 3
    assert report["wins"] + report["draws"] + report["losses"] == 10 and report["illegal_moves"] == 0
    argv = ["evaluate", league_checkpoint, "--opponent", "random_legal", "--games", "10", "--seed", "3"]
    assert main(argv) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == ("ckpt on pettingzoo.classic.connect_four_v3 (make_pettingzoo_env): main against "
                        "random_legal, 10 greedy games, seed 3")
    assert lines[1].split() == ["wins", str(report["wins"]), f"({report['win_rate']:.1%})",
                                "draws", str(report["draws"]), f"({report['draw_rate']:.1%})",
                                "losses", str(report["losses"]), f"({report['loss_rate']:.1%})"]
    assert lines[2] == "  illegal moves: main 0, random_legal 0"


def test_a_scripted_opponent_and_another_policy_of_the_checkpoint(league_checkpoint, capsys):
    heuristic = "cairn.envs.connect_four:connect_four_heuristic"
    report = _json(capsys, ["evaluate", league_checkpoint, "--opponent", heuristic, "--games", "6", "--json"])
    assert report["seed"] == 0  # without --seed the games are still seeded: equal runs, equal numbers
    expected = _played(league_checkpoint, "main", connect_four_heuristic, 6, 0)
    assert {k: report[k] for k in expected} == expected
    report = _json(capsys, ["evaluate", league_checkpoint, "--opponent", "main", "--policy-id", "past",
                            "--games", "4", "--json"])
    expected = _played(league_checkpoint, "past", "main", 4, 0)
    assert {k: report[k] for k in expected} == expected and report["policy_id"] == "past"


@pytest.mark.parametrize("argv, message", [
    (["--opponent", "randm_legal"],
     "--opponent randm_legal: not a policy of the checkpoint (['main', 'past']), and Unknown opponent "
     "'randm_legal': expected 'random_legal' or 'package.module:function_or_class'"),
    (["--opponent", "cairn_no_such_module:play"], "No module named 'cairn_no_such_module'. Fix:"),
    (["--opponent", "random_legal", "--policy-id", "nobody"],
     "--policy-id nobody: the checkpoint has no such policy; its policies: ['main', 'past']"),
    (["--opponent", "random_legal", "--games", "0"], "--games 0: expected at least 1"),
    (["--opponent", "random_legal", "--episodes", "3"], "--episodes cannot go with --opponent"),
    (["--games", "3"], "--games goes with --opponent"),
    (["--opponent", "random_legl"], "Did you mean 'random_legal'?"),
    (["--opponent", "pats"], "Did you mean the checkpoint's policy 'past'?"),
])
def test_bad_arguments_are_refused_with_the_fix(league_checkpoint, capsys, argv, message):
    assert main(["evaluate", league_checkpoint, *argv]) == 2
    err = capsys.readouterr().err
    assert message in err, err


def test_a_scripted_move_outside_the_space_names_the_opponents_spec(league_checkpoint, capsys):
    spec = "tests.league.games:plays_outside_the_space"
    assert main(["evaluate", league_checkpoint, "--opponent", spec, "--games", "2"]) != 0
    err = capsys.readouterr().err
    assert f"--opponent {spec} played 99, outside the action space Discrete(7)" in err, err


def test_a_one_player_env_is_refused(trained_run, capsys):
    ckpt = str(trained_run / "checkpoints" / "checkpoint_000003")
    assert main(["evaluate", ckpt, "--opponent", "random_legal", "--games", "2"]) == 2
    err = capsys.readouterr().err
    assert ("--opponent plays two-player games, and Games against an opponent need a two-player PettingZoo "
            "game; CartPole-v1 has one player (a single-agent env).") in err
    assert "Leave out --opponent and --games to play its episodes." in err


def test_repeated_games_are_reported_with_the_number_of_distinct_ones(league_checkpoint, capsys):
    # Before, two greedy policies on connect four played one game per seat, 3 times each, and
    # the report read like 6 sampled games (rates of 0/50/100%) with nothing saying so.
    argv = ["evaluate", league_checkpoint, "--opponent", "past", "--games", "6"]
    assert main(argv) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[3].startswith("  note: only 2 distinct games among the 6 played"), lines
    assert "--opponent random_legal" in lines[3]  # the fix: an opponent whose games differ
    report = _json(capsys, [*argv, "--json"])
    assert report["distinct_games"] == 2 and report["games"] == 6
    # Games that all differ get no note.
    assert main(["evaluate", league_checkpoint, "--opponent", "random_legal", "--games", "6"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 3 and not any("distinct" in line for line in lines)
