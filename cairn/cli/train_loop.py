"""The loop of ``cairn train`` (a new run and ``--resume`` alike): iterations until a stop
criterion, a checkpoint whenever the run's manager says one is due and at the end, and Ctrl-C
(finish the iteration, save, exit 130; a second one quits without saving; an interrupt inside an
iteration saves nothing, as its state is part-way). SIGTERM, what ``kill``, job schedulers and
container runtimes send before SIGKILL, does what Ctrl-C does and exits 143.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cairn.cli.common import EXIT_INTERRUPTED
from cairn.cli.env_names import env_label
from cairn.cli.interrupt import InterruptRequest
from cairn.cli.progress import Reporter, make_reporter
from cairn.cli.run_checkpoints import BEST_METRIC, CHECKPOINTS_DIR, run_manager
from cairn.cli.runlog import RunLog

if TYPE_CHECKING:
    from cairn.algorithms.algorithm import Algorithm
    from cairn.checkpoint.manager import CheckpointManager

__all__ = ["should_stop", "train_run"]

_log = logging.getLogger("cairn.cli")


def should_stop(stop: dict[str, Any], result: dict[str, Any]) -> bool:
    """Whether ``result`` (an iteration's, or a resumed run's state) meets one of the run's stop
    criteria ``stop`` (``iters``, ``timesteps``, ``reward``; None: not set), or a callback set
    ``result["done"]``."""
    ret = result.get("episode_return_mean")
    return ((stop["iters"] is not None and result["training_iteration"] >= stop["iters"])
            or (stop["timesteps"] is not None
                and result["num_env_steps_sampled_lifetime"] >= stop["timesteps"])
            or (stop["reward"] is not None and ret is not None and ret == ret and ret >= stop["reward"])
            or bool(result.get("done")))  # a callback's on_train_result asked to stop


class _InsideIteration(KeyboardInterrupt):
    """A KeyboardInterrupt that our SIGINT handler did not turn into a request (raised by code,
    or where the handler is not installed) inside ``train()`` before the iteration counted:
    the learners may have updated part of it, and the counters moved on, so the algorithm is
    in a state that no run computes and that must not be saved (docs/fault-tolerance.md)."""

    def __init__(self, iteration: int) -> None:
        super().__init__(iteration)
        self.iteration = iteration


def _loop(algo: Algorithm, log: RunLog, reporter: Reporter, stop: dict[str, Any], manager: CheckpointManager,
          interrupt: InterruptRequest, last: list[dict[str, Any]]) -> tuple[str | None, bool]:
    """Train until a stop criterion or Ctrl-C/SIGTERM, saving when the manager says a save is
    due; returns (the checkpoint saved at the last iteration, or None; whether Ctrl-C or SIGTERM
    stopped it).
    ``last`` receives each iteration's result (the final save records its metric)."""
    saved_at: tuple[int, str] | None = None
    time_total = log.time_offset
    while not interrupt.requested:
        before = algo.iteration
        try:
            result = algo.train()
        except KeyboardInterrupt:
            if algo.iteration == before:  # the learners may be part-way: no state to save
                raise _InsideIteration(before + 1) from None
            raise
        time_total += result["time_this_iter_s"]
        result = {**result, "time_total_s": time_total}  # what the run log reports beyond train()
        last[:] = [result]
        log.append(result)
        reporter.update(result)
        saved = manager.save(algo, result)
        if saved is not None:
            saved_at = (algo.iteration, str(saved))
            _log.info("checkpoint %s", saved)
        if should_stop(stop, result):
            break
    latest = saved_at[1] if saved_at and saved_at[0] == algo.iteration else None
    return latest, interrupt.requested


def train_run(algo: Algorithm, run_dir: Path, args: argparse.Namespace, settings: dict[str, Any],
               log: RunLog, resumed: dict[str, Any] | None) -> int:
    manager = run_manager(str(run_dir / CHECKPOINTS_DIR), keep=settings["keep"] or None,
                          every=settings["checkpoint_every"],
                          every_timesteps=settings.get("checkpoint_every_timesteps"))
    title = f"{type(algo).__name__} {env_label(algo.config.env, algo.config.env_config)}"
    reporter = make_reporter(quiet=bool(getattr(args, "quiet", False)), title=title, stop=settings["stop"])
    last: list[dict[str, Any]] = []
    start = algo.iteration
    with InterruptRequest() as interrupt:
        reporter.start(resumed)
        try:
            try:
                latest, interrupted = _loop(algo, log, reporter, settings["stop"], manager, interrupt, last)
            except KeyboardInterrupt as exc:
                if interrupt.requested:  # the second Ctrl-C or SIGTERM: the user wants out now
                    return _not_saved(interrupt)
                if isinstance(exc, _InsideIteration):  # a save would replace a checkpoint by a part-way state
                    print(f"cairn train: interrupted inside iteration {exc.iteration}, whose state is "
                          "part-way: no checkpoint saved; the run's earlier checkpoints are unchanged.",
                          file=sys.stderr)
                    return EXIT_INTERRUPTED
                interrupt.requested = True  # raised outside our handler: save what there is
                latest, interrupted = None, True
            unchanged = resumed is not None and algo.iteration == start  # nothing counted since --resume
            try:
                path = (latest or (_resumed_from(manager, start) if unchanged else None)
                        or str(manager.save(algo, _final_result(algo, last), force=True)))
            except KeyboardInterrupt:  # saves are atomic: an interrupted one leaves the others
                return _not_saved(interrupt)
        finally:
            reporter.stop()
            log.close()
    if interrupted:
        lost = ("" if getattr(algo.config, "store_replay_buffer", True) else
                " (its replay buffer was not stored, as store_replay_buffer=false asked: the resumed run "
                "starts from an empty buffer)")
        how = "terminated (SIGTERM)" if interrupt.signum == signal.SIGTERM else "interrupted"
        print(f"{how} after iteration {algo.iteration}: checkpoint saved to {path}; continue with "
              f"cairn train --resume {run_dir}{lost}", flush=True)
        return interrupt.exit_status
    if last and last[0].get("done"):  # not one of this command's criteria: say who stopped
        print(f"stopped after iteration {algo.iteration}: the callbacks' on_train_result set "
              "result['done']", flush=True)
    print(f"checkpoint: {path}", flush=True)
    return 0


def _final_result(algo: Algorithm, last: list[dict[str, Any]]) -> dict[str, Any]:
    """The result the final save records with checkpoint ``algo.iteration``: that iteration's,
    or, when the loop never had it (a KeyboardInterrupt after train() counted the iteration but
    before it returned: an ``on_train_result`` callback, no SIGINT handler of ours), the
    algorithm's own counters (the env steps the timestep schedule needs) with no metric, so the
    previous iteration's return and steps are not recorded as this checkpoint's."""
    if last and last[0]["training_iteration"] == algo.iteration:
        return last[0]
    return {"training_iteration": algo.iteration, **algo.counters, BEST_METRIC: None}


def _resumed_from(manager: CheckpointManager, iteration: int) -> str | None:
    """The checkpoint a run resumed from at ``iteration``, when nothing has counted since: it
    holds the algorithm's state, so a final save would only replace it, and its record (the
    iteration's metric, its best status) by one with no result. None if the root's latest is
    another."""
    from cairn.checkpoint.manager import checkpoint_name

    latest = manager.latest()
    return latest if latest is not None and Path(latest).name == checkpoint_name(iteration) else None


def _not_saved(interrupt: InterruptRequest) -> int:
    print("cairn train: interrupted again: checkpoint not saved; "
          "the run's earlier checkpoints are unchanged.", file=sys.stderr)
    return interrupt.exit_status
