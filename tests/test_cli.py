import json
import re
import select
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

import cairn
from cairn.cli import main
from tests.conftest import ROOT


def test_train_prints_progress_and_saves(tmp_path, capsys):
    out = tmp_path / "run"
    code = main(["train", "--algo", "PPO", "--env", "CartPole-v1", "--stop-iters", "2",
                 "--config", "train_batch_size=64", "minibatch_size=32", "num_epochs=1",
                 "observation_filter=MeanStdFilter", "--out", str(out)])
    assert code == 0
    printed = capsys.readouterr().out.splitlines()
    lines = [line for line in printed if line.startswith("iter")]
    assert len(lines) == 2
    out = out / "checkpoints" / "checkpoint_000002"
    assert printed[-1] == f"checkpoint: {out}"
    info = cairn.get_checkpoint_info(out)
    assert info["type"] == "Algorithm"
    restored = cairn.Algorithm.from_checkpoint(out)
    assert restored.config.observation_filter == "MeanStdFilter" and restored.iteration == 2


def test_stop_timesteps(tmp_path, capsys):
    assert main(["train", "--algo", "PPO", "--env", "CartPole-v1", "--stop-timesteps", "100",
                 "--config", "train_batch_size=64", "minibatch_size=32", "--out", str(tmp_path / "c")]) == 0
    assert sum(line.startswith("iter") for line in capsys.readouterr().out.splitlines()) == 2


def test_bad_arguments_exit_2(capsys):
    proc = subprocess.run([sys.executable, "-m", "cairn", "frobnicate"],
                          capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 2 and "usage" in proc.stderr, proc.stderr  # the real process's status
    for args in (["train", "--env", "CartPole-v1"],
                 ["train", "--algo", "PPO", "--env", "CartPole-v1", "--stop-iters", "x"],
                 ["train", "--algo", "Nope", "--env", "CartPole-v1"]):
        try:
            code = main(args)
        except SystemExit as exited:  # argparse's own errors
            code = exited.code
        err = capsys.readouterr().err
        assert code == 2, (args, err)
        assert "usage" in err or "cairn: error: unknown --algo" in err
        assert "Traceback" not in err


def test_bad_config_is_a_clear_error(capsys):
    assert main(["train", "--algo", "PPO", "--env", "CartPole-v1", "--config", "lr=-1"]) == 1
    assert "'lr'=-1" in capsys.readouterr().err


def test_info(tmp_path, capsys, ppo_algo):
    path = ppo_algo.save(tmp_path / "c")
    assert main(["info", path]) == 0
    assert f'"checkpoint_version": "{cairn.checkpoint.FORMAT_VERSION}"' in capsys.readouterr().out


SMALL = ["--config", "train_batch_size=64", "minibatch_size=32", "num_epochs=1"]


def test_version(capsys):
    with pytest.raises(SystemExit) as exited:
        main(["--version"])
    assert exited.value.code == 0
    assert capsys.readouterr().out.strip() == f"cairn {cairn.__version__}"


def test_help_states_the_default_output_and_the_code_uses_it(tmp_path, monkeypatch, capsys):
    with pytest.raises(SystemExit):
        main(["train", "--help"])
    text = capsys.readouterr().out
    assert "(--out; default ~/cairn_results/<ALGO>_<YYYY-mm-dd_HH-MM-SS>_<pid>)" in text
    assert "--overwrite" in text and "--resume RUN" in text
    monkeypatch.setenv("HOME", str(tmp_path))
    assert main(["train", "--algo", "PPO", "--env", "CartPole-v1", "--stop-iters", "1", *SMALL]) == 0
    saved = Path(capsys.readouterr().out.splitlines()[-1].removeprefix("checkpoint: "))
    run_dir = saved.parent.parent
    assert saved.parent.name == "checkpoints" and saved.name == "checkpoint_000001"
    assert run_dir.parent == tmp_path / "cairn_results" and (run_dir / "progress.csv").is_file()
    assert re.fullmatch(r"PPO_\d{4}-\d\d-\d\d_\d\d-\d\d-\d\d_\d+", run_dir.name), run_dir.name


def test_out_refuses_a_run_or_a_checkpoint_and_overwrite_starts_over(tmp_path, capsys, ppo_algo):
    ckpt = Path(ppo_algo.save(tmp_path / "ckpt"))
    before = (ckpt / "cairn_checkpoint.json").read_bytes()
    args = ["train", "--algo", "PPO", "--env", "CartPole-v1", "--stop-iters", "1", *SMALL]
    for extra in ([], ["--overwrite"]):  # a checkpoint is never a run directory
        assert main([*args, "--out", str(ckpt), *extra]) == 2
        error = capsys.readouterr().err.strip()
        assert len(error.splitlines()) == 1 and str(ckpt) in error and "not a run directory" in error
    assert (ckpt / "cairn_checkpoint.json").read_bytes() == before
    run = tmp_path / "run"
    assert main([*args, "--out", str(run)]) == 0
    (run / "notes.txt").write_text("mine")
    captured = capsys.readouterr()
    assert main([*args, "--out", str(run)]) == 2
    captured = capsys.readouterr()
    assert not any(line.startswith("iter") for line in captured.out.splitlines())  # refused up front
    error = captured.err.strip()
    assert len(error.splitlines()) == 1 and "--resume" in error and "--overwrite" in error, error
    assert main([*args, "--stop-iters", "2", "--out", str(run), "--overwrite"]) == 0
    assert (run / "notes.txt").read_text() == "mine"  # --overwrite removes only what cairn train wrote
    assert sorted(p.name for p in (run / "checkpoints").iterdir() if p.is_dir()) == ["checkpoint_000002"]
    assert len((run / "progress.csv").read_text().splitlines()) == 3  # header + 2 fresh rows


def test_out_never_uses_a_directory_that_is_not_a_run(tmp_path, capsys):
    (tmp_path / "notes.txt").write_text("keep me")
    for extra in ([], ["--overwrite"]):
        assert main(["train", "--algo", "PPO", "--env", "CartPole-v1", *SMALL,
                     "--out", str(tmp_path), *extra]) == 2
        error = capsys.readouterr().err
        assert str(tmp_path) in error and "not a cairn run directory" in error
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]


