"""``cairn checkpoint info|verify|upgrade|diff|ls``: look at, check and convert checkpoints
from the shell. (``cairn info CKPT`` is kept as the short form of ``cairn checkpoint info``.)

Checkpoint arguments are handed to cairn's checkpoint functions as given (strings), so every
location those accept (paths, ``file://`` URLs, and the URI schemes that cairn supports)
works here too.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from cairn.cli.checkpoint_diff import add_parser as add_diff
from cairn.cli.checkpoint_upgrade import add_parser as add_upgrade
from cairn.cli.checkpoint_verify import add_parser as add_verify
from cairn.cli.common import UsageError

__all__ = ["add_parser", "info", "ls", "format_size"]


def add_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    """Add ``cairn checkpoint ...`` (and the short ``cairn info``) to the subcommands ``sub``."""
    group = sub.add_parser("checkpoint", parents=[common],
                           help="inspect, verify, upgrade, compare, list checkpoints",
                           description="Inspect, verify, upgrade, compare and list checkpoints.")
    tools = group.add_subparsers(dest="action", required=True, metavar="ACTION")

    p = tools.add_parser("info", parents=[common], help="the manifest's summary as JSON (reads nothing else)")
    short = sub.add_parser("info", parents=[common], help="the same as: cairn checkpoint info")
    for parser in (p, short):
        parser.add_argument("checkpoint")
        parser.add_argument("--component", metavar="NAME", default=None,
                            help="one part of an Algorithm checkpoint: policies/<policy_id> (that "
                                 "policy's manifest summary) or policies/<policy_id>/weights (its "
                                 "weights' names, shapes and dtypes; reads that policy's files)")
        parser.set_defaults(run=info)

    for add in (add_verify, add_upgrade, add_diff):
        add(tools, common)

    p = tools.add_parser("ls", parents=[common], help="a run's (or a checkpoint root's) checkpoints",
                         description="List the checkpoints in ROOT (a run directory of cairn train, or the "
                                     "folder that holds its checkpoint_<N> directories): iteration, the "
                                     "run's episode_return_mean at that iteration, size, time written.")
    p.add_argument("root", metavar="ROOT")
    p.add_argument("--json", action="store_true", help="one JSON list instead of a table")
    p.set_defaults(run=ls)


def info(args: argparse.Namespace) -> int:
    """``cairn checkpoint info``: the manifest summary (without the file list) as JSON, or
    with ``--component`` the summary of one component; a run directory (or its
    ``checkpoints/`` folder) means its newest committed checkpoint, which ``checkpoint_dir`` names
    (:func:`cairn.checkpoint.components.component_info`)."""
    from cairn.checkpoint import get_checkpoint_info
    from cairn.checkpoint.components import component_info
    from cairn.cli.run_checkpoints import checkpoint_or_latest_of_run

    checkpoint = checkpoint_or_latest_of_run(args.checkpoint)  # a run directory: its newest checkpoint
    if args.component is not None:
        summary = component_info(checkpoint, args.component)
    else:
        summary = get_checkpoint_info(checkpoint)
    summary.pop("files", None)
    print(json.dumps(summary, indent=2))
    return 0


def format_size(size: float) -> str:
    """``1.5 MiB``: a byte count for people."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    raise AssertionError("unreachable")


def _metrics_by_iteration(run_dir: str) -> dict[int, float]:
    from cairn.cli.runlog import PROGRESS_FILE, read_progress

    path = os.path.join(run_dir, PROGRESS_FILE)
    if not os.path.isfile(path):
        return {}
    _, rows = read_progress(path)
    return {int(row["training_iteration"]): row.get("episode_return_mean", float("nan")) for row in rows}


def ls(args: argparse.Namespace) -> int:
    """``cairn checkpoint ls ROOT``."""
    from cairn.checkpoint.format import MANIFEST_FILE
    from cairn.cli.run_checkpoints import CHECKPOINTS_DIR, list_checkpoints_and_damaged

    root = os.path.expanduser(args.root)
    if not os.path.isdir(root):
        raise UsageError(f"{args.root} is not a directory; pass a run directory of cairn train or the folder "
                         "of its checkpoints.")
    if os.path.isfile(os.path.join(root, MANIFEST_FILE)):  # not "no checkpoints in CKPT"
        parent = os.path.dirname(os.path.abspath(root))
        run_dir = os.path.dirname(parent) if os.path.basename(parent) == CHECKPOINTS_DIR else parent
        raise UsageError(f"{args.root} is a checkpoint, not a run directory or a folder of checkpoints; "
                         f"its summary: cairn checkpoint info {args.root}; its run's checkpoints: "
                         f"cairn checkpoint ls {run_dir}")
    nested = os.path.join(root, CHECKPOINTS_DIR)
    folder, run_dir = ((nested, root) if os.path.isdir(nested)
                       else (root, os.path.dirname(os.path.abspath(root))))
    stored, damaged = list_checkpoints_and_damaged(folder)
    metrics = _metrics_by_iteration(run_dir)
    rows: list[dict[str, Any]] = [
        {"path": c.path, "iteration": c.iteration, "size": c.size, "created_at": c.created_at,
         "episode_return_mean": metrics.get(
             c.iteration, c.metric if c.metric_name == "episode_return_mean" else None)}
        for c in stored]
    scored = [r for r in rows if r["episode_return_mean"] is not None
              and r["episode_return_mean"] == r["episode_return_mean"]]
    best = (max(scored, key=lambda r: (r["episode_return_mean"], r["iteration"]))["iteration"]
            if scored else None)
    for r in rows:
        r["tags"] = [tag for tag, on in (("latest", r is rows[-1]), ("best", r["iteration"] == best)) if on]
    if args.json:
        from cairn.cli.common import json_safe

        print(json.dumps(json_safe(rows), indent=2))
        for path, error in damaged:  # the list's entries keep their fields; these have none to give
            print(f"cairn checkpoint ls: {path} cannot be read: {error}", file=sys.stderr)
        return 0
    names = [os.path.basename(r["path"]) for r in rows]
    name_width = max((len(name) for name in names), default=0)
    if rows:
        print(f"{'checkpoint':<{name_width}}  {'iteration':>9}  {'return_mean':>11}  {'size':>10}  created")
    for name, r in zip(names, rows, strict=True):
        metric = r["episode_return_mean"]
        shown = "-" if metric is None or metric != metric else f"{metric:.2f}"
        print(f"{name:<{name_width}}  {r['iteration']:>9}  {shown:>11}  "
              f"{format_size(r['size']):>10}  {r['created_at'] or '-':<25}  {', '.join(r['tags'])}".rstrip())
    for path, error in damaged:
        print(f"{os.path.basename(path):<{name_width}}  cannot be read: {error}")
    count = f"{len(rows)} checkpoint{'s' if len(rows) != 1 else ''}" if rows else "no checkpoints"
    unreadable = (f", and {len(damaged)} that cannot be read: "
                  f"{', '.join(os.path.basename(path) for path, _ in damaged)}" if damaged else "")
    print(f"{count} in {folder}{unreadable}")
    return 0
