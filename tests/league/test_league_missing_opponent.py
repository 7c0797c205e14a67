"""A league checkpoint whose scripted fixed opponent's module is not importable where it is read
(a module of the training script's, a project not installed here): what loads without the
opponent's code (main's policy, the ratings table, games against another opponent), and what
refuses with an error naming the opponent and the fixes (a restore that would train against it).
Each case runs in a fresh process in which the module does not exist."""

import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

from cairn import Algorithm, Policy
from cairn.env_runner.make_env import make_env
from cairn.env_runner.scripted_opponents import resolve_opponent
from cairn.league.games import play_games
from tests.conftest import ROOT
from tests.league.games import small_league

MODULE = "cairn_test_gone_opponent"
SPEC = f"{MODULE}:leftmost"


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    """A league checkpoint with the fixed opponents ``"f"`` (``SPEC``, importable only while it
    trained) and ``"random_legal"``, both played in training."""
    root = tmp_path_factory.mktemp("gone_opponent")
    (root / "mods").mkdir()
    (root / "mods" / f"{MODULE}.py").write_text(
        "import numpy as np\n\n\ndef leftmost(observation, action_mask, rng):\n"
        "    return int(np.flatnonzero(action_mask)[0])\n")
    sys.path.insert(0, str(root / "mods"))
    try:
        algo = small_league(opponents={"f": SPEC, "random_legal": "random_legal"},
                            matchmaking="uniform", self_play_fraction=0.0).build()
        for _ in range(2):
            algo.train()
        assert algo.league.get_state()["payoff"]["table"]["f"], "the opponent was never played"
        path = str(algo.save(root / "ckpt"))
        algo.stop()
    finally:
        sys.path.remove(str(root / "mods"))
        sys.modules.pop(MODULE, None)
    return path


def _python(code: str) -> subprocess.CompletedProcess[str]:
    """``code`` in a fresh interpreter whose sys.path lacks the opponent's module."""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=300,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert "ModuleNotFoundError" not in out.stdout
    return out


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return _python(f"import sys; from cairn.cli.app import main; sys.exit(main({list(args)!r}))")


def test_the_module_is_missing_in_the_fresh_process(checkpoint):
    out = _python(f"import importlib.util; print(importlib.util.find_spec({MODULE!r}))")
    assert out.returncode == 0 and out.stdout.strip() == "None"


def test_mains_policy_loads_without_the_opponents_code(checkpoint):
    code = ("from cairn import Policy\nimport json\n"
            f"p = Policy.from_checkpoint({checkpoint + '/policies/main'!r})\n"
            "print(json.dumps({k: v.tolist() for k, v in p.get_weights().items()}))")
    out = _python(code)
    assert out.returncode == 0, out.stderr

    expected = Policy.from_checkpoint(f"{checkpoint}/policies/main").get_weights()
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert sorted(got) == sorted(expected)
    for key, value in expected.items():
        np.testing.assert_array_equal(np.asarray(got[key], dtype=value.dtype), value)


def test_the_league_table_needs_no_opponents_code(checkpoint):
    out = _cli("league", checkpoint, "--json")
    assert out.returncode == 0, out.stderr
    table = json.loads(out.stdout)
    assert {"main", "f", "random_legal"} <= set(table["ratings"])
    assert sum(table["payoff"]["f"][k] for k in ("wins", "draws", "losses")) > 0


def test_evaluate_against_random_legal_plays_main_without_the_fixed_opponents(checkpoint, tmp_path):
    out = _cli("evaluate", checkpoint, "--opponent", "random_legal", "--games", "6", "--seed", "3", "--json")
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    # The same games played here, where the module exists and the whole league is restored.
    sys.path.insert(0, str(tmp_path))
    (tmp_path / f"{MODULE}.py").write_text("def leftmost(observation, action_mask, rng):\n    return 0\n")
    try:
        algo = Algorithm.from_checkpoint(checkpoint, config_overrides={"num_env_runners": 0,
                                                                       "num_envs_per_env_runner": 1})
        assert algo.league.fixed_names == ["f", "random_legal"]
        expected = play_games(lambda: make_env(algo.config), algo.get_policy("main"),
                              resolve_opponent("random_legal"), games=6, seed=3).to_dict()
        algo.stop()
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop(MODULE, None)
    assert {k: report[k] for k in expected} == expected
    assert report["policy_id"] == "main" and report["opponent"] == "random_legal"