def _wait_for_line(proc: subprocess.Popen, prefix: str, timeout: float) -> list[str]:
    """Read the child's stdout until a line starts with ``prefix``; return the lines read."""
    lines: list[str] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([proc.stdout], [], [], 1.0)
        if not ready:
            continue
        line = proc.stdout.readline()
        if not line:  # the child exited
            break
        lines.append(line)
        if line.startswith(prefix):
            return lines
    proc.kill()
    raise AssertionError(f"no {prefix!r} line within {timeout}s: {lines} {proc.stderr.read()}")


def _signal_training(out: Path, settings: list[str], send: Callable[[subprocess.Popen], None], *,
                     timeout: float = 120, new_session: bool = False) -> tuple[int, str, str]:
    """Start ``cairn train`` (PPO on CartPole, SMALL and ``settings``, a million iterations) into
    ``out``, wait for its first progress line, signal it with ``send(proc)``, and return its
    ``(returncode, stdout, stderr)``."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "cairn", "train", "--algo", "PPO", "--env", "CartPole-v1",
         "--stop-iters", "1000000", *SMALL, *settings, "--out", str(out)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT, start_new_session=new_session,
    )
    try:
        _wait_for_line(proc, "iter", timeout=timeout)
        send(proc)
        stdout, stderr = proc.communicate(timeout=timeout)
    finally:
        proc.kill()
    return proc.returncode, stdout, stderr


@pytest.mark.slow
def test_ctrl_c_saves_a_checkpoint_and_exits_130(tmp_path):
    out = tmp_path / "run"
    returncode, stdout, stderr = _signal_training(
        out, [], lambda proc: proc.send_signal(signal.SIGINT))
    assert returncode == 130, stderr
    assert "Traceback" not in stderr
    assert "KeyboardInterrupt" not in stderr
    assert "Traceback" not in stdout
    said = [line for line in stdout.splitlines() if str(out) in line]
    assert len(said) == 1 and f"cairn train --resume {out}" in said[0], stdout
    saved = said[0].split("checkpoint saved to ")[1].split(";")[0]
    restored = cairn.Algorithm.from_checkpoint(saved)
    assert restored.iteration >= 1
    rows = (out / "progress.csv").read_text().splitlines()
    assert len(rows) == 1 + restored.iteration  # one row per iteration trained, the last one saved


@pytest.mark.slow
def test_sigterm_saves_the_last_iteration_exits_143_and_resumes(tmp_path):
    """SIGTERM (kill, a job scheduler, a container runtime) ended the process at once, losing
    the whole run under the default settings (a checkpoint only at the end). It now does what
    Ctrl-C does: the iteration finishes, a checkpoint is saved, and the status is 128 + 15."""
    out = tmp_path / "run"
    returncode, stdout, stderr = _signal_training(
        out, [], lambda proc: proc.send_signal(signal.SIGTERM))
    assert returncode == 143, stderr
    assert "Traceback" not in stderr and "Traceback" not in stdout
    assert "SIGTERM again to quit without saving" in stderr  # the handler said what it does
    said = [line for line in stdout.splitlines() if str(out) in line]
    assert len(said) == 1 and said[0].startswith("terminated (SIGTERM) after iteration "), stdout
    assert f"cairn train --resume {out}" in said[0]
    saved = Path(said[0].split("checkpoint saved to ")[1].split(";")[0])
    restored = cairn.Algorithm.from_checkpoint(saved)
    n = restored.iteration
    assert n >= 1 and saved == out / "checkpoints" / f"checkpoint_{n:06d}"
    rows = (out / "progress.csv").read_text().splitlines()
    assert len(rows) == 1 + n  # one row per iteration trained, the last one saved
    restored.stop()

    resumed = subprocess.run(
        [sys.executable, "-m", "cairn", "train", "--resume", str(out), "--stop-iters", str(n + 1)],
        capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert resumed.returncode == 0, resumed.stderr
    iters = [line.split()[1] for line in resumed.stdout.splitlines() if line.startswith("iter")]
    assert iters == [str(n + 1)]
    rows = (out / "progress.csv").read_text().splitlines()
    assert len(rows) == 1 + n + 1
    assert cairn.Algorithm.from_checkpoint(out / "checkpoints" / f"checkpoint_{n + 1:06d}").iteration == n + 1


@pytest.mark.slow
def test_sigterm_to_the_process_group_saves_a_run_with_async_envs(tmp_path):
    """SLURM signals every process of a job, and `kill -TERM -PGID` a whole group: the children
    of gym_env_vectorize_mode="async" died of it, so the save that reads their states failed
    (status 1, no checkpoint). They ignore SIGTERM as they ignore Ctrl-C; the parent saves."""
    import os

    out = tmp_path / "run"
    returncode, stdout, stderr = _signal_training(
        out, ['gym_env_vectorize_mode="async"', "num_envs_per_env_runner=2"],
        lambda proc: os.killpg(proc.pid, signal.SIGTERM), new_session=True)
    assert returncode == 143, stderr
    said = [line for line in stdout.splitlines() if "checkpoint saved to " in line]
    assert len(said) == 1, stdout
    restored = cairn.Algorithm.from_checkpoint(said[0].split("checkpoint saved to ")[1].split(";")[0])
    assert restored.iteration >= 1
    assert len((out / "progress.csv").read_text().splitlines()) == 1 + restored.iteration
    restored.stop()


@pytest.mark.slow
def test_sigterm_saves_a_run_with_remote_runners(tmp_path):
    """num_env_runners > 0: the ray.init that cairn makes installs Ray's SIGTERM handler (it
    exits at once), so cairn train left SIGTERM alone and the run was lost (status 15, no
    checkpoint). That handler stands for the default one: SIGTERM saves and exits 143."""
    out = tmp_path / "run"
    returncode, stdout, stderr = _signal_training(
        out, ["num_env_runners=1"], lambda proc: proc.send_signal(signal.SIGTERM), timeout=180)
    assert returncode == 143, stderr
    said = [line for line in stdout.splitlines() if "checkpoint saved to " in line]
    assert len(said) == 1, stdout
    saved = said[0].split("checkpoint saved to ")[1].split(";")[0]
    # Read without restoring, which would start Ray in this process.
    iteration = json.loads((Path(saved) / "algorithm_state.json").read_text())["iteration"]
    rows = (out / "progress.csv").read_text().splitlines()
    assert iteration >= 1 and len(rows) == 1 + iteration  # the last iteration logged is the one saved
    assert Path(saved) == out / "checkpoints" / f"checkpoint_{iteration:06d}"


def test_the_sigterm_handler_of_cairns_own_ray_init_counts_as_the_default(monkeypatch, _default_sigterm):
    import cairn.ray_cluster
    from cairn.cli.interrupt import InterruptRequest

    def rays(signum, frame):
        raise SystemExit(signum)

    monkeypatch.setattr(cairn.ray_cluster, "_ray_sigterm_handler", rays)
    signal.signal(signal.SIGTERM, rays)
    with InterruptRequest() as interrupt:
        assert signal.getsignal(signal.SIGTERM) is not rays
        signal.raise_signal(signal.SIGTERM)
        assert interrupt.requested and interrupt.exit_status == 143
    assert signal.getsignal(signal.SIGTERM) is rays  # Ray's handler is back


@pytest.fixture
def _default_sigterm():
    """Python's own SIGTERM disposition for the test (Ray may have installed its handler)."""
    before = signal.signal(signal.SIGTERM, signal.SIG_DFL)
    yield
    signal.signal(signal.SIGTERM, before)


