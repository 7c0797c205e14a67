"""``cairn train``: train an algorithm into a run directory, or resume one.

    cairn train --algo PPO --env CartPole-v1 --stop-timesteps 50000 --out runs/cartpole
    cairn train --config runs/cartpole/config.json --seed 2 --out runs/cartpole_s2
    cairn train --resume runs/cartpole --stop-timesteps 100000
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cairn.cli.common import (
    ArgumentsError,
    UsageError,
    check_seed,
    is_assignment,
)
from cairn.cli.env_names import ENV_FORMS, ENV_HELP, add_import_option
from cairn.cli.loggers import add_logger_options, attach_loggers
from cairn.cli.run_checkpoints import CHECKPOINTS_DIR, latest_and_unreadable_after
from cairn.cli.run_dir import check_new_run_dir, local_dir
from cairn.cli.runlog import RUN_FILE, RunLog
from cairn.cli.train_config import build_config, config_settings
from cairn.cli.train_loop import should_stop, train_run

if TYPE_CHECKING:
    from cairn.algorithms.algorithm import Algorithm

__all__ = ["add_parser", "run", "DEFAULT_RUN_DIR", "DEFAULT_STOP_ITERS", "DEFAULT_KEEP"]

DEFAULT_RUN_DIR = "~/cairn_results/<ALGO>_<YYYY-mm-dd_HH-MM-SS>_<pid>"
"""The run directory without ``--out`` (``Algorithm.log_dir``)."""
DEFAULT_STOP_ITERS = 10
"""Iterations trained when no stop criterion is given."""
DEFAULT_KEEP = 3
"""Checkpoints a run keeps (the newest ones) without ``--keep``."""

_log = logging.getLogger("cairn.cli")

EPILOG = f"""\
A run directory (--out; default {DEFAULT_RUN_DIR}) holds
  config.json     the config, as to_dict() (--config RUN/config.json trains the same way)
  run.json        this command's settings (stop criteria, checkpointing), for --resume
  progress.csv    one row per iteration: training_iteration, timesteps, time, episode_return_mean/
                  min/max, episode_len_mean, episodes, env_steps_per_s, the learners' losses
  result.jsonl    every iteration's full result dict, one JSON document per line
  checkpoints/    checkpoint_<NNNNNN> (the iteration): every --checkpoint-every N iterations and
                  at the end; the newest --keep (default {DEFAULT_KEEP}) and the best by
                  episode_return_mean are kept
  tensorboard/    TensorBoard event files (--tensorboard)

