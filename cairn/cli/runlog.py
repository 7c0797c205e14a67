"""A run directory's log files, written by ``cairn train``:

- ``config.json``: the algorithm's config as ``to_dict()`` (``--config RUN/config.json``
  trains the same way again);
- ``run.json``: the command's own settings (algorithm, stop criteria, checkpointing), which
  ``--resume`` starts from;
- ``progress.csv``: one row per iteration (:data:`PROGRESS_COLUMNS`, then the learners' numeric
  stats), for plots and spreadsheets;
- ``result.jsonl``: every iteration's full result dict, one JSON document per line (NaN as
  null);
- ``tensorboard/``: TensorBoard event files of the progress columns (``--tensorboard``).

Rows are flushed as they are written. On resume the files are appended; rows of iterations
after the checkpoint resumed from (written before a crash) are cut off first, so that every
iteration appears once (in TensorBoard, the resumed session's events hide those points:
``purge_step``).
"""

from __future__ import annotations

import csv
import io
import json
import math
import numbers
import os
from collections.abc import Mapping
from pathlib import Path
from types import EllipsisType
from typing import Any

from cairn.cli.common import json_safe
from cairn.result_names import flat_result

__all__ = ["CONFIG_FILE", "RUN_FILE", "PROGRESS_FILE", "RESULT_FILE", "TENSORBOARD_DIR", "PROGRESS_COLUMNS",
           "RunLog", "bare_learner_policy", "league_columns", "progress_row", "read_progress",
           "write_json_atomic", "RUN_FILES"]

CONFIG_FILE = "config.json"
RUN_FILE = "run.json"
PROGRESS_FILE = "progress.csv"
RESULT_FILE = "result.jsonl"
TENSORBOARD_DIR = "tensorboard"
#: What ``cairn train`` writes into a run directory (besides ``checkpoints/``).
RUN_FILES = (CONFIG_FILE, RUN_FILE, PROGRESS_FILE, RESULT_FILE, TENSORBOARD_DIR)

#: The first columns of progress.csv; the learners' stats follow (``policy_loss`` ... of the
#: one policy of the first iteration that learned, ``<policy_id>/policy_loss`` of any other).
_EVALUATION_COLUMN = "evaluation/episode_return_mean"
PROGRESS_COLUMNS = (
    "training_iteration", "timesteps", "time", "episode_return_mean", "episode_return_min",
    "episode_return_max", "episode_len_mean", "episodes", "env_steps_per_s",
)


def bare_learner_policy(learners: Mapping[str, Any]) -> str | None:
    """The policy whose learner stats a run names without its ID (``policy_loss``), decided by
    the first iteration that learned (``learners``): its one policy, or None when several
    learned (every policy's stats are then ``<policy_id>/<stat>``)."""
    return next(iter(learners)) if len(learners) == 1 else None


def progress_row(result: Mapping[str, Any], *,
                 bare_policy: str | EllipsisType | None = ...) -> dict[str, Any]:
    """One progress.csv row from a result dict of ``cairn train`` (``Algorithm.train()``'s,
    with ``time_total_s`` added).

    ``bare_policy``: the policy whose learner stats take the bare names, every other policy's
    being ``<policy_id>/<stat>`` (:func:`bare_learner_policy` of the run's first iteration that
    learned, so that a column never holds two policies' stats); ``...``: decided by this
    result alone."""
    row: dict[str, Any] = {
        "training_iteration": result["training_iteration"],
        "timesteps": result["num_env_steps_sampled_lifetime"],
        "time": result.get("time_total_s"),
        "episode_return_mean": result.get("episode_return_mean"),
        "episode_return_min": result.get("episode_return_min"),
        "episode_return_max": result.get("episode_return_max"),
        "episode_len_mean": result.get("episode_len_mean"),
        "episodes": result.get("num_episodes_lifetime"),
        "env_steps_per_s": result.get("env_steps_per_s"),
    }
    learners: Mapping[str, Mapping[str, Any]] = result.get("learners") or {}
    bare = bare_learner_policy(learners) if bare_policy is ... else bare_policy
    for pid, stats in learners.items():
        for key, value in stats.items():
            # numpy's scalars too (registered as numbers.Real), as Python numbers: a CSV cell is
            # the value's repr, and the loggers and keep_best read them as well.
            if isinstance(value, numbers.Real) and not isinstance(value, bool):
                number = int(value) if isinstance(value, numbers.Integral) else float(value)
                row[key if pid == bare else f"{pid}/{key}"] = number
    # The evaluation's, cairn.Callbacks' and the league's columns are named as every metric is
    # (cairn.result_names: nested keys joined with "/"), so keep_best and the loggers name them alike.
    if "evaluation" in result:
        row[_EVALUATION_COLUMN] = result["evaluation"].get("episode_return_mean")
    row.update(flat_result({"custom_metrics": result.get("custom_metrics") or {}}))
    row.update(league_columns(result.get("league")))
    return row