def test_second_sigterm_during_the_save_leaves_the_old_checkpoint(tmp_path, capsys, monkeypatch,
                                                                    _default_sigterm):
    """A SIGTERM after an iteration asks for a save; a second one while it is written aborts it
    (exit 143), the earlier checkpoint is untouched and the default disposition is back."""
    import cairn.checkpoint.atomic
    from cairn.algorithms.algorithm import Algorithm

    out = tmp_path / "run"
    assert main(["train", "--algo", "PPO", "--env", "CartPole-v1", "--stop-iters", "1", *SMALL,
                 "--out", str(out), "-q"]) == 0
    first = out / "checkpoints" / "checkpoint_000001"
    before = (first / "cairn_checkpoint.json").read_bytes()
    capsys.readouterr()
    real_train = Algorithm.train

    def sigterm():
        # Over the default disposition SIGTERM would end pytest itself: fail the test instead.
        assert signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL, "no SIGTERM handler installed"
        signal.raise_signal(signal.SIGTERM)

    def train_then_sigterm(self):
        result = real_train(self)
        sigterm()
        return result

    def sigterm_again(*args, **kwargs):
        sigterm()

    monkeypatch.setattr(Algorithm, "train", train_then_sigterm)
    monkeypatch.setattr(cairn.checkpoint.atomic, "_fsync_tree", sigterm_again)
    try:
        code = main(["train", "--resume", str(out), "--stop-iters", "100"])
    except KeyboardInterrupt:
        pytest.fail("cairn train let KeyboardInterrupt escape")
    assert code == 143
    captured = capsys.readouterr()
    assert sum(line.startswith("iter") for line in captured.out.splitlines()) == 1
    assert "not saved" in captured.err
    assert (first / "cairn_checkpoint.json").read_bytes() == before
    assert sorted(p.name for p in (out / "checkpoints").iterdir() if p.is_dir()) == ["checkpoint_000001"]
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_sigterm_handler_only_replaces_the_default_disposition(_default_sigterm):
    """SIGTERM ignored by the parent, or handled by the program that calls cairn.cli.main,
    stays so; over the default one, a SIGTERM becomes a request with status 143."""
    from cairn.cli.interrupt import InterruptRequest

    seen = []

    def theirs(signum, frame):
        seen.append(signum)

    for disposition in (signal.SIG_IGN, theirs):
        signal.signal(signal.SIGTERM, disposition)
        with InterruptRequest() as interrupt:
            assert signal.getsignal(signal.SIGTERM) is disposition
            signal.raise_signal(signal.SIGTERM)
        assert not interrupt.requested and signal.getsignal(signal.SIGTERM) is disposition
    assert seen == [signal.SIGTERM]
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    with InterruptRequest() as interrupt:
        assert signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL  # else SIGTERM would end pytest
        signal.raise_signal(signal.SIGTERM)
        assert interrupt.requested and interrupt.exit_status == 143
        with pytest.raises(KeyboardInterrupt):  # a second one, SIGINT or SIGTERM: quit
            signal.raise_signal(signal.SIGINT)
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    assert interrupt.exit_status == 130  # the signal that ended it


