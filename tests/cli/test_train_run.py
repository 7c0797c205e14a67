"""cairn train's run directory: files, columns, resume, progress output."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import pytest
import yaml

import cairn
from cairn.cli import main
from cairn.cli.runlog import PROGRESS_COLUMNS
from tests.cli.conftest import TRAIN


def _rows(run):
    with open(run / "progress.csv", newline="") as f:
        return list(csv.DictReader(f))


def test_run_directory_holds_every_file_and_column(trained_run):
    run = trained_run
    assert sorted(p.name for p in run.iterdir()) == [
        "checkpoints", "config.json", "progress.csv", "result.jsonl", "run.json"]
    rows = _rows(run)
    header = list(rows[0])
    assert tuple(header[:len(PROGRESS_COLUMNS)]) == PROGRESS_COLUMNS
    assert {"policy_loss", "vf_loss", "total_loss", "entropy"} <= set(header)  # the learner's losses
    assert [int(r["training_iteration"]) for r in rows] == [1, 2, 3]
    assert [int(r["timesteps"]) for r in rows] == [64, 128, 192]
    times = [float(r["time"]) for r in rows]
    assert times == sorted(times) and times[0] > 0
    for r in rows:
        assert (float(r["episode_return_min"]) <= float(r["episode_return_mean"])
                <= float(r["episode_return_max"]))
        assert float(r["env_steps_per_s"]) > 0 and math.isfinite(float(r["policy_loss"]))
    results = [json.loads(line) for line in (run / "result.jsonl").read_text().splitlines()]
    assert [r["training_iteration"] for r in results] == [1, 2, 3]
    assert (results[-1]["learners"]["default_policy"]["policy_loss"]
            == pytest.approx(float(rows[-1]["policy_loss"])))
    assert results[-1]["num_env_steps_sampled_lifetime"] == 192
    config = json.loads((run / "config.json").read_text())
    assert config["seed"] == 0 and config["train_batch_size"] == 64 and config["env"] == "CartPole-v1"
    assert cairn.AlgorithmConfig.from_dict(config).to_dict() == config  # loadable: --config RUN/config.json
    settings = json.loads((run / "run.json").read_text())
    assert (settings["stop"] == {"iters": 3, "timesteps": None, "reward": None}
            and settings["checkpoint_every"] == 1)
    names = sorted(p.name for p in (run / "checkpoints").iterdir() if p.is_dir())
    assert names == ["checkpoint_000001", "checkpoint_000002", "checkpoint_000003"]


def test_resume_continues_counters_rng_and_appends(tmp_path, capsys):
    straight, run = tmp_path / "straight", tmp_path / "run"
    assert main([*TRAIN, "--seed", "3", "--stop-iters", "4", "--out", str(straight), "-q"]) == 0
    assert main([*TRAIN, "--seed", "3", "--stop-iters", "2", "--out", str(run), "-q"]) == 0
    head = (run / "progress.csv").read_bytes()
    capsys.readouterr()
    assert main(["train", "--resume", str(run), "--stop-iters", "4"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert [line.split()[1] for line in out if line.startswith("iter")] == ["3", "4"]
    assert (run / "progress.csv").read_bytes().startswith(head)  # appended, not rewritten
    rows, expected = _rows(run), _rows(straight)
    assert [r["training_iteration"] for r in rows] == ["1", "2", "3", "4"]
    # Counters, random generators and the metrics window continue: the same numbers as one run.
    for key in ("timesteps", "episodes", "episode_return_mean", "episode_return_max", "policy_loss"):
        assert [r[key] for r in rows] == [r[key] for r in expected], key
    assert float(rows[2]["time"]) > float(rows[1]["time"])
    assert len((run / "result.jsonl").read_text().splitlines()) == 4
    restored = cairn.Algorithm.from_checkpoint(run / "checkpoints" / "checkpoint_000004")
    assert restored.iteration == 4 and restored.counters["num_env_steps_sampled_lifetime"] == 256


def test_warnings_from_cairn_show_as_one_line(tmp_path, capsys):
    dqn = ["train", "--algo", "DQN", "--env", "CartPole-v1",
           "--config", "train_batch_size=64", "minibatch_size=16",
           "num_steps_sampled_before_learning_starts=32", "store_replay_buffer=false",
           "--out", str(tmp_path / "run")]
    assert main([*dqn, "--stop-iters", "1", "-q"]) == 0  # store_replay_buffer=false: no replay buffer stored
    capsys.readouterr()
    assert main(["train", "--resume", str(tmp_path / "run"), "--stop-iters", "2"]) == 0
    err = [line for line in capsys.readouterr().err.splitlines() if "replay buffer" in line]
    assert len(err) == 1 and err[0].startswith(
        "cairn: warning: This DQN state has no replay buffer, so training")
    assert "--config store_replay_buffer=true" in err[0]
    assert main(["train", "--resume", str(tmp_path / "run"), "--stop-iters", "3", "-q"]) == 0
    assert "replay buffer" not in capsys.readouterr().err  # -q: errors only
    with pytest.warns(cairn.errors.ReplayBufferNotRestoredWarning):  # outside the command: Python's own
        cairn.Algorithm.from_checkpoint(tmp_path / "run" / "checkpoints" / "checkpoint_000003").stop()


DQN = ["train", "--algo", "DQN", "--env", "CartPole-v1", "--seed", "1", "--config", "train_batch_size=64",
       "minibatch_size=16", "num_steps_sampled_before_learning_starts=32"]


def test_a_dqn_run_stores_its_replay_buffer_and_resumes_exactly(tmp_path, capsys, monkeypatch):
    """Issue 25, item 10: cairn train stored no replay buffer for DQN/SAC, so --resume (and the
    Ctrl-C message's promise) continued from an empty buffer. Run checkpoints now hold it."""
    import signal

    from cairn.algorithms.algorithm import Algorithm

    straight, run = tmp_path / "straight", tmp_path / "run"
    assert main([*DQN, "--stop-iters", "4", "--out", str(straight), "-q"]) == 0
    real_train = Algorithm.train

    def ctrl_c_after_two(self):
        result = real_train(self)
        if self.iteration == 2:
            signal.raise_signal(signal.SIGINT)  # as a user's Ctrl-C: finish the iteration, save
        return result

    monkeypatch.setattr(Algorithm, "train", ctrl_c_after_two)
    capsys.readouterr()
    assert main([*DQN, "--stop-iters", "4", "--out", str(run)]) == 130
    out = capsys.readouterr().out
    assert "continue with cairn train --resume" in out and "replay buffer" not in out
    monkeypatch.setattr(Algorithm, "train", real_train)
    assert main(["train", "--resume", str(run), "-q"]) == 0
    assert "replay buffer" not in capsys.readouterr().err  # no "training goes on from an empty buffer"
    rows, expected = _rows(run), _rows(straight)
    for key in ("timesteps", "episodes", "episode_return_mean", "mean_q"):
        assert [r.get(key) for r in rows] == [r.get(key) for r in expected], key
    files = cairn.get_checkpoint_info(run / "checkpoints" / "checkpoint_000004")["files"]
    assert "components/replay_buffer/state.safetensors" in files


def test_ctrl_c_says_what_a_run_without_its_replay_buffer_loses(tmp_path, capsys, monkeypatch):
    import signal

    from cairn.algorithms.algorithm import Algorithm

    real_train = Algorithm.train

    def ctrl_c(self):
        result = real_train(self)
        signal.raise_signal(signal.SIGINT)
        return result

    monkeypatch.setattr(Algorithm, "train", ctrl_c)
    assert main([*DQN, "store_replay_buffer=false", "--out", str(tmp_path / "run")]) == 130
    assert ("its replay buffer was not stored, as store_replay_buffer=false asked: the resumed run starts "
            "from an empty buffer") in capsys.readouterr().out


def test_resume_cuts_rows_written_after_the_latest_checkpoint(tmp_path, capsys):
    """A run that died after logging iterations it never checkpointed: those rows go, once."""
    import shutil

    run = tmp_path / "run"
    assert main([*TRAIN, "--seed", "1", "--stop-iters", "3", "--checkpoint-every", "2", "--keep", "0",
                 "--out", str(run), "-q"]) == 0
    shutil.rmtree(run / "checkpoints" / "checkpoint_000003")  # as if it had crashed before the last save
    first_two = "".join((run / "progress.csv").read_text().splitlines(keepends=True)[:3])
    assert main(["train", "--resume", str(run), "-q"]) == 0  # the run's own stop criterion: 3 iterations
    text = (run / "progress.csv").read_text()
    assert text.startswith(first_two)
    assert [r["training_iteration"] for r in _rows(run)] == ["1", "2", "3"]
    assert [json.loads(line)["training_iteration"]
            for line in (run / "result.jsonl").read_text().splitlines()] == [1, 2, 3]
    before = {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()}
    capsys.readouterr()
    assert main(["train", "--resume", str(run)]) == 0  # done already: nothing trained, nothing written
    assert capsys.readouterr().out.strip() == (f"{run} already meets its stop criteria (--stop-iters 3) at "
                                               "iteration 3; give a later one to train on.")
    assert {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()} == before


def test_config_file_and_flags(tmp_path):
    file = tmp_path / "ppo.yaml"
    file.write_text(yaml.safe_dump({"algo_class": "PPO", "env": "CartPole-v1", "train_batch_size": 64,
                                    "minibatch_size": 32, "num_epochs": 1, "lr": 0.01, "seed": 5,
                                    "evaluation_interval": 2, "evaluation_duration": 1}))
    run = tmp_path / "run"
    assert main(["train", "--config", str(file), "lr=0.002", "--seed", "7", "--stop-timesteps", "100",
                 "--out", str(run), "-q"]) == 0
    config = json.loads((run / "config.json").read_text())
    assert config["lr"] == 0.002 and config["seed"] == 7 and config["train_batch_size"] == 64
    rows = _rows(run)
    assert [r["timesteps"] for r in rows] == ["64", "128"]  # stopped at the first >= 100
    assert (rows[0]["evaluation/episode_return_mean"] == ""
            and float(rows[1]["evaluation/episode_return_mean"]) > 0)


def test_plain_lines_quiet_and_bar(tmp_path, capsys, monkeypatch):
    from rich.console import Console

    from cairn.cli import progress, train_loop

    assert main([*TRAIN, "--stop-iters", "2", "--out", str(tmp_path / "plain")]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line[:9] for line in lines[:2]] == ["iter    1", "iter    2"] and "steps/s" in lines[0]
    assert lines[2].startswith("checkpoint: ") and len(lines) == 3
    assert main([*TRAIN, "--stop-iters", "2", "--out", str(tmp_path / "quiet"), "-q"]) == 0
    assert not any(line.startswith("iter") for line in capsys.readouterr().out.splitlines())
    console = Console(record=True, force_terminal=True, width=120)
    monkeypatch.setattr(train_loop, "make_reporter",
                        lambda **kw: progress.BarReporter(kw["title"], kw["stop"], console))
    assert main([*TRAIN, "--stop-timesteps", "192", "--out", str(tmp_path / "bar")]) == 0
    shown = console.export_text()
    assert "PPO CartPole-v1" in shown and "━" in shown and "192/192 steps" in shown
    assert "ETA" in shown and "return" in shown and "steps/s" in shown
    assert not any(line.startswith("iter") for line in capsys.readouterr().out.splitlines())


def test_tensorboard_event_files(tmp_path):
    run = tmp_path / "run"
    assert main([*TRAIN, "--stop-iters", "2", "--tensorboard", "--out", str(run), "-q"]) == 0
    events = list((run / "tensorboard").glob("events.out.tfevents.*"))
    assert len(events) == 1 and events[0].stat().st_size > 0
    import struct

    from tensorboardX.event_file_writer import EventFileWriter  # noqa: F401  (the writer is installed)
    from tensorboardX.proto import event_pb2
    data, tags = events[0].read_bytes(), set()
    offset = 0
    while offset < len(data):  # TFRecord framing: length, crc, payload, crc
        (length,) = struct.unpack("<Q", data[offset:offset + 8])
        event = event_pb2.Event.FromString(data[offset + 12:offset + 12 + length])
        tags.update(v.tag for v in event.summary.value)
        offset += 12 + length + 4
    assert {"episode_return_mean", "policy_loss", "env_steps_per_s"} <= tags


def test_cairn_train_saves_every_n_timesteps(tmp_path: Path) -> None:
    assert main(["train", "--algo", "PPO", "--env", "CartPole-v1", "--stop-iters", "4", "--out",
                 str(tmp_path / "run"), "-q", "--keep", "0", "--checkpoint-every-timesteps", "256",
                 "--config", "train_batch_size=128", "minibatch_size=64"]) == 0
    names = sorted(p.name for p in (tmp_path / "run" / "checkpoints").iterdir() if p.is_dir())
    # 128 env steps an iteration: 256 is passed at iterations 2 and 4 (the final save is 4 too).
    assert names == ["checkpoint_000002", "checkpoint_000004"]
    assert json.loads((tmp_path / "run" / "run.json").read_text())["checkpoint_every_timesteps"] == 256


def test_repeated_config_options_all_apply():
    """``--config a=1 --config b=2`` keeps both, in order (argparse's default "store" silently
    kept only the last one, so a run trained with settings its user never saw dropped)."""
    from cairn.cli.app import build_parser

    args = build_parser().parse_args(["train", "--config", "train_batch_size=128", "lr=0.01",
                                      "--config", "num_epochs=1", "--config", "lr=0.02"])
    assert args.config == ["train_batch_size=128", "lr=0.01", "num_epochs=1", "lr=0.02"]


def test_resume_refuses_league_instead_of_ignoring_it(tmp_path, capsys):
    """--league with --resume trained on without a league and exited 0: the flag was dropped
    silently (a league is part of the run's config, which --resume continues as it was)."""
    run = tmp_path / "run"
    assert main([*TRAIN, "--stop-iters", "1", "--out", str(run), "-q"]) == 0
    before = {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()}
    capsys.readouterr()
    assert main(["train", "--resume", str(run), "--league", "--stop-iters", "2", "-q"]) == 2
    err = capsys.readouterr().err
    assert "cairn train: error: --resume continues a run as it was configured; leave out --league" in err
    assert {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()} == before


def test_resume_refuses_settings_a_restore_does_not_apply(tmp_path, capsys):
    """KEY=VALUE settings that a restore cannot apply were written to config.json and then not
    used: seed=5 (the run's generators go on from the checkpoint: the rows equal those of a
    resume without it) and the settings each stored policy was built with (its network,
    its observation filter, DQN's epsilon schedule...). config.json then described a run that
    never happened, and --config RUN/config.json trained another one. Now they are refused;
    settings that do apply (lr) still go through."""
    run = tmp_path / "run"
    assert main([*TRAIN, "--seed", "0", "--stop-iters", "1", "--out", str(run), "-q"]) == 0
    before = {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()}
    for setting, shown in (("seed=5", "seed=5"), ("observation_filter=MeanStdFilter", "observation_filter"),
                           ('model={"hidden": [8]}', "model.hidden")):
        capsys.readouterr()
        resume = ["train", "--resume", str(run), "--config", setting, "--stop-iters", "2", "-q"]
        assert main(resume) == 2, setting
        err = capsys.readouterr().err
        assert f"cairn: error: --resume {run}: {shown}" in err, err
        assert "--out NEW_RUN" in err  # the fix: a new run with the setting
        assert {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()} == before
    assert main(["train", "--resume", str(run), "--config", "lr=0.001", "--stop-iters", "2", "-q"]) == 0
    assert json.loads((run / "config.json").read_text())["lr"] == 0.001
    restored = cairn.Algorithm.from_checkpoint(run / "checkpoints" / "checkpoint_000002")
    assert restored.get_policy().config["lr"] == 0.001
    restored.stop()


def test_an_interrupt_inside_an_iteration_does_not_replace_a_checkpoint(tmp_path, capsys, monkeypatch):
    """A KeyboardInterrupt that our SIGINT handler did not catch (raised by code, or where the
    handler is not installed) in the middle of train() was answered by a forced save of the
    algorithm as it was: learners part-way through the iteration, its counter not yet moved on.
    That replaced the iteration's good checkpoint (forced saves of an iteration already saved
    replace it) with a state no run computes, and --resume went on from it without a word."""
    from cairn.algorithms.ppo.ppo import PPO

    run = tmp_path / "run"
    real_step = PPO.training_step

    def interrupted_in_the_second(self):
        stats = real_step(self)
        if self.iteration == 1:  # the learners have updated; iteration 2 is not counted yet
            raise KeyboardInterrupt
        return stats

    monkeypatch.setattr(PPO, "training_step", interrupted_in_the_second)
    checkpoint = run / "checkpoints" / "checkpoint_000001"
    assert main([*TRAIN, "--stop-iters", "3", "--checkpoint-every", "1", "--out", str(run), "-q"]) == 130
    err = capsys.readouterr().err
    assert "interrupted inside iteration 2" in err and "no checkpoint saved" in err, err
    weights = cairn.Algorithm.from_checkpoint(checkpoint)
    try:
        assert weights.iteration == 1
        rows = _rows(run)
        assert [r["training_iteration"] for r in rows] == ["1"]
        # The checkpoint is the one the first iteration saved: its counters match the row.
        assert weights.counters["num_env_steps_sampled_lifetime"] == int(rows[0]["timesteps"])
        # One epoch of 2 minibatches: the second iteration's updates are not in it.
        assert weights.get_policy().get_state()["counters"]["num_grad_updates"] == 2
    finally:
        weights.stop()


def _learned(iteration: int, losses: dict[str, float]) -> dict:
    """A result of ``train()`` in which the policies of ``losses`` learned (and no other)."""
    return {"training_iteration": iteration, "num_env_steps_sampled_lifetime": 100 * iteration,
            "learners": {pid: {"policy_loss": loss} for pid, loss in losses.items()}}


def test_a_learner_column_holds_one_policys_stats(tmp_path):
    """progress.csv names the stats of the one policy of the first iteration that learned
    ``<stat>``, any other policy's ``<policy_id>/<stat>``: a later iteration in which only
    another policy learned (a policy drawn per episode got no rows) put that policy's loss
    into the first one's column, with no error. Also after a resume."""
    from cairn.cli.runlog import RunLog, read_progress

    log = RunLog(tmp_path)
    log.append({**_learned(1, {}), "learners": {}})  # nothing learned yet (DQN's learning_starts)
    log.append(_learned(2, {"p0": 0.5}))
    log.append(_learned(3, {"p0": 0.25, "p1": 1.5}))
    log.append(_learned(4, {"p1": 2.5}))
    log.close()
    resumed = RunLog(tmp_path, resume_iteration=4)
    resumed.append(_learned(5, {"p1": 3.5}))
    resumed.append(_learned(6, {"p0": 0.125}))
    resumed.close()
    header, rows = read_progress(tmp_path / "progress.csv")
    bare = [r["policy_loss"] for r in rows]
    assert [v for v in bare if not math.isnan(v)] == [0.5, 0.25, 0.125]  # p0's alone
    assert [r.get("p1/policy_loss", math.nan) for r in rows][3:5] == [2.5, 3.5]
    assert "p0/policy_loss" not in header


def test_dict_settings_merge_into_the_defaults_and_the_config_file(tmp_path):
    """--config replay_buffer_config='{"type": "prioritized"}' replaced SAC's whole buffer
    setting, so the buffer got the replay factory's capacity (50,000) instead of SAC's
    1,000,000 with no error, and a KEY=VALUE model dropped a --config file's model keys;
    training() and a resume's config_overrides merge such settings."""
    from cairn.algorithms.sac import SACConfig

    file = tmp_path / "sac.yaml"
    file.write_text(yaml.safe_dump({"model": {"activation": "tanh"}, "replay_buffer_config": {"alpha": 0.5}}))
    run = tmp_path / "run"
    assert main(["train", "--algo", "SAC", "--env", "Pendulum-v1", "--config", str(file),
                 "train_batch_size=8", "minibatch_size=8", 'replay_buffer_config={"type": "prioritized"}',
                 'model={"hidden": [8]}',
                 "store_replay_buffer=false", "--stop-iters", "1", "--out", str(run), "-q"]) == 0
    config = json.loads((run / "config.json").read_text())
    expected = (SACConfig().training(model={"activation": "tanh"}, replay_buffer_config={"alpha": 0.5})
                .training(model={"hidden": [8]}, replay_buffer_config={"type": "prioritized"}))
    assert config["replay_buffer_config"] == expected.replay_buffer_config
    assert config["replay_buffer_config"]["capacity"] == 1_000_000
    assert config["model"] == expected.model and config["model"]["activation"] == "tanh"


def test_a_nested_dict_inside_model_replaces_the_config_files_whole(tmp_path):
    """A KEY=VALUE model='{"custom_model_config": {}}' after a --config file's
    custom_model_config {"width": 8} kept the width (a recursive merge), so the run trained a
    model the command line did not describe; the merge is one level deep, as training() does."""
    file = tmp_path / "ppo.yaml"
    file.write_text(yaml.safe_dump({"model": {"custom_model": "tests.models.nets:TwoHeads",
                                              "custom_model_config": {"width": 8}}}))
    run = tmp_path / "run"
    assert main(["train", "--algo", "PPO", "--env", "CartPole-v1", "--config", str(file),
                 "train_batch_size=16", "minibatch_size=16", "num_epochs=1",
                 'model={"custom_model_config": {"depth": 2}}',
                 "--stop-iters", "1", "--out", str(run), "-q"]) == 0
    model = json.loads((run / "config.json").read_text())["model"]
    assert model["custom_model_config"] == {"depth": 2}
    assert model["custom_model"] == "tests.models.nets:TwoHeads"  # the key the setting lacks stays


def test_a_yaml_config_file_reads_exponent_numbers_as_floats(tmp_path, capsys):
    """PyYAML (YAML 1.1) kept lr: 1e-3 as the string '1e-3' (it wants a dot and a signed
    exponent), so the run was refused with "'lr'='1e-3' is invalid: expected a number"; JSON
    and YAML 1.2 read it as 0.001. A quoted value stays a string."""
    file = tmp_path / "ppo.yaml"
    file.write_text("lr: 1e-3\ngamma: 9.9e-1\ntrain_batch_size: 64\nminibatch_size: 32\nnum_epochs: 1\n"
                    "log_dir: '1e5'\n")
    run = tmp_path / "run"
    assert main(["train", "--algo", "PPO", "--env", "CartPole-v1", "--config", str(file), "--stop-iters", "1",
                 "--out", str(run), "-q"]) == 0, capsys.readouterr().err
    config = json.loads((run / "config.json").read_text())
    assert (config["lr"], config["gamma"], config["log_dir"]) == (0.001, 0.99, "1e5")


def _records(run):
    """{iteration: (the manager's record metric, its env-step count)} of each run checkpoint."""
    from cairn.cli.run_checkpoints import CHECKPOINTS_DIR, _record, list_checkpoints

    root = str(run / CHECKPOINTS_DIR)
    return {c.iteration: (c.metric, _record(root, Path(c.path).name).get("timesteps"))
            for c in list_checkpoints(root)}


def test_ctrl_c_before_a_resumed_runs_first_iteration_keeps_its_checkpoint(tmp_path, capsys, monkeypatch):
    """Ctrl-C after --resume but before its first iteration re-saved the checkpoint it resumed
    from with no result: its record lost its metric (a best checkpoint lost its best status), and
    with --checkpoint-every-timesteps the save raised ConfigError instead of exiting 130. Nothing
    was trained since the resume: the checkpoint on disk is the one to continue from."""
    import signal

    from cairn.cli import train_loop

    real_reporter = train_loop.make_reporter

    def ctrl_c_at_start(**kwargs):
        reporter = real_reporter(**kwargs)
        real_start = reporter.start

        def start(resumed):
            real_start(resumed)
            signal.raise_signal(signal.SIGINT)  # a user's Ctrl-C before the first iteration
        reporter.start = start  # type: ignore[method-assign]
        return reporter

    for extra in ([], ["--checkpoint-every-timesteps", "64"]):
        run = tmp_path / f"run{len(extra)}"
        new_run = [*TRAIN, "--stop-iters", "2", "--checkpoint-every", "1", *extra, "--out", str(run), "-q"]
        assert main(new_run) == 0
        before = _records(run)
        assert sorted(before) == [1, 2] and all(m is not None for m, _ in before.values()), before
        monkeypatch.setattr(train_loop, "make_reporter", ctrl_c_at_start)
        capsys.readouterr()
        assert main(["train", "--resume", str(run), "--stop-iters", "4"]) == 130, capsys.readouterr()
        monkeypatch.setattr(train_loop, "make_reporter", real_reporter)
        out = capsys.readouterr().out
        assert f"checkpoint saved to {run / 'checkpoints' / 'checkpoint_000002'}" in out, out
        assert _records(run) == before  # the metrics and step counts of the records are kept
        assert [r["training_iteration"] for r in _rows(run)] == ["1", "2"]
        assert main(["train", "--resume", str(run), "--stop-iters", "3", "-q"]) == 0  # goes on from it
        assert sorted(_records(run)) == [1, 2, 3]


def test_an_interrupt_after_an_iteration_counted_saves_it_with_its_own_steps(tmp_path, capsys, monkeypatch):
    """A KeyboardInterrupt raised after train() counted an iteration but before the loop had its
    result (an on_train_result callback, or no SIGINT handler of ours) made the final save record
    checkpoint N with iteration N-1's return and env steps: a wrong best and a wrong schedule."""
    from cairn.algorithms.algorithm import Algorithm

    real_train = Algorithm.train

    def interrupted_after_the_third(self):
        result = real_train(self)
        if self.iteration == 3:  # counted, but its result never reaches the loop
            raise KeyboardInterrupt
        return result

    monkeypatch.setattr(Algorithm, "train", interrupted_after_the_third)
    for extra in ([], ["--checkpoint-every-timesteps", "64"]):
        run = tmp_path / f"run{len(extra)}"
        capsys.readouterr()
        new_run = [*TRAIN, "--stop-iters", "5", "--checkpoint-every", "1", *extra, "--out", str(run), "-q"]
        assert main(new_run) == 130
        assert "interrupted after iteration 3" in capsys.readouterr().out
        records = _records(run)
        assert sorted(records) == [1, 2, 3], records
        saved = cairn.Algorithm.from_checkpoint(run / "checkpoints" / "checkpoint_000003")
        try:
            steps = saved.counters["num_env_steps_sampled_lifetime"]
        finally:
            saved.stop()
        # Its own steps, not iteration 2's; its return is unknown (the result was lost): no metric.
        assert records[3] == (None, steps) and steps == 192 and records[2][1] == 128, records
        monkeypatch.setattr(Algorithm, "train", real_train)
        assert main(["train", "--resume", str(run), "--stop-iters", "4", "-q"]) == 0
        monkeypatch.setattr(Algorithm, "train", interrupted_after_the_third)
        assert sorted(_records(run))[-2:] == [3, 4]  # resumed from it (the default --keep 3 drops one)


def test_resume_refuses_a_newest_checkpoint_it_cannot_read(tmp_path, capsys):
    """A run whose newest checkpoint had a damaged manifest resumed, exit status 0, from the one
    before (saying so only at INFO), trained that iteration again and left it unsaved: the
    checkpoint manager counts the damaged one as saved, so the retrained iteration was not due."""
    run = tmp_path / "run"
    assert main([*TRAIN, "--stop-iters", "2", "--checkpoint-every", "1", "--out", str(run), "-q"]) == 0
    damaged = run / "checkpoints" / "checkpoint_000002"
    (damaged / "cairn_checkpoint.json").write_text('{"format": "cairn-checkpoint", ')
    before = {p.relative_to(run): p.read_bytes() for p in run.rglob("*") if p.is_file()}
    capsys.readouterr()
    assert main(["train", "--resume", str(run), "--stop-iters", "3", "-q"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"cairn: error: --resume {run}: its newest checkpoint {damaged} cannot be read (")
    older = damaged.parent / "checkpoint_000001"
    assert f"cairn checkpoint verify {damaged}" in err and f"to resume from {older}" in err
    assert err.count("\n") == 1
    assert {p.relative_to(run): p.read_bytes() for p in run.rglob("*") if p.is_file()} == before


def test_resume_reads_each_checkpoint_manifest_once(tmp_path, capsys, monkeypatch):
    """--resume finds the newest readable checkpoint and any unreadable one after it in one scan
    of the run's manifests; it read every manifest twice (the newest readable one, then the
    unreadable ones after it)."""
    import cairn.checkpoint

    run = tmp_path / "run"
    assert main([*TRAIN, "--stop-iters", "2", "--checkpoint-every", "1", "--keep", "0", "--out", str(run),
                 "-q"]) == 0
    read: list[str] = []
    real = cairn.checkpoint.get_checkpoint_info

    def counted(path, *args, **kwargs):
        read.append(Path(path).name)
        return real(path, *args, **kwargs)

    monkeypatch.setattr(cairn.checkpoint, "get_checkpoint_info", counted)
    capsys.readouterr()
    assert main(["train", "--resume", str(run), "-q"]) == 0  # met its stop criterion: nothing to train
    assert "already meets its stop criteria" in capsys.readouterr().out
    assert read.count("checkpoint_000001") == 1, read