#: The parts of a league's ``result["league"]`` that progress.csv shows.
_LEAGUE_COLUMNS = ("rating", "win_rate", "games", "pool_size")


def league_columns(league: Mapping[str, Any] | None) -> dict[str, float]:
    """The progress columns of a league's ``result["league"]`` (docs/league.md): every rating
    (``league/rating/<participant>``) and main's win rate against each opponent
    (``league/win_rate/<opponent>``), the games and the pool's size."""
    if not league:
        return {}
    return flat_result({"league": {key: league[key] for key in _LEAGUE_COLUMNS}})


def _cell(value: Any) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    # float(): numpy 2's repr of an np.float64 (a float) is "np.float64(0.5)", not a number.
    return repr(float(value)) if isinstance(value, float) else str(value)


def write_json_atomic(path: Path, data: Any) -> None:
    """Write ``data`` as JSON to ``path`` through a temporary file and a rename."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(json_safe(data), indent=2, allow_nan=False) + "\n")
    os.replace(tmp, path)


def _cut_after(path: Path, keep: Any) -> None:
    """Truncate ``path`` after its last line for which ``keep(line)`` holds (lines are kept
    from the start up to the first that fails); the bytes before are not rewritten."""
    if not path.exists():
        return
    offset = 0
    with open(path, "rb") as f:
        for line in f:
            if not keep(line.decode()):
                break
            offset += len(line)
    with open(path, "r+b") as f:
        f.truncate(offset)


def read_progress(path: str | os.PathLike[str]) -> tuple[list[str], list[dict[str, float]]]:
    """The columns and rows of a progress.csv, values as floats (nan for empty cells)."""
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        rows = [{k: float(v) if v not in ("", None) else math.nan for k, v in row.items()} for row in reader]
        return list(reader.fieldnames or []), rows


class RunLog:
    """Appends iterations to a run directory's progress.csv, result.jsonl and (optionally)
    TensorBoard events.

    Args:
        run_dir: The run directory (created if missing).
        resume_iteration: When resuming: the iteration of the checkpoint resumed from. Rows after
            it are cut off, the header of progress.csv is kept, and :attr:`time_offset` is the
            last kept row's time.
        tensorboard: Also write TensorBoard event files (needs tensorboardX).
        evaluates: The config evaluates every few iterations: progress.csv gets its
            ``evaluation/episode_return_mean`` column from the first row (empty between).

    progress.csv's columns are those of its first row; result.jsonl holds every key of every
    iteration (a policy added later, say).
    """

    def __init__(self, run_dir: Path, *, resume_iteration: int | None = None, tensorboard: bool = False,
                 evaluates: bool = False) -> None:
        self.run_dir = run_dir
        self.evaluates = evaluates
        run_dir.mkdir(parents=True, exist_ok=True)
        self.progress_path = run_dir / PROGRESS_FILE
        self.result_path = run_dir / RESULT_FILE
        self.columns: list[str] | None = None
        self.time_offset = 0.0
        #: Resuming: the env steps (TensorBoard's step) of the last row kept (of result.jsonl,
        #: then of progress.csv).
        self._resumed_timesteps = 0
        #: :func:`bare_learner_policy` of the run's first iteration that learned (``...``: none
        #: has yet); read back from result.jsonl on resume.
        self.bare_policy: str | EllipsisType | None = ...
        if resume_iteration is not None:
            self._resume(resume_iteration)
        self._tb: Any = None
        if tensorboard:
            from tensorboardX import SummaryWriter

            if resume_iteration is None:
                self._tb = SummaryWriter(str(run_dir / TENSORBOARD_DIR))
            else:
                # TensorBoard hides the dead session's points after the kept rows (purge_step:
                # those of step >= it), as the CSV cuts them. The suffix keeps this file from
                # taking the name, and so the place, of one started in the same second (the
                # names hold the start time in seconds) and sorts it after that one.
                self._tb = SummaryWriter(str(run_dir / TENSORBOARD_DIR),
                                         purge_step=self._resumed_timesteps + 1,
                                         filename_suffix=f".resumed-{resume_iteration}")

    def _decide_bare_policy(self, learners: Mapping[str, Any]) -> None:
        """Fix :attr:`bare_policy` at the run's first iteration that learned (``learners`` not
        empty); later ones leave it."""
        if self.bare_policy is ... and learners:
            self.bare_policy = bare_learner_policy(learners)

    def _resume(self, iteration: int) -> None:
        def result_kept(line: str) -> bool:
            try:
                result = json.loads(line)
                kept = int(result["training_iteration"]) <= iteration
            except (ValueError, KeyError, TypeError):
                return False
            if kept and isinstance(result.get("learners"), dict):
                self._decide_bare_policy(result["learners"])
            if kept and isinstance(result.get("num_env_steps_sampled_lifetime"), int):
                self._resumed_timesteps = result["num_env_steps_sampled_lifetime"]
            return kept

        _cut_after(self.result_path, result_kept)
        header: list[str] = []

        def row_kept(line: str) -> bool:
            if not header:
                header.extend(next(csv.reader([line])))
                return True
            cells = dict(zip(header, next(csv.reader([line]), [])))
            try:
                kept = int(float(cells.get("training_iteration", ""))) <= iteration
            except ValueError:
                return False
            if kept and cells.get("time"):
                self.time_offset = float(cells["time"])
            if kept and cells.get("timesteps"):
                self._resumed_timesteps = int(float(cells["timesteps"]))
            return kept

        _cut_after(self.progress_path, row_kept)
        self.columns = header or None

    def write_config(self, config: Mapping[str, Any], settings: Mapping[str, Any]) -> None:
        """Write config.json (the config's ``to_dict()``) and run.json (the command's settings)."""
        write_json_atomic(self.run_dir / CONFIG_FILE, config)
        write_json_atomic(self.run_dir / RUN_FILE, settings)

    def append(self, result: Mapping[str, Any]) -> dict[str, Any]:
        """Write one iteration; returns its progress row."""
        with open(self.result_path, "a") as f:
            f.write(json.dumps(json_safe(result), allow_nan=False) + "\n")
        self._decide_bare_policy(result.get("learners") or {})
        row = progress_row(result, bare_policy=self.bare_policy)
        new_file = (self.columns is None or not self.progress_path.exists()
                    or self.progress_path.stat().st_size == 0)
        if new_file:
            self.columns = list(row)
            if self.evaluates and _EVALUATION_COLUMN not in row:
                self.columns.append(_EVALUATION_COLUMN)
        assert self.columns is not None
        added = [column for column in row if column not in self.columns]
        if added and not new_file:  # e.g. a custom metric's first value: widen the header
            self._widen(added)
        buffer = io.StringIO()
        writer = csv.writer(buffer, lineterminator="\n")
        if new_file:
            writer.writerow(self.columns)
        writer.writerow([_cell(row.get(column)) for column in self.columns])
        with open(self.progress_path, "a", newline="") as f:
            f.write(buffer.getvalue())
        if self._tb is not None:
            step = int(row["timesteps"])
            for key, value in row.items():
                if key not in ("training_iteration", "timesteps") and isinstance(value, (int, float)) \
                        and math.isfinite(value):
                    self._tb.add_scalar(key, value, step)
            self._tb.flush()
        return row

    def _widen(self, added: list[str]) -> None:
        """Add columns to progress.csv, rewriting it (atomically) with empty cells for them."""
        assert self.columns is not None
        with open(self.progress_path, newline="") as f:
            rows = list(csv.reader(f))[1:]
        self.columns = [*self.columns, *added]
        buffer = io.StringIO()
        writer = csv.writer(buffer, lineterminator="\n")
        writer.writerow(self.columns)
        writer.writerows(r + [""] * (len(self.columns) - len(r)) for r in rows)
        tmp = self.progress_path.with_name(self.progress_path.name + ".tmp")
        tmp.write_text(buffer.getvalue())
        os.replace(tmp, self.progress_path)

    def close(self) -> None:
        """Close the TensorBoard writer (the CSV and JSONL files are closed after each row)."""
        if self._tb is not None:
            self._tb.close()
            self._tb = None