def test_second_ctrl_c_during_the_save_leaves_the_old_checkpoint(tmp_path, capsys, monkeypatch):
    """The first Ctrl-C (raised after an iteration) asks for a save; a second one in the middle
    of writing it aborts the save, and the run's earlier checkpoint is untouched."""
    import cairn.checkpoint.atomic
    from cairn.algorithms.algorithm import Algorithm

    out = tmp_path / "run"
    assert main(["train", "--algo", "PPO", "--env", "CartPole-v1", "--stop-iters", "1", *SMALL,
                 "--out", str(out)]) == 0
    first = out / "checkpoints" / "checkpoint_000001"
    before = (first / "cairn_checkpoint.json").read_bytes()
    capsys.readouterr()
    real_train = Algorithm.train

    def train_then_ctrl_c(self):
        result = real_train(self)
        signal.raise_signal(signal.SIGINT)
        return result

    def ctrl_c_again(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(Algorithm, "train", train_then_ctrl_c)
    monkeypatch.setattr(cairn.checkpoint.atomic, "_fsync_tree", ctrl_c_again)
    try:
        code = main(["train", "--resume", str(out), "--stop-iters", "100"])
    except KeyboardInterrupt:  # not handled: fail this test instead of ending the session
        pytest.fail("cairn train let KeyboardInterrupt escape")
    assert code == 130
    captured = capsys.readouterr()
    assert sum(line.startswith("iter") for line in captured.out.splitlines()) == 1
    assert "not saved" in captured.err
    assert (first / "cairn_checkpoint.json").read_bytes() == before
    assert sorted(p.name for p in (out / "checkpoints").iterdir() if p.is_dir()) == ["checkpoint_000001"]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
