"""The ``cairn`` command line: train, export and inspect.

    cairn train --algo PPO --env CartPole-v1 --stop-iters 20 --out runs/cartpole
    cairn train ... --out runs/cartpole --overwrite   # replace the checkpoint there
    cairn export runs/cartpole --format onnx --opset 18 --out model_dir
    cairn export runs/ma --policy-id p0 --policy-id p1 --format torch --out models  # models/p0, models/p1
    cairn info runs/cartpole
"""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from cairn._version import __version__
from cairn.errors import CairnError

__all__ = ["main", "EXIT_INTERRUPTED"]

EXIT_INTERRUPTED = 130
"""Exit status after Ctrl-C (128 + SIGINT, the shell's convention)."""

DEFAULT_OUT = "~/cairn_results/<ALGO>_<YYYY-mm-dd_HH-MM-SS>_<pid>/checkpoint_<NNNNNN>"
"""Where ``Algorithm.save()`` puts a checkpoint without a path (``Algorithm.log_dir``)."""

TRAIN_EPILOG = f"""\
Without --out the checkpoint is written to
  {DEFAULT_OUT}
(NNNNNN: the iteration). A checkpoint already at --out is replaced only with --overwrite.
Ctrl-C saves a checkpoint after the current iteration and exits with status 130.
"""


EXPORT_EPILOG = """\
One policy (a Policy checkpoint, a single --policy-id, or an Algorithm checkpoint with one
policy) is written into --out itself; several are written into --out/<policy_id>/ each.
Only the chosen policies are read from the checkpoint.
"""


def _parse_assignment(text: str) -> tuple[str, Any]:
    key, sep, raw = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected key=value, got {text!r}")
    try:
        value = json.loads(raw)
    except json.JSONDecodeError:
        value = raw  # a bare string such as MeanStdFilter
    return key, value