def test_a_restore_that_would_play_the_opponent_names_it_and_the_fixes(checkpoint):
    code = f"""
import json
import os
import shutil
from cairn import Algorithm, Policy
from cairn.errors import CheckpointConfigError
messages = []
for kwargs in ({{}}, {{"policy_ids": ["main"]}}):
    try:
        Algorithm.from_checkpoint({checkpoint!r}, **kwargs)
    except CheckpointConfigError as exc:
        messages.append(str(exc))
# The fix the message spells out, after the refused restores: the league without "f".
fix = messages[0].split("config_overrides=", 1)[1].split(") (its games", 1)[0]
import ast
algo = Algorithm.from_checkpoint({checkpoint!r}, config_overrides=ast.literal_eval(fix))
algo.train()
league = algo.league
print(json.dumps({{"messages": messages, "fixed": league.fixed_names,
                  "rated": sorted(league.ratings.get_state()), "payoff": sorted(league.payoff.win_rates())}}))
"""
    out = _python(code)
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert len(result["messages"]) == 2  # the whole algorithm, and main's subset: both play the league
    for message in result["messages"]:
        assert "fixed opponent 'f'" in message and repr(SPEC) in message
        assert f"No module named {MODULE!r}" in message
        assert "config_overrides=" in message and "Policy.from_checkpoint(" in message
    assert result["fixed"] == ["random_legal"]
    assert "f" not in result["rated"] and "f" not in result["payoff"] and "main" in result["rated"]


def test_evaluation_episodes_need_no_fixed_opponent(checkpoint, tmp_path):
    out = _cli("evaluate", checkpoint, "--episodes", "2", "--seed", "5", "--json", "-q")
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    # Algorithm.evaluate's episodes, here, where the module exists and the whole league is restored.
    sys.path.insert(0, str(tmp_path))
    (tmp_path / f"{MODULE}.py").write_text("def leftmost(observation, action_mask, rng):\n    return 0\n")
    try:
        algo = Algorithm.from_checkpoint(checkpoint, config_overrides={"num_env_runners": 0,
                                                                       "num_envs_per_env_runner": 1})
        assert algo.league.fixed_names == ["f", "random_legal"]
        expected = algo.evaluate(2, seed=5)
        algo.stop()
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop(MODULE, None)
    assert report["episode_returns"] == expected["episode_returns"]
    assert report["episode_lens"] == expected["episode_lens"]


def test_the_command_lines_fix_for_a_restore_that_needs_the_opponent_is_import(checkpoint):
    code = f"""
from cairn import Algorithm
from cairn.cli.env_names import restore_hint
try:
    Algorithm.from_checkpoint({checkpoint!r})
except Exception as exc:
    print(type(exc).__name__, restore_hint(exc))
"""
    out = _python(code)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == (
        f"CheckpointConfigError From the command line: --import {MODULE} (run in the directory that holds "
        f"{MODULE}, or install it).")


def test_an_opponent_inside_the_checkpoint_is_never_imported_nor_suggested(checkpoint, tmp_path, monkeypatch):
    """A checkpoint whose fixed opponent names a module shipped inside it: games against
    random_legal never import it, a restore that needs it is refused, and the command line's
    fix is never ``--import`` of it (run as the ``cairn`` script: the working directory, which
    holds the checkpoint, is not on sys.path)."""
    from cairn.cli.app import main
    from cairn.cli.env_names import restore_hint
    from cairn.errors import CheckpointError
    from tests.checkpoint.attacks import edit_json
    from tests.checkpoint.attacks.inside import ASTATE, write_payload

    canary = tmp_path / "canary"
    monkeypatch.setenv("CAIRN_CANARY", str(canary))
    name = "victimleague"
    root = tmp_path / name
    shutil.copytree(checkpoint, root)
    write_payload(root)

    def point_at_payload(state):
        state["config"]["league_config"]["opponents"]["f"] = f"{name}.payload:leftmost"

    edit_json(root, ASTATE, point_at_payload)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    monkeypatch.chdir(tmp_path)
    with pytest.raises(CheckpointError) as info:
        Algorithm.from_checkpoint(root)
    hint = restore_hint(info.value) or ""
    assert f"--import {name}" not in hint and "hostile" in hint, hint
    assert main(["evaluate", str(root), "--opponent", "random_legal", "--games", "2", "--json"]) == 0
    assert not canary.exists() and f"{name}.payload" not in sys.modules
