"""``cairn export``: policies' models as ONNX or torch programs that load without cairn."""

from __future__ import annotations

import argparse
import os
from typing import Any

from cairn.cli.common import CommandError, UsageError
from cairn.cli.env_names import add_import_option

__all__ = ["add_parser", "run"]

EPILOG = """\
One policy (a Policy checkpoint, a single --policy-id, or an Algorithm checkpoint with one
policy) is written into --out itself; several are written into --out/<policy_id>/ each.
Only the chosen policies are read from the checkpoint.
"""


def add_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    """Add ``cairn export`` to the subcommands ``sub``."""
    p = sub.add_parser("export", parents=[common], help="export policies' models as ONNX or torch programs",
                       epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("checkpoint",
                   help="Algorithm or Policy checkpoint, or a run directory RUN (or RUN/checkpoints) "
                        "for its newest checkpoint")
    p.add_argument("--policy-id", action="append", default=None, metavar="ID",
                   help="a policy of an Algorithm checkpoint to export (repeatable; default: all of them)")
    p.add_argument("--format", choices=["onnx", "torch", "saved_model"], required=True,
                   help="saved_model: a TensorFlow SavedModel of a Keras policy "
                        "(needs the tf extra; docs/keras.md)")
    p.add_argument("--opset", type=int, default=None, help="ONNX opset (--format onnx only; default 18)")
    p.add_argument("--extra-output", action="append", default=None, metavar="NAME", dest="extra_outputs",
                   help="an optional output to add after the default ones, e.g. value (repeatable)")
    p.add_argument("--out", required=True, help="output directory")
    add_import_option(p)
    p.set_defaults(run=run)


def _targets(args: argparse.Namespace) -> list[tuple[str | None, Any, str]]:
    """``(policy_id or None for a Policy checkpoint, policy, directory)`` for each chosen policy."""
    from cairn.checkpoint import get_checkpoint_info
    from cairn.policy.policy import Policy

    info = get_checkpoint_info(args.checkpoint)
    if info["type"] != "Algorithm":
        if args.policy_id:
            raise UsageError("--policy-id applies to Algorithm checkpoints; this is a Policy checkpoint "
                             "(leave --policy-id out).")
        return [(None, Policy.from_checkpoint(args.checkpoint), args.out)]
    available = list(info["policy_ids"])
    chosen = list(dict.fromkeys(args.policy_id)) if args.policy_id else available
    unknown = [pid for pid in chosen if pid not in available]
    if unknown:
        raise UsageError(f"no policy {unknown[0]!r}; the checkpoint has {sorted(available)}.")
    policies = Policy.from_checkpoint(args.checkpoint, policy_ids=chosen)  # only those are read
    return [(pid, policies[pid], os.path.join(args.out, pid) if len(chosen) > 1 else args.out)
            for pid in chosen]


def run(args: argparse.Namespace) -> int:
    """Run ``cairn export`` with parsed arguments."""
    from cairn.cli.run_checkpoints import checkpoint_or_latest_of_run
    from cairn.errors import ExportError
    from cairn.export import DEFAULT_OPSET, export_model
    from cairn.export.onnx_model import SUPPORTED_OPSETS, check_opset

    if args.opset is not None and args.format != "onnx":
        raise UsageError("--opset applies to --format onnx only.")
    opset = None
    if args.format == "onnx":  # checked before any policy is read or written
        try:
            opset = check_opset(DEFAULT_OPSET if args.opset is None else args.opset)
        except ExportError:  # its message names the Python keyword (onnx=...), not the flag
            raise CommandError(f"--opset {args.opset}: not an opset cairn exports. Valid opsets are: "
                               f"{list(SUPPORTED_OPSETS)} (default {DEFAULT_OPSET}).") from None
    if args.format == "saved_model" and args.extra_outputs:
        raise UsageError("--extra-output applies to --format onnx and torch only.")
    source = checkpoint_or_latest_of_run(args.checkpoint)
    # A run directory: name the checkpoint it stands for.
    origin = "" if source == args.checkpoint else f" from {source}"
    args.checkpoint = source
    for pid, policy, out in _targets(args):
        if args.format == "saved_model":  # Keras policies, through TensorFlow in a subprocess
            from cairn.export.keras_saved_model import export_saved_model

            export_saved_model(policy, out)
        else:
            export_model(policy, out, onnx=opset, extra_outputs=args.extra_outputs or ())
        of = "" if pid is None else f" of policy {pid!r}"
        print(f"exported {args.format} model{of}{origin} to {out}", flush=True)
    return 0