--config takes files (YAML or JSON holding a config's to_dict() form) and KEY=VALUE settings
(values are JSON: lr=0.001 model='{{"hidden": [32, 32]}}'), after one --config or several; later
ones win, and --env, --seed and --algo override them. Without a stop criterion training stops
after {DEFAULT_STOP_ITERS} iterations; stop criteria count from the start of the run, also after --resume.

--resume RUN continues RUN from its latest checkpoint: iteration and step counters, random
generators, optimizer state and the metrics window go on, and the log files are appended. Its stop
criteria are the run's own unless given again; KEY=VALUE settings become config_overrides.

Ctrl-C finishes the current iteration, saves a checkpoint and exits with status 130 (continue
with --resume RUN); a second Ctrl-C quits at once without saving. SIGTERM (kill, a job
scheduler or container runtime) does the same and exits with status 143: a scheduler's grace
period before SIGKILL must cover one iteration and a save. DQN, SAC and TD3 runs store their
replay buffers in the run's checkpoints (store_replay_buffer=true unless --config sets it), so
that --resume continues exactly; store_replay_buffer=false keeps checkpoints small, and a resumed
run then starts from an empty buffer.

""" + ENV_FORMS


def add_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    """Add ``cairn train`` to the subcommands ``sub``."""
    p = sub.add_parser("train", parents=[common], help="train an algorithm into a run directory",
                       epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--algo", default=None,
                   help="algorithm: a registered name (PPO, IMPALA, APPO, DQN, SAC, TD3) or "
                        "package.module:ClassName")
    p.add_argument("--env", default=None, help=ENV_HELP)
    p.add_argument("--config", nargs="+", action="extend", default=[], metavar="FILE|KEY=VALUE",
                   help="config files (YAML/JSON) and KEY=VALUE settings; see below")
    p.add_argument("--seed", type=int, default=None, metavar="S", help="seed of the run (config key 'seed')")
    p.add_argument("--stop-iters", type=int, default=None, metavar="N", help="stop after N iterations")
    p.add_argument("--stop-timesteps", type=int, default=None, metavar="N", help="stop after N env steps")
    p.add_argument("--stop-reward", type=float, default=None, metavar="R",
                   help="stop when episode_return_mean reaches R")
    p.add_argument("--out", default=None, metavar="RUN", help=f"run directory (default {DEFAULT_RUN_DIR})")
    p.add_argument("--overwrite", action="store_true",
                   help="start a new run in an --out that holds one: its log files and checkpoints "
                        "are removed first (other files are left alone)")
    p.add_argument("--checkpoint-every", type=int, default=None, metavar="N",
                   help="also save a checkpoint every N iterations (default: only at the end)")
    p.add_argument("--checkpoint-every-timesteps", type=int, default=None, metavar="N",
                   help="also save a checkpoint each time the env steps pass a multiple of N "
                        "(SB3's save_freq)")
    p.add_argument("--keep", type=int, default=None, metavar="N",
                   help=f"keep the newest N checkpoints (default {DEFAULT_KEEP}; 0 keeps all) and the best "
                        "by episode_return_mean")
    p.add_argument("--resume", default=None, metavar="RUN", help="continue RUN from its latest checkpoint")
    p.add_argument("--tensorboard", action="store_true", help="also write TensorBoard event files")
    p.add_argument("--league", action="store_true",
                   help="league self-play for a two-player game (docs/league.md): policy 'main', a frozen "
                        "snapshot every 10 iterations, PFSP opponents, a random legal player as fixed "
                        "opponent; the progress shows main's mean win rate against its opponents "
                        "(snapshots and random legal) and its rating (config key league_config for "
                        "other settings)")
    add_logger_options(p)
    add_import_option(p)
    p.set_defaults(run=run, parser=p)


# ------------------------------------------------------------------------------- training
def _stop_settings(args: argparse.Namespace, saved: dict[str, Any] | None) -> dict[str, Any]:
    given = {"iters": args.stop_iters, "timesteps": args.stop_timesteps, "reward": args.stop_reward}
    if all(v is None for v in given.values()):
        given = dict(saved) if saved else {"iters": DEFAULT_STOP_ITERS, "timesteps": None, "reward": None}
    return given


def _check_counts(args: argparse.Namespace) -> None:
    for flag, value in (("--checkpoint-every", args.checkpoint_every),
                        ("--checkpoint-every-timesteps", args.checkpoint_every_timesteps),
                        ("--keep", args.keep),
                        ("--stop-iters", args.stop_iters), ("--stop-timesteps", args.stop_timesteps)):
        if value is not None and value < (0 if flag == "--keep" else 1):
            raise UsageError(f"{flag} {value}: expected an int of at least {0 if flag == '--keep' else 1}.")
    check_seed(args.seed)
    if args.stop_reward is not None and not math.isfinite(args.stop_reward):  # NaN is never reached
        raise UsageError(f"--stop-reward {args.stop_reward}: expected a finite number (the "
                         "episode_return_mean at which to stop).")
    if args.tensorboard:
        try:
            import tensorboardX  # noqa: F401
        except ImportError:
            raise UsageError(
                "--tensorboard needs tensorboardX: pip install 'cairn-rl[tensorboard]'."
            ) from None


def _resume(args: argparse.Namespace) -> int:
    from cairn.algorithms.algorithm import Algorithm
    from cairn.errors import ConfigError, RestoredSettingError

    given = [flag for flag, value in (("--algo", args.algo), ("--env", args.env), ("--seed", args.seed),
                                      ("--out", args.out)) if value is not None]
    given += [flag for flag, on in (("--overwrite", args.overwrite), ("--league", args.league)) if on]
    files = [item for item in args.config if not is_assignment(item)]
    if given or files:
        raise ArgumentsError(f"--resume continues a run as it was configured; "
                             f"leave out {', '.join(given + files)} "
                             "(KEY=VALUE settings are allowed: they become config_overrides).")
    run_dir = local_dir(args.resume, "--resume")
    latest, damaged = latest_and_unreadable_after(str(run_dir / CHECKPOINTS_DIR))
    if latest is None:
        raise UsageError(f"--resume {args.resume}: no checkpoint in {run_dir / CHECKPOINTS_DIR}; "
                         "is it a run directory of cairn train?")
    if damaged is not None:
        raise UsageError(f"--resume {args.resume}: its newest checkpoint {damaged[0]} cannot be read "
                         f"({damaged[1]}); resuming from {latest} would train its iterations again and "
                         f"not save them. Check it with cairn checkpoint verify {damaged[0]}; restore it "
                         f"from a copy, or delete it (and its .record.json) to resume from {latest}.")
    saved: dict[str, Any] = {}
    if (run_dir / RUN_FILE).is_file():
        saved = json.loads((run_dir / RUN_FILE).read_text())
    _, overrides = config_settings(args)
    if "seed" in overrides:  # as --seed: the checkpoint's generators go on, whatever the config says
        raise UsageError(f"--resume {args.resume}: seed={json.dumps(overrides['seed'])} would not apply: the "
                         "run's random generators go on from its checkpoint (config.json would name a seed "
                         f"the run does not use). Leave it out, or start a new run with it: --config "
                         f"{run_dir / 'config.json'} --seed {overrides['seed']} --out NEW_RUN.")
    def refuse(unapplied: list[str]) -> UsageError:
        return UsageError(f"--resume {args.resume}: {'; '.join(unapplied)}: the run's policies keep the "
                          "settings they were built with, so this would be written to config.json but not "
                          "used. Leave it out, or start a new run with it: --config "
                          f"{run_dir / 'config.json'} KEY=VALUE --out NEW_RUN.")
    try:
        algo = Algorithm.from_checkpoint(latest, config_overrides=overrides or None)
    except ConfigError as exc:  # the library's refusal of a setting a restored policy keeps
        refused = exc if isinstance(exc, RestoredSettingError) else exc.__cause__
        if not isinstance(refused, RestoredSettingError):
            raise
        raise refuse([f"{refused.setting}={json.dumps(refused.given, default=str)} (the run's policies "
                      f"keep {json.dumps(refused.stored, default=str)})"]) from exc
    try:
        unapplied = _unapplied_policy_settings(algo, overrides)
        if unapplied:
            raise refuse(unapplied)
        attach_loggers(algo, args)
        settings = {**saved, "algo": type(algo).__name__, "stop": _stop_settings(args, saved.get("stop")),
                    "checkpoint_every": args.checkpoint_every or saved.get("checkpoint_every"),
                    "checkpoint_every_timesteps": (args.checkpoint_every_timesteps
                                                   or saved.get("checkpoint_every_timesteps")),
                    "keep": args.keep if args.keep is not None else saved.get("keep", DEFAULT_KEEP)}
        returns = [float(e["return"]) for e in algo.recent_episodes]
        state = {"training_iteration": algo.iteration, **algo.counters,
                 "episode_return_mean": sum(returns) / len(returns) if returns else float("nan")}
        if should_stop(settings["stop"], state):  # nothing to do: the files stay as they are
            criteria = ", ".join(f"--stop-{k} {v}" for k, v in settings["stop"].items() if v is not None)
            print(f"{run_dir} already meets its stop criteria ({criteria}) at iteration {algo.iteration}; "
                  "give a later one to train on.")
            return 0
        log = RunLog(run_dir, resume_iteration=algo.iteration, tensorboard=args.tensorboard,
                     evaluates=bool(algo.config.evaluation_interval))
        log.write_config(algo.config.to_dict(), settings)
        _log.info("resuming %s from %s (iteration %d)", run_dir, latest, algo.iteration)
        return train_run(algo, run_dir, args, settings, log, state)
    finally:
        algo.stop()


def _unapplied_policy_settings(algo: Algorithm, overrides: dict[str, Any]) -> list[str]:
    """The ``KEY=VALUE`` settings of a resume that the restored policies do not take: a policy
    is rebuilt from its stored settings (its network, its observation filter, DQN's epsilon
    schedule, ...) and only some of them (``lr``, SAC's learning rates) follow the restored
    config. One ``key: this value, the run's policy <id> keeps <value>`` line each. The model and
    the filter are not compared: the restore refuses them (``RestoredSettingError``)."""
    found = []
    for pid, policy in algo.policies.items():
        wanted, kept = algo.config.policy_config(pid), policy.config
        for key in overrides:
            if key not in wanted or key not in kept or key == "model":
                continue
            if wanted[key] != kept[key]:
                found.append(f"{key}={json.dumps(wanted[key], default=str)} (policy {pid!r} keeps "
                             f"{json.dumps(kept[key], default=str)})")
    return found


def run(args: argparse.Namespace) -> int:
    """Run ``cairn train`` with parsed arguments."""
    _check_counts(args)
    if args.resume is not None:
        return _resume(args)
    config = build_config(args)
    if args.out is not None:
        run_dir = local_dir(args.out, "--out")
        check_new_run_dir(run_dir, args.out, overwrite=args.overwrite)
    settings = {"algo": config.algo_class_name, "stop": _stop_settings(args, None),
                "checkpoint_every": args.checkpoint_every,
                "checkpoint_every_timesteps": args.checkpoint_every_timesteps,
                "keep": DEFAULT_KEEP if args.keep is None else args.keep, "started_at": time.time()}
    algo = config.build()
    try:
        attach_loggers(algo, args)
        if args.out is None:
            run_dir = Path(algo.log_dir)
        log = RunLog(run_dir, tensorboard=args.tensorboard, evaluates=bool(algo.config.evaluation_interval))
        log.write_config(algo.config.to_dict(), settings)
        return train_run(algo, run_dir, args, settings, log, None)
    finally:
        algo.stop()

