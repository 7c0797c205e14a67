"""cairn evaluate and its Python twin, Algorithm.evaluate(num_episodes=..., seed=...)."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest

import cairn
from cairn.cli import main


def _json(capsys, argv):
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)


def test_evaluate_json_is_seeded_and_equals_the_python_twin(trained_run, capsys):
    ckpt = str(trained_run / "checkpoints" / "checkpoint_000003")
    first = _json(capsys, ["evaluate", ckpt, "--episodes", "4", "--seed", "11", "--json"])
    again = _json(capsys, ["evaluate", ckpt, "--episodes", "4", "--seed", "11", "--json"])
    other = _json(capsys, ["evaluate", ckpt, "--episodes", "4", "--seed", "12", "--json"])
    assert first == again and first["episode_returns"] != other["episode_returns"]
    algo = cairn.Algorithm.from_checkpoint(ckpt)
    try:
        twin = algo.evaluate(num_episodes=4, seed=11)
        own_before = algo.get_evaluation_runner_state()
        assert algo.evaluate(4, seed=11)["episode_returns"] == twin["episode_returns"]
        assert algo.get_evaluation_runner_state() == own_before  # a seeded call leaves the own runner alone
    finally:
        algo.stop()
    returns = np.array(twin["episode_returns"])
    assert first["num_episodes"] == 4 and first["episode_returns"] == twin["episode_returns"]
    assert first["episode_lens"] == twin["episode_lens"]
    for stat, fn in (("mean", np.mean), ("std", np.std), ("min", np.min), ("max", np.max)):
        assert first[f"episode_return_{stat}"] == pytest.approx(float(fn(returns)))
        assert first[f"episode_return_{stat}"] == twin[f"episode_return_{stat}"]
        assert first[f"episode_len_{stat}"] == pytest.approx(float(fn(np.array(twin["episode_lens"]))))


def test_evaluate_text_and_gif(trained_run, tmp_path, capsys):
    from PIL import Image

    ckpt = str(trained_run / "checkpoints" / "checkpoint_000003")
    gif = tmp_path / "episode.gif"
    assert main(["evaluate", ckpt, "--episodes", "2", "--seed", "4",
                 "--render", str(gif), "--fps", "20"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "checkpoint_000003 on CartPole-v1: 2 greedy episodes, seed 4"
    assert (lines[1].split()[:3] == ["return", "mean", lines[1].split()[2]]
            and "std" in lines[1] and "max" in lines[1])
    report = _json(capsys, ["evaluate", ckpt, "--episodes", "2", "--seed", "4", "--json"])
    length = report["episode_lens"][0]
    # the first episode of the report
    assert lines[3] == (f"  rendered one episode (return {report['episode_returns'][0]:.2f}, "
                        f"{length + 1} frames) to {gif}")
    with Image.open(gif) as image:
        assert image.size == (600, 400)
        durations = []
        for index in range(image.n_frames):  # identical consecutive frames are merged, durations summed
            image.seek(index)
            durations.append(image.info["duration"])
    assert sum(durations) == 50 * (length + 1)  # one 50 ms frame per step, plus the reset frame


def test_evaluate_refuses_bad_arguments(trained_run, capsys, ppo_algo, tmp_path):
    ckpt = str(trained_run / "checkpoints" / "checkpoint_000003")
    assert main(["evaluate", ckpt, "--render", str(tmp_path / "x.avi")]) == 2
    assert "expected a .gif or .mp4" in capsys.readouterr().err
    ppo_algo.export_policy_checkpoint(tmp_path / "policy")
    assert main(["evaluate", str(tmp_path / "policy")]) == 2
    assert "Policy checkpoint" in capsys.readouterr().err
    with pytest.raises(cairn.errors.ConfigError, match="num_episodes=0"):
        ppo_algo.evaluate(num_episodes=0)


def test_evaluate_mp4_has_every_frame(trained_run, tmp_path, capsys):
    import imageio.v2 as imageio

    ckpt = str(trained_run / "checkpoints" / "checkpoint_000003")
    report = _json(capsys, ["evaluate", ckpt, "--episodes", "1", "--seed", "2", "--json",
                            "--render", str(tmp_path / "e.mp4")])
    assert report["render"]["frames"] == report["episode_lens"][0] + 1
    with imageio.get_reader(tmp_path / "e.mp4") as reader:
        assert reader.count_frames() == report["render"]["frames"]


@pytest.mark.filterwarnings("ignore:.*CartPole-v0 is out of date")
def test_evaluate_on_another_env_with_the_same_spaces(trained_run, capsys):
    ckpt = str(trained_run / "checkpoints" / "checkpoint_000003")
    report = _json(capsys, ["evaluate", ckpt, "--env", "CartPole-v0",
                            "--episodes", "2", "--seed", "0", "--json"])
    assert report["env"] == "CartPole-v0" and report["num_episodes"] == 2
    assert max(report["episode_lens"]) <= 200  # CartPole-v0's time limit, not v1's 500


def test_evaluate_and_export_take_a_run_directory(trained_run, tmp_path, capsys):
    newest = str(trained_run / "checkpoints" / "checkpoint_000003")
    from_run = _json(capsys, ["evaluate", str(trained_run), "--episodes", "2", "--seed", "5", "--json"])
    direct = _json(capsys, ["evaluate", newest, "--episodes", "2", "--seed", "5", "--json"])
    assert from_run["checkpoint"] == newest
    folder = _json(capsys, ["evaluate", str(trained_run / "checkpoints"),
                            "--episodes", "2", "--seed", "5", "--json"])
    assert folder == from_run
    assert {**from_run, "checkpoint": None} == {**direct, "checkpoint": None}

    assert main(["export", str(trained_run), "--format", "torch", "--out", str(tmp_path / "model")]) == 0
    assert capsys.readouterr().out == (
        f"exported torch model of policy 'default_policy' from {newest} to {tmp_path / 'model'}\n")
    assert (tmp_path / "model").is_dir()

    empty = tmp_path / "empty_run"
    (empty / "checkpoints").mkdir(parents=True)
    for command in (["evaluate", str(empty)],
                    ["export", str(empty), "--format", "torch", "--out", str(tmp_path / "x")]):
        assert main(command) == 2
        err = capsys.readouterr().err
        assert (f"{empty} is a run directory with no committed checkpoint" in err
                and "--checkpoint-every" in err)
    assert not (tmp_path / "x").exists()


def test_evaluate_restores_a_checkpoint_without_its_replay_buffer_quietly(tmp_path, capsys):
    algo = (cairn.DQNConfig().environment("CartPole-v1").debugging(seed=0)
            .training(train_batch_size=64, minibatch_size=16, num_steps_sampled_before_learning_starts=32)
            .build())
    try:
        algo.train()
        ckpt = algo.save(tmp_path / "dqn")  # without store_replay_buffer: no buffer in it
    finally:
        algo.stop()
    with pytest.warns(cairn.errors.ReplayBufferNotRestoredWarning, match="no replay buffer"):
        cairn.Algorithm.from_checkpoint(ckpt).stop()  # a restore to train on says what it lost
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        report = _json(capsys, ["evaluate", str(ckpt), "--episodes", "1", "--seed", "0", "--json"])
    assert report["num_episodes"] == 1
    assert not [w for w in caught if issubclass(w.category, cairn.errors.ReplayBufferNotRestoredWarning)]


def test_evaluate_shows_each_episode_and_max_episode_steps_truncates(trained_run, capsys):
    """A long evaluation shows a line per episode on stderr (-q hides them), and
    --max-episode-steps ends every episode there: a greedy Atari policy that never serves
    otherwise plays 27,000 steps an episode in silence."""
    ckpt = str(trained_run / "checkpoints" / "checkpoint_000003")
    assert main(["evaluate", ckpt, "--episodes", "3", "--seed", "1", "--json"]) == 0
    captured = capsys.readouterr()
    full = json.loads(captured.out)  # stdout stays the report alone
    lines = captured.err.splitlines()
    assert [line.split(" | ")[0] for line in lines] == ["episode 1/3", "episode 2/3", "episode 3/3"]
    for line, ret, length in zip(lines, full["episode_returns"], full["episode_lens"]):
        assert f"| return {ret:10.2f} | length {length:7d} | " in line and "truncated" not in line

    cap = min(full["episode_lens"]) - 1
    assert main(["evaluate", ckpt, "--episodes", "3", "--seed", "1", "--json",
                 "--max-episode-steps", str(cap)]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["episode_lens"] == [cap] * 3
    assert all(line.endswith(f"| truncated at --max-episode-steps {cap}")
               for line in captured.err.splitlines())

    quiet = _json(capsys, ["evaluate", ckpt, "--episodes", "3", "--seed", "1", "--json", "-q"])
    assert quiet == full and capsys.readouterr().err == ""
    # Without --seed the checkpoint's own evaluation runner goes on, as Algorithm.evaluate() does.
    own = _json(capsys, ["evaluate", ckpt, "--episodes", "3", "--json", "-q"])
    algo = cairn.Algorithm.from_checkpoint(ckpt)
    try:
        twin = algo.evaluate(3)
    finally:
        algo.stop()
    assert own["episode_returns"] == twin["episode_returns"] and own["episode_lens"] == twin["episode_lens"]
    assert main(["evaluate", ckpt, "--max-episode-steps", "0"]) == 2
    assert "--max-episode-steps 0: expected at least 1" in capsys.readouterr().err


def test_evaluate_multi_agent_lines_and_truncation(tmp_path, capsys):
    from tests.helpers import small_ma_ppo

    algo = small_ma_ppo(2).build()
    try:
        ckpt = str(algo.save(tmp_path / "ma"))
    finally:
        algo.stop()
    assert main(["evaluate", ckpt, "--episodes", "2", "--seed", "0", "--json",
                 "--max-episode-steps", "5"]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["episode_lens"] == [5, 5]
    assert [line.split(" | ")[0] for line in captured.err.splitlines()] == ["episode 1/2", "episode 2/2"]


@pytest.fixture(scope="module")
def mujoco_run(tmp_path_factory):
    """A one-iteration PPO run on a real MuJoCo env (InvertedPendulum-v5)."""
    pytest.importorskip("mujoco")
    run = tmp_path_factory.mktemp("mujoco") / "run"
    assert main(["train", "--algo", "PPO", "--env", "InvertedPendulum-v5", "--stop-iters", "1", "--seed", "0",
                 "--config", "train_batch_size=64", "minibatch_size=32", "num_epochs=1",
                 "--out", str(run), "-q"]) == 0
    return run


def _evaluate_in_a_process(run, gif, **environ):
    """``cairn evaluate RUN --render GIF`` in a fresh process (MuJoCo reads MUJOCO_GL once, at
    its import) without a display, with ``environ`` set (None: unset)."""
    import os
    import subprocess
    import sys

    from tests.conftest import ROOT

    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY", "MUJOCO_GL",
                                                            "PYOPENGL_PLATFORM")}
    env.update({k: v for k, v in environ.items() if v is not None})
    return subprocess.run([sys.executable, "-m", "cairn", "evaluate", str(run),
                           "--episodes", "2", "--seed", "0", "--render", str(gif)],
                          capture_output=True, text=True, cwd=ROOT, env=env, timeout=300)


@pytest.mark.slow  # three fresh processes that import torch and MuJoCo
def test_headless_mujoco_rendering_names_the_backend_and_still_reports_the_returns(mujoco_run, tmp_path):
    """On a machine without a display: MUJOCO_GL unset (GLFW) cannot render; osmesa without
    libOSMesa cannot even import mujoco; egl renders where libEGL is. A renderer's failure is
    named with its fix, never blamed on the checkpoint, and the returns are still printed when
    only the recording failed (it raised a bare mujoco.FatalError, and osmesa 'the stored state
    does not fit the objects it describes (AttributeError: ... 'glGetError')')."""
    import ctypes.util

    for backend in (None, "osmesa", "egl"):
        gif = tmp_path / f"{backend}.gif"
        proc = _evaluate_in_a_process(mujoco_run, gif, MUJOCO_GL=backend)
        err = proc.stderr
        assert "does not fit" not in err and "Traceback" not in err and "FatalError:" not in err, err
        library = {"osmesa": "OSMesa", "egl": "EGL"}.get(backend or "")
        if library and ctypes.util.find_library(library):
            assert proc.returncode == 0 and gif.is_file(), err  # the backend is there: it renders
            continue
        assert proc.returncode == 1 and not gif.exists()
        progress = [line for line in err.splitlines() if line.startswith("episode ")]
        assert len(progress) == (2 if backend is None else 0)  # one per evaluated episode, before the failure
        (line,) = [line for line in err.strip().splitlines() if line not in progress]  # what failed, the fix
        assert "MUJOCO_GL=egl" in line and "MUJOCO_GL=osmesa" in line and "libosmesa6" in line
        if backend is None:  # only the recording failed: the evaluation's report is there
            assert (proc.stdout.splitlines()[0]
                    == "checkpoint_000001 on InvertedPendulum-v5: 2 greedy episodes, seed 0")
            assert "return  mean" in proc.stdout
            assert line.startswith(f"cairn: error: --render {gif}: MuJoCo could not open an OpenGL context: "
                                   "MUJOCO_GL is unset, so MuJoCo uses GLFW, which needs a display")
            assert line.endswith("The evaluation above is complete; only the recording failed.")
        else:  # no MuJoCo env can even be made: the setup is named, not the checkpoint
            assert line.startswith("cairn: error: Could not create environment 'InvertedPendulum-v5': MuJoCo "
                                   "could not load OSMesa, the OpenGL backend that MUJOCO_GL=osmesa asks for")


def test_render_plays_a_recurrent_policy_carrying_its_state():
    # A recurrent policy acts with a state: --render must carry it from step to step (a call
    # without one is refused), so the recorded episode is the policy's greedy episode.
    from cairn.cli.evaluate import render_episode
    from cairn.envs.memory import make_stateless_cartpole

    algo = (cairn.PPOConfig().environment(make_stateless_cartpole)
            .training(train_batch_size=64, minibatch_size=32, num_epochs=1,
                      model={"hidden": [8], "use_lstm": True, "lstm_cell_size": 8, "max_seq_len": 8})
            .debugging(seed=0).build())
    try:
        frames, total, length = render_episode(algo, seed=0, max_steps=6)
        assert len(frames) == length + 1 and length == int(total) == 6
        policy, env = algo.get_policy(), make_stateless_cartpole({})
        obs, _ = env.reset(seed=0)
        state, actions = policy.get_initial_state(), []
        for _ in range(6):
            action, state = policy.compute_single_action(obs, explore=False, state=state)
            actions.append(int(action))
            obs, *_ = env.step(action)
        env_r = make_stateless_cartpole({"render_mode": "rgb_array"})  # the same greedy episode
        env_r.reset(seed=0)
        for action, frame in zip(actions, frames[1:]):
            env_r.step(action)
            np.testing.assert_array_equal(env_r.render(), frame)
    finally:
        algo.stop()
