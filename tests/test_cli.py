import subprocess
import sys

import cairn
from cairn.cli import main
from tests.conftest import ROOT


def test_train_prints_progress_and_saves(tmp_path, capsys):
    out = tmp_path / "ckpt"
    code = main(["train", "--algo", "PPO", "--env", "CartPole-v1", "--stop-iters", "2",
                 "--config", "train_batch_size=64", "minibatch_size=32", "num_epochs=1",
                 "observation_filter=MeanStdFilter", "--out", str(out)])
    assert code == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("iter")]
    assert len(lines) == 2
    info = cairn.get_checkpoint_info(out)
    assert info["type"] == "Algorithm"
    restored = cairn.Algorithm.from_checkpoint(out)
    assert restored.config.observation_filter == "MeanStdFilter" and restored.iteration == 2


def test_stop_timesteps(tmp_path, capsys):
    assert main(["train", "--algo", "PPO", "--env", "CartPole-v1", "--stop-timesteps", "100",
                 "--config", "train_batch_size=64", "minibatch_size=32", "--out", str(tmp_path / "c")]) == 0
    assert sum(line.startswith("iter") for line in capsys.readouterr().out.splitlines()) == 2


def test_bad_arguments_exit_2():
    for args in (["train", "--env", "CartPole-v1"], ["train", "--algo", "PPO", "--env", "CartPole-v1", "--stop-iters", "x"],
                 ["frobnicate"], ["train", "--algo", "Nope", "--env", "CartPole-v1"]):
        proc = subprocess.run([sys.executable, "-m", "cairn", *args], capture_output=True, text=True, cwd=ROOT)
        assert proc.returncode == 2, (args, proc.stderr)
        assert "usage" in proc.stderr or "unknown --algo" in proc.stderr


def test_bad_config_is_a_clear_error(capsys):
    assert main(["train", "--algo", "PPO", "--env", "CartPole-v1", "--config", "lr=-1"]) == 1
    assert "'lr'=-1" in capsys.readouterr().err


def test_info(tmp_path, capsys, ppo_algo):
    path = ppo_algo.save(tmp_path / "c")
    assert main(["info", path]) == 0
    assert '"checkpoint_version": "1"' in capsys.readouterr().out
