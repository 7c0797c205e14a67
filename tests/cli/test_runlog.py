"""cairn.cli.runlog: what a resumed run's TensorBoard events show."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from cairn.cli.runlog import RunLog, read_progress

pytest.importorskip("tensorboardX")


def _result(iteration: int, ret: float) -> dict:
    return {"training_iteration": iteration, "num_env_steps_sampled_lifetime": 64 * iteration,
            "time_total_s": float(iteration), "episode_return_mean": ret, "num_episodes_lifetime": iteration,
            "learners": {"default_policy": {"policy_loss": -ret}}}


def _shown_scalars(tensorboard_dir: Path) -> dict[str, list[tuple[int, float]]]:
    """The scalars TensorBoard shows: its loader reads the event files in name order and, at a
    ``SessionLog.START`` event of step s (a writer's ``purge_step``), drops what it read with
    step >= s (tensorboard's EventAccumulator, ``purge_orphaned_data``)."""
    from tensorboardX.proto import event_pb2

    shown: dict[str, list[tuple[int, float]]] = {}
    for path in sorted(tensorboard_dir.glob("events.out.tfevents.*")):
        data, offset = path.read_bytes(), 0
        while offset < len(data):  # TFRecord framing: length, crc, payload, crc
            (length,) = struct.unpack("<Q", data[offset:offset + 8])
            event = event_pb2.Event.FromString(data[offset + 12:offset + 12 + length])
            offset += 12 + length + 4
            if event.HasField("session_log") and event.session_log.status == event_pb2.SessionLog.START:
                shown = {tag: [(s, v) for s, v in points if s < event.step] for tag, points in shown.items()}
            for value in event.summary.value:
                shown.setdefault(value.tag, []).append((event.step, value.simple_value))
    return shown


def test_resumed_run_shows_each_iteration_once_in_tensorboard(tmp_path):
    """A run that logged iterations 1 to 3 and resumed from its checkpoint of iteration 2 had
    iteration 3 twice in TensorBoard (the dead session's point and the new one: progress.csv
    and result.jsonl cut the dead rows, the event files kept them), or, resumed within the
    second its first writer started, iterations 1 and 2 not at all (the new event file had the
    old one's name and replaced it)."""
    run = tmp_path / "run"
    log = RunLog(run, tensorboard=True)
    for iteration, ret in ((1, 10.0), (2, 20.0), (3, 30.0)):
        log.append(_result(iteration, ret))
    log.close()
    resumed = RunLog(run, resume_iteration=2, tensorboard=True)
    resumed.append(_result(3, 33.0))
    resumed.append(_result(4, 44.0))
    resumed.close()
    _, rows = read_progress(run / "progress.csv")
    shown = _shown_scalars(run / "tensorboard")
    steps = [int(r["timesteps"]) for r in rows]
    assert steps == [64, 128, 192, 256]
    for column in ("episode_return_mean", "policy_loss"):
        assert shown[column] == [(s, r[column]) for s, r in zip(steps, rows)]


def test_numpy_learner_stats_reach_progress_csv_and_tensorboard(tmp_path):
    """A learner stat computed with numpy (``np.float32(loss)``, ``np.int64(count)``, as a
    custom algorithm's ``training_step`` returns them) was left out of progress.csv and
    TensorBoard, which took Python ints and floats only, while MLflow, W&B and ``keep_best``
    read it: the run's files disagreed with its loggers, silently. An ``np.float64`` (a float)
    was written as its repr, ``np.float64(0.25)`` in numpy 2: text that ``read_progress`` (``cairn
    plot``) and spreadsheets cannot read as a number."""
    import numpy as np

    run = tmp_path / "run"
    log = RunLog(run, tensorboard=True)
    result = _result(1, 10.0)
    result["learners"]["default_policy"].update(
        loss32=np.float32(0.5), loss64=np.float64(0.25), count=np.int64(3), nan32=np.float32("nan"),
        flag=np.bool_(True))
    row = log.append(result)
    log.close()
    assert (row["loss32"], row["count"]) == (0.5, 3)
    assert all(type(row[k]) is float for k in ("loss32", "loss64", "nan32"))
    assert type(row["count"]) is int and "flag" not in row
    _, rows = read_progress(run / "progress.csv")
    assert (rows[0]["loss32"], rows[0]["loss64"], rows[0]["count"]) == (0.5, 0.25, 3.0)
    assert np.isnan(rows[0]["nan32"])
    shown = _shown_scalars(run / "tensorboard")
    assert shown["loss32"] == [(64, 0.5)] and shown["loss64"] == [(64, 0.25)]
    assert shown["count"] == [(64, 3.0)] and "nan32" not in shown


def test_resume_without_progress_csv_keeps_the_kept_iterations_tensorboard_points(tmp_path):
    """The purge starts after the checkpoint's env steps, read from result.jsonl too: with
    progress.csv gone, TensorBoard still shows iterations 1 and 2 of the first session."""
    run = tmp_path / "run"
    log = RunLog(run, tensorboard=True)
    for iteration in (1, 2, 3):
        log.append(_result(iteration, 10.0 * iteration))
    log.close()
    (run / "progress.csv").unlink()
    resumed = RunLog(run, resume_iteration=2, tensorboard=True)
    resumed.append(_result(3, 33.0))
    resumed.close()
    shown = _shown_scalars(run / "tensorboard")["episode_return_mean"]
    assert shown == [(64, 10.0), (128, 20.0), (192, 33.0)]
