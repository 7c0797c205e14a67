"""Exit statuses, one-line failures, and the cairn logger."""

from __future__ import annotations

import subprocess
import sys

import pytest

import cairn
from cairn.cli import main
from tests.conftest import ROOT


def _cairn(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "cairn", *args], capture_output=True, text=True, cwd=ROOT,
                          timeout=120)


def test_failure_is_one_line_and_exit_1_and_debug_shows_the_traceback(tmp_path, capsys):
    missing = str(tmp_path / "nothing-here")
    proc = _cairn("evaluate", missing)  # the real process: its exit status and stderr
    assert proc.returncode == 1 and proc.stdout == ""
    assert len(proc.stderr.strip().splitlines()) == 1 and proc.stderr.startswith("cairn: error: ")
    assert missing in proc.stderr and "Traceback" not in proc.stderr
    for flag in ("--debug", "-v"):
        assert main(["evaluate", missing, flag]) == 1
        err = capsys.readouterr().err
        assert "Traceback" in err and err.strip().splitlines()[-1].startswith("cairn: error: ")


def test_usage_errors_exit_2_with_argparse_message(capsys):
    with pytest.raises(SystemExit) as exited:
        main(["checkpoint", "frobnicate"])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: cairn checkpoint") and "invalid choice: 'frobnicate'" in err


