"""What --env and --import take: Gymnasium IDs (ALE/... too), creators by import path,
Gymnasium's module:EnvId, cairn.register_env names from a user's module, PettingZoo env modules."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import cairn
from cairn.cli import main
from tests.cli.conftest import SMALL

MODULE = "cairn_cli_user_envs"
USER_ENVS = '''
import gymnasium as gym
import cairn


def make_env(env_config):
    return gym.make("CartPole-v1", **env_config)


cairn.register_env("cli_user_cartpole", lambda env_config: gym.make("CartPole-v1", **env_config))
if "CliUserCartPole-v0" not in gym.envs.registry:
    gym.register("CliUserCartPole-v0", entry_point="gymnasium.envs.classic_control.cartpole:CartPoleEnv",
                 max_episode_steps=50)
'''


def _train(out: Path, *args: str) -> int:
    return main(["train", "--algo", "PPO", *SMALL, "--stop-iters", "1", "--seed", "0",
                 "--out", str(out), "-q", *args])


def _stored_env(run: Path) -> object:
    return json.loads((run / "config.json").read_text())["env"]


def test_env_takes_every_form_and_import_runs_the_users_module(tmp_path, monkeypatch, capsys):
    (tmp_path / f"{MODULE}.py").write_text(USER_ENVS)
    monkeypatch.chdir(tmp_path)  # the user's module lies in the working directory, as a script would
    monkeypatch.delitem(sys.modules, MODULE, raising=False)
    path_before = list(sys.path)

    # A register_env name exists only once the module that registers it has run: --import.
    assert _train(tmp_path / "named", "--env", "cli_user_cartpole") == 2
    assert "--import MODULE" in capsys.readouterr().err
    assert _train(tmp_path / "named", "--env", "cli_user_cartpole", "--import", MODULE) == 0
    assert _stored_env(tmp_path / "named") == "cli_user_cartpole"

    # An import path to a creator function: stored by reference, as config.environment(fn) does.
    assert _train(tmp_path / "creator", "--env", f"{MODULE}:make_env") == 0
    assert _stored_env(tmp_path / "creator")["__callable__"] == f"{MODULE}:make_env"
    # Gymnasium's module:EnvId: the module registers the ID; the checkpoint keeps the bare ID,
    # since a checkpoint never imports modules for environments.
    assert _train(tmp_path / "gym_module", "--env", f"{MODULE}:CliUserCartPole-v0") == 0
    assert _stored_env(tmp_path / "gym_module") == "CliUserCartPole-v0"
    for wrong, said in ((f"{MODULE}:nothing", "has no function 'nothing'"), (f"{MODULE}:gym", "is a module"),
                        ("no_such_module_here:make_env", "cannot import 'no_such_module_here'")):
        assert _train(tmp_path / "wrong", "--env", wrong) == 2
        assert said in capsys.readouterr().err
    # PettingZoo's own envs by module: make_pettingzoo_env, the module in env_config.
    assert _train(tmp_path / "rps", "--env", "pettingzoo.classic.rps_v2", "--config", "env_config={}") == 0
    stored = json.loads((tmp_path / "rps" / "config.json").read_text())
    assert stored["env"]["__callable__"] == "cairn.envs.pettingzoo_env:make_pettingzoo_env"
    assert stored["env_config"] == {"env_module": "pettingzoo.classic.rps_v2"}
    capsys.readouterr()

    for run in ("named", "creator", "gym_module", "rps"):
        assert main(["evaluate", str(tmp_path / run), "--episodes", "1", "--seed", "0", "--json", "-q",
                     "--import", MODULE]) == 0
        report = json.loads(capsys.readouterr().out)
        assert report["num_episodes"] == 1
    assert report["env"] == "pettingzoo.classic.rps_v2 (make_pettingzoo_env)"
    assert sys.path == path_before  # the working directory was on it only while importing


def test_evaluate_gives_a_checkpoint_the_creator_it_could_not_store(tmp_path, monkeypatch, capsys):
    (tmp_path / f"{MODULE}.py").write_text(USER_ENVS)
    monkeypatch.chdir(tmp_path)
    import gymnasium as gym

    algo = (cairn.PPOConfig().environment(lambda env_config: gym.make("CartPole-v1"))
            .training(train_batch_size=64, minibatch_size=32, num_epochs=1).build())
    try:
        with pytest.warns(UserWarning, match="no import path"):
            ckpt = str(algo.save(tmp_path / "lambda"))
    finally:
        algo.stop()
    assert main(["evaluate", ckpt, "--episodes", "1", "-q"]) == 1
    assert "From the command line: --env ENV gives the environment" in capsys.readouterr().err
    assert main(["evaluate", ckpt, "--episodes", "1", "-q", "--env", f"{MODULE}:make_env"]) == 0
    assert "1 greedy episode" in capsys.readouterr().out


@pytest.mark.slow  # fresh processes: import torch, ALE, then a CNN's first iteration
def test_ale_ids_and_a_users_module_from_the_cairn_script(tmp_path):
    """``--env ALE/Breakout-v5`` was 'Unknown environment' (nothing imported ale_py); and the
    ``cairn`` script, unlike ``python -m``, has no working directory on sys.path (``-I``)."""
    pytest.importorskip("ale_py")
    (tmp_path / f"{MODULE}.py").write_text(USER_ENVS)

    def cairn_script(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-I", "-m", "cairn", *args], capture_output=True, text=True,
                              cwd=tmp_path, timeout=600)

    train = cairn_script("train", "--algo", "PPO", "--env", "ALE/Breakout-v5", "--stop-iters", "1",
                         "--out", "ale",
                         "--config", "train_batch_size=32", "minibatch_size=32", "num_epochs=1", "-q")
    assert train.returncode == 0, train.stderr
    assert json.loads((tmp_path / "ale" / "config.json").read_text())["env"] == "ALE/Breakout-v5"
    evaluate = cairn_script("evaluate", "ale", "--episodes", "1", "--seed", "0",
                            "--max-episode-steps", "20", "--json")
    assert evaluate.returncode == 0, evaluate.stderr
    assert json.loads(evaluate.stdout)["episode_lens"] == [20]

    named = cairn_script("train", "--algo", "PPO", "--env", "cli_user_cartpole", "--import", MODULE,
                         "--out", "named", "--stop-iters", "1", *SMALL, "-q")
    assert named.returncode == 0, named.stderr
    lost = cairn_script("evaluate", "named", "--episodes", "1", "-q")  # a fresh process without the module
    assert lost.returncode == 1 and "From the command line: --import MODULE" in lost.stderr, lost.stderr
    found = cairn_script("evaluate", "named", "--episodes", "1", "-q", "--import", MODULE)
    assert found.returncode == 0 and "1 greedy episode" in found.stdout, found.stderr


def test_a_turn_based_pettingzoo_game_trains_and_evaluates_from_the_command_line(tmp_path, capsys):
    # connect_four_v3 has no parallel_env(): its AEC env() runs in the turn-based runner, self-play
    # with the one default policy, its action mask honoured.
    game = "pettingzoo.classic.connect_four_v3"
    assert _train(tmp_path / "c4", "--env", game, "--config", "env_config={}") == 0
    stored = json.loads((tmp_path / "c4" / "config.json").read_text())
    assert stored["env_config"] == {"env_module": "pettingzoo.classic.connect_four_v3"}
    capsys.readouterr()
    assert main(["evaluate", str(tmp_path / "c4"), "--episodes", "2", "--seed", "0", "--json", "-q",
                 "--max-episode-steps", "6"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["num_episodes"] == 2 and report["episode_len_max"] <= 6