def _build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="cairn", description=__doc__.split("\n")[0])
    parser.add_argument("--version", action="version", version=f"cairn {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    train = sub.add_parser("train", help="train an algorithm and save a checkpoint",
                           epilog=TRAIN_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    train.add_argument("--algo", required=True, help="algorithm name, e.g. PPO or DQN")
    train.add_argument("--env", required=True, help="Gymnasium ID or registered env name")
    train.add_argument("--stop-iters", type=int, default=None, help="stop after N iterations")
    train.add_argument("--stop-timesteps", type=int, default=None, help="stop after N env steps")
    train.add_argument("--stop-reward", type=float, default=None,
                       help="stop when episode_return_mean reaches R")
    train.add_argument("--config", type=_parse_assignment, nargs="*", default=[], metavar="KEY=VALUE",
                       help="config settings by their to_dict() keys; values are JSON (lr=0.001)")
    train.add_argument("--out", default=None,
                       help="checkpoint directory to write at the end (default: see below)")
    train.add_argument("--overwrite", action="store_true",
                       help="replace a checkpoint already at --out (refused otherwise)")

    export = sub.add_parser("export", help="export policies' models as ONNX or torch programs",
                            epilog=EXPORT_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    export.add_argument("checkpoint", help="Algorithm or Policy checkpoint directory")
    export.add_argument("--policy-id", action="append", default=None, metavar="ID",
                        help="a policy of an Algorithm checkpoint to export (repeatable; "
                             "default: all of them)")
    export.add_argument("--format", choices=["onnx", "torch"], required=True)
    export.add_argument("--opset", type=int, default=None,
                        help="ONNX opset (--format onnx only; default 18)")
    export.add_argument("--out", required=True, help="output directory")

    info = sub.add_parser("info", help="print a checkpoint's manifest summary as JSON")
    info.add_argument("checkpoint")
    return parser


def _out_problem(out: str, *, overwrite: bool) -> str | None:
    """Why ``cairn train`` must not write its checkpoint to ``out``, or None; checked before
    training so that a refusal costs nothing. The save's own rules come from
    :func:`cairn.checkpoint.save_location` (``~``, ``file://`` URLs, never replacing a
    directory that holds something else); the CLI adds that replacing a checkpoint needs
    ``--overwrite``."""
    from cairn.checkpoint import save_location
    from cairn.checkpoint.format import MANIFEST_FILE
    from cairn.errors import CheckpointError

    try:
        path = save_location(out)
    except CheckpointError as exc:
        return f"--out {out}: {exc} (--overwrite replaces checkpoints only.)"
    if os.path.lexists(path) and not path.is_dir():
        return f"--out {out} exists and is not a directory; choose another --out."
    if (path / MANIFEST_FILE).is_file() and not overwrite:
        return (f"--out {out} already holds a checkpoint; pass --overwrite to replace it, "
                "or choose another --out.")
    return None


class _InterruptRequest:
    """SIGINT during ``cairn train``: the first one asks to stop at the end of the current
    iteration and save (so the checkpoint resumes exactly); the next raises KeyboardInterrupt.

    The handler is installed only where Python's own one is (in the main thread, and not where
    the shell made the process ignore SIGINT).
    """

    def __init__(self) -> None:
        self.requested = False
        self._installed = False

    def __enter__(self) -> _InterruptRequest:
        if (threading.current_thread() is threading.main_thread()
                and signal.getsignal(signal.SIGINT) is signal.default_int_handler):
            signal.signal(signal.SIGINT, self._handle)
            self._installed = True
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self._installed:
            signal.signal(signal.SIGINT, signal.default_int_handler)

    def _handle(self, signum: int, frame: object) -> None:
        self.requested = True
        signal.signal(signal.SIGINT, signal.default_int_handler)
        # os.write, not print: a signal handler may run in the middle of another write to stderr.
        message = ("\ncairn train: interrupted; finishing this iteration, then saving a "
                   "checkpoint (Ctrl-C again to quit without saving)\n")
        try:
            os.write(2, message.encode())
        except OSError:
            pass


def _print_progress(result: dict[str, Any]) -> None:
    ret = result["episode_return_mean"]
    print(
        f"iter {result['training_iteration']:4d} | env steps "
        f"{result['num_env_steps_sampled_lifetime']:8d} | return_mean "
        f"{'nan' if math.isnan(ret) else f'{ret:8.2f}'} | len_mean "
        f"{result['episode_len_mean']:7.1f} | {result['time_this_iter_s']:.2f}s",
        flush=True,
    )


def _should_stop(args: argparse.Namespace, result: dict[str, Any]) -> bool:
    ret = result["episode_return_mean"]
    return (
        (args.stop_iters is not None and result["training_iteration"] >= args.stop_iters)
        or (args.stop_timesteps is not None
            and result["num_env_steps_sampled_lifetime"] >= args.stop_timesteps)
        or (args.stop_reward is not None and not math.isnan(ret) and ret >= args.stop_reward)
    )


def _not_saved(out: str | None) -> int:
    where = f"; {out} is unchanged" if out is not None else ""
    print(f"cairn train: interrupted again: checkpoint not saved{where}.", file=sys.stderr)
    return EXIT_INTERRUPTED


def _train_and_save(algo: Any, args: argparse.Namespace) -> int:
    with _InterruptRequest() as interrupt:
        try:
            while not interrupt.requested:
                result = algo.train()
                _print_progress(result)
                if _should_stop(args, result):
                    break
        except KeyboardInterrupt:
            if interrupt.requested:  # the second Ctrl-C: the user wants out now
                return _not_saved(args.out)
            # No handler of ours saw it (another thread's or library's signal handling): save
            # what there is, possibly from the middle of an iteration.
            interrupt.requested = True
        try:
            path = algo.save(args.out)
        except KeyboardInterrupt:  # saves are atomic: an interrupted one leaves the old checkpoint
            return _not_saved(args.out)
    if interrupt.requested:
        print(f"interrupted after iteration {algo.iteration}: checkpoint saved to {path}; continue "
              f"with cairn.Algorithm.from_checkpoint({path!r}).train()", flush=True)
        return EXIT_INTERRUPTED
    print(f"checkpoint: {path}")
    return 0


def _train(args: argparse.Namespace) -> int:
    from cairn.algorithms.algorithm import Algorithm
    from cairn.registry import resolve_class

    try:
        algo_cls = resolve_class(args.algo, Algorithm)
    except CairnError:
        print(f"cairn train: unknown --algo {args.algo!r}; try PPO or DQN.", file=sys.stderr)
        return 2
    if args.out is not None:
        problem = _out_problem(args.out, overwrite=args.overwrite)
        if problem is not None:
            print(f"cairn train: {problem}", file=sys.stderr)
            return 2
    if args.stop_iters is None and args.stop_timesteps is None and args.stop_reward is None:
        args.stop_iters = 10
    base = algo_cls.config_class().environment(args.env)
    data = base.to_dict()
    for key, value in args.config:
        data[key] = value
    config = type(base).from_dict(data)
    algo = config.build()
    try:
        return _train_and_save(algo, args)
    finally:
        algo.stop()


def _export_targets(args: argparse.Namespace) -> list[tuple[str | None, Any, Path]] | str:
    """What ``cairn export`` writes: ``(policy_id or None for a Policy checkpoint, policy,
    directory)`` for each chosen policy; or the usage problem, as a message."""
    from cairn.checkpoint.reader import get_checkpoint_info
    from cairn.policy.policy import Policy

    out = Path(args.out)
    info = get_checkpoint_info(args.checkpoint)
    if info["type"] != "Algorithm":
        if args.policy_id:
            return ("--policy-id applies to Algorithm checkpoints; this is a Policy checkpoint "
                    "(leave --policy-id out).")
        return [(None, Policy.from_checkpoint(args.checkpoint), out)]
    available = list(info["policy_ids"])
    chosen = list(dict.fromkeys(args.policy_id)) if args.policy_id else available
    unknown = [pid for pid in chosen if pid not in available]
    if unknown:
        return f"no policy {unknown[0]!r}; the checkpoint has {sorted(available)}."
    policies = Policy.from_checkpoint(args.checkpoint, policy_ids=chosen)  # only those are read
    return [(pid, policies[pid], out / pid if len(chosen) > 1 else out) for pid in chosen]


def _export(args: argparse.Namespace) -> int:
    from cairn.export import DEFAULT_OPSET, export_model
    from cairn.export.onnx_model import check_opset

    if args.opset is not None and args.format != "onnx":
        print("cairn export: --opset applies to --format onnx only.", file=sys.stderr)
        return 2
    opset = None
    if args.format == "onnx":  # checked before any policy is read or written
        opset = check_opset(DEFAULT_OPSET if args.opset is None else args.opset)
    targets = _export_targets(args)
    if isinstance(targets, str):
        print(f"cairn export: {targets}", file=sys.stderr)
        return 2
    for pid, policy, out in targets:
        export_model(policy, out, onnx=opset)
        of = "" if pid is None else f" of policy {pid!r}"
        print(f"exported {args.format} model{of} to {out}", flush=True)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``cairn`` command (and ``python -m cairn``)."""
    args = _build_parser().parse_args(argv)
    try:
        if args.command == "train":
            return _train(args)
        if args.command == "export":
            return _export(args)
        from cairn.checkpoint.reader import get_checkpoint_info

        info = get_checkpoint_info(args.checkpoint)
        info.pop("files")
        print(json.dumps(info, indent=2))
        return 0
    except CairnError as exc:
        print(f"cairn {args.command}: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:  # before or after training, or in export/info: nothing to save
        print(f"cairn {args.command}: interrupted.", file=sys.stderr)
        return EXIT_INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