def test_usage_errors_found_after_parsing(tmp_path, capsys, trained_run):
    assert main(["train", "--resume", str(trained_run), "--algo", "PPO"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: cairn train") and "cairn train: error: --resume continues a run" in err
    assert main(["train", "--resume", str(tmp_path)]) == 2
    assert "no checkpoint in" in capsys.readouterr().err
    assert main(["train", "--algo", "PPO", "--env", "CartPole-v1", "--keep", "-1"]) == 2
    assert "--keep -1" in capsys.readouterr().err


def test_library_is_quiet_and_verbose_shows_the_cairn_logger(trained_run, tmp_path, capsys):
    import logging
    import shutil

    # A NullHandler: without logging configured, Python's last-resort handler stays silent.
    assert any(isinstance(h, logging.NullHandler) for h in logging.getLogger("cairn").handlers)
    run = tmp_path / "run"
    shutil.copytree(trained_run, run)
    assert main(["-v", "train", "--resume", str(run), "--stop-iters", "4", "-q"]) == 0
    err = capsys.readouterr().err
    assert f"cairn: resuming {run} from {run / 'checkpoints' / 'checkpoint_000003'} (iteration 3)" in err
    assert main(["train", "--resume", str(run), "--stop-iters", "5", "-q"]) == 0
    assert capsys.readouterr().err == ""
    assert logging.getLogger("cairn").level == logging.NOTSET  # main() leaves logging as it found it


def test_unknown_algo_names_every_registered_algorithm(capsys):
    assert main(["train", "--algo", "PP0", "--env", "CartPole-v1"]) == 2
    err = capsys.readouterr().err
    # The list comes from the registry: SAC too (it once said "try PPO or DQN").
    assert ("unknown --algo 'PP0'; the registered algorithms are APPO, DQN, IMPALA, PPO, SAC, TD3. "
            "Did you mean 'PPO'?") in err


@pytest.mark.parametrize(
    "args", [["checkpoint", "diff", "{ckpt}", "{ckpt}"], ["checkpoint", "info", "{ckpt}"]])
def test_a_closed_stdout_ends_the_command_quietly(args):
    """``cairn checkpoint diff A B | head``: once the reader has gone, cairn stops without a
    'BrokenPipeError' line and with the status a SIGPIPE gives in a shell (128 + 13)."""
    import os

    ckpt = str(ROOT / "tests" / "fixtures" / "checkpoints" / "1" / "ppo_single")
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader is gone before cairn writes: every write fails with EPIPE
    try:
        proc = subprocess.run([sys.executable, "-m", "cairn", *(a.format(ckpt=ckpt) for a in args)],
                              stdout=write_end, stderr=subprocess.PIPE, text=True, cwd=ROOT, timeout=120)
    finally:
        os.close(write_end)
    assert proc.stderr == "" and proc.returncode == 141, proc.stderr


def test_a_command_without_stdout_at_all_still_runs():
    """``cairn ... >&-``: Python then has no sys.stdout; the flush that makes a closed pipe show
    inside main() must not turn that into an AttributeError."""
    ckpt = str(ROOT / "tests" / "fixtures" / "checkpoints" / "1" / "policy")
    proc = subprocess.run([sys.executable, "-m", "cairn", "checkpoint", "info", ckpt],
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=ROOT, timeout=120,
                          preexec_fn=lambda: __import__("os").close(1))
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr


@pytest.mark.parametrize("reward", ["nan", "inf", "-inf"])
def test_a_stop_reward_that_is_not_finite_is_refused(tmp_path, capsys, reward):
    """--stop-reward nan was accepted and never met (NaN >= anything is False), so the run
    trained on as if no reward criterion had been given (alone, for ever); -inf was met by the
    first episode."""
    out = tmp_path / "run"
    assert main(["train", "--algo", "PPO", "--env", "CartPole-v1", f"--stop-reward={reward}",
                 "--stop-iters", "1", "--out", str(out), "-q"]) == 2
    assert f"cairn: error: --stop-reward {float(reward)}: expected a finite number" in capsys.readouterr().err
    assert not out.exists()


@pytest.mark.parametrize("setting, message", [
    # Kept as the strings 'True' and '.001', these were refused later as "'normalize_advantages'=
    # 'True' is invalid: expected True or False": the value the user gave, named as the fix.
    ("normalize_advantages=True", "--config normalize_advantages=True: values are JSON; write "
                                  "normalize_advantages=true."),
    ("log_dir=None", "--config log_dir=None: values are JSON; write log_dir=null."),
    ("lr=.001", "--config lr=.001: values are JSON; write lr=0.001."),
    # Taken for a file name: "cannot read it (No such file or directory)".
    ("model.hidden=[8]", """--config model.hidden=[8]: nested keys are not supported; give the dict: """
                         """model='{"hidden": [8]}'."""),
    ("a.b.c=1", """--config a.b.c=1: nested keys are not supported; give the dict: a='{"b": {"c": 1}}'."""),
])
def test_config_settings_in_python_spelling_or_with_nested_keys_name_the_fix(tmp_path, capsys, setting,
                                                                              message):
    run = tmp_path / "run"
    assert main(["train", "--algo", "PPO", "--env", "CartPole-v1", "--config", setting, "--out", str(run),
                 "-q"]) == 2
    error = capsys.readouterr().err
    assert error == f"cairn: error: {message}\n" and not run.exists()


def test_a_negative_seed_is_refused_as_the_flag_given(trained_run, tmp_path, capsys):
    """--seed -1 failed later, after the restore (evaluate) or the config's build (train), with
    exit status 1 and "Config 'seed'=-1 is invalid", which names no flag of the command line."""
    ckpt = str(trained_run / "checkpoints" / "checkpoint_000003")
    out = tmp_path / "run"
    for command in (["evaluate", ckpt, "--episodes", "1", "--seed", "-1"],
                    ["train", "--algo", "PPO", "--env", "CartPole-v1", "--seed", "-1", "--stop-iters", "1",
                     "--out", str(out), "-q"]):
        assert main(command) == 2
        assert capsys.readouterr().err == "cairn: error: --seed -1: expected an int of at least 0.\n"
    assert not out.exists()


def test_algo_that_contradicts_the_config_file_names_both_and_the_fix(tmp_path, capsys):
    """--algo PPO with a DQN run's config.json failed with "Unknown config key 'double_q'" and a
    list of PPO's keys: it said neither that the file is a DQN config nor what to do."""
    import json

    file = tmp_path / "config.json"
    file.write_text(json.dumps(cairn.DQNConfig().environment("CartPole-v1").to_dict()))
    out = tmp_path / "run"
    assert main(["train", "--algo", "PPO", "--config", str(file), "--out", str(out), "-q"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"cairn: error: --config {file} is a DQN config (algo_class 'DQN'), and --algo "
                          "PPO takes no 'double_q'") and "leave out --algo" in err and err.count("\n") == 1
    assert not out.exists()


def test_league_with_a_mapping_of_the_users_names_the_command_line_fix(tmp_path, capsys):
    """--league with --config policy_mapping_fn=... failed with exit status 1 and the library's
    fix in Python ("multi_agent(policy_mapping_fn=None) or drop config.league()"), which a user
    of the command line cannot type."""
    out = tmp_path / "run"
    mapping = 'policy_mapping_fn={"player_0": "main", "player_1": "main"}'
    assert main(["train", "--algo", "PPO", "--env", "pettingzoo.classic.connect_four_v3", "--league",
                 "--config", mapping, "--out", str(out), "-q"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("cairn: error: --league with --config policy_mapping_fn=") and err.count("\n") == 1
    assert "leave out --league or the --config policy_mapping_fn setting" in err
    assert not out.exists()
    assert main(["train", "--algo", "PPO", "--env", "pettingzoo.classic.connect_four_v3", "--league",
                 "--config", 'policies={"a": {}, "b": {}}', "--out", str(out), "-q"]) == 2
    assert capsys.readouterr().err == (
        "cairn: error: --league trains the policy 'main', which --config policies=[\"a\", \"b\"] leaves out; "
        "leave out the policies setting or --league, or name 'main' among the policies.\n")
    assert not out.exists()
