"""``cairn checkpoint upgrade CKPT [--out DIR]``: rewrite a checkpoint of an older format
version in the current one.

The state trees are read with cairn's readers, which verify every file and run the one-step
migrations of :mod:`cairn.checkpoint.migrations` up to the current version; the writers then
write them afresh (new manifests, sizes and hashes). Native model files (``model/``), opaque to
the checkpoint format, are copied byte for byte after their hashes are checked. In place, the
new checkpoint replaces the old one atomically (the writers' rename): a failure at any point
leaves the old checkpoint as it was.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from cairn.cli.common import CommandError

__all__ = ["add_parser", "run", "upgrade_checkpoint"]


def add_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    """Add ``upgrade`` to ``cairn checkpoint``'s actions."""
    p = sub.add_parser("upgrade", parents=[common], help="migrate an older format version to the current one",
                       description="Rewrite CKPT in the current checkpoint format version, through the "
                                   "registered one-step migrations: in place (atomically), or into --out "
                                   "(CKPT is left as it is). A checkpoint already at the current version is "
                                   "left alone unless --out is given.")
    p.add_argument("checkpoint")
    p.add_argument("--out", default=None, help="write the upgraded checkpoint here instead of replacing CKPT")
    p.set_defaults(run=run)


def _native_copier(policy_dir: str) -> Any:
    """A ``native_files`` callback that copies the native model files of the Policy checkpoint
    in ``policy_dir`` (verified against its manifest) into the checkpoint being written."""
    from cairn.checkpoint import get_checkpoint_info
    from cairn.checkpoint.format import POLICY_ARRAYS_FILE, POLICY_STATE_FILE
    from cairn.checkpoint.storage import resolve_storage
    from cairn.checkpoint.storage.reuse_check import hash_problem

    info = get_checkpoint_info(policy_dir)
    source = resolve_storage(info["checkpoint_dir"])
    # the writer writes the state files itself; any other listed file is a native model file
    names = [name for name in info["files"] if name not in (POLICY_STATE_FILE, POLICY_ARRAYS_FILE)]
    if not names:
        return None
    record = info.get("native_model")

    def copy(directory: Path, files: dict[str, dict[str, Any]]) -> dict[str, Any] | None:
        for name in names:
            entry = info["files"][name]
            data = source.read_bytes(name, limit=entry["size"])
            if hash_problem([data], entry) is not None:
                raise CommandError(f"{info['checkpoint_dir']}/{name} does not match its manifest; run "
                                   "cairn checkpoint verify on it. Nothing was written.")
            target = directory / name
            target.parent.mkdir(parents=True, exist_ok=True)
            with open(target, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            files[name] = dict(entry)
        return dict(record) if isinstance(record, Mapping) else None

    return copy


def upgrade_checkpoint(checkpoint: str, out: str | None = None) -> tuple[str, str, str]:
    """Rewrite ``checkpoint`` in the current format version (into ``out``, or in place).
    Returns (the path written, the old format version, the new one)."""
    from cairn.checkpoint import (
        FORMAT_VERSION,
        get_checkpoint_info,
        load_algorithm_state,
        load_policy_state,
        write_algorithm_checkpoint,
        write_policy_checkpoint,
    )

    info = get_checkpoint_info(checkpoint)
    old = info["checkpoint_version"]
    target = checkpoint if out is None else out
    root = info["checkpoint_dir"]
    if info["type"] == "Algorithm":
        state = load_algorithm_state(checkpoint)
        native = {pid: copier for pid in state["policies"]
                  if (copier := _native_copier(f"{root.rstrip('/')}/policies/{pid}")) is not None}
        written = write_algorithm_checkpoint(target, state, policy_native_files=native,
                                             metadata=info.get("metadata"))  # the user's, kept
    else:
        state = load_policy_state(checkpoint)
        written = write_policy_checkpoint(target, state, native_files=_native_copier(str(root)))
    return written, old, FORMAT_VERSION


def run(args: argparse.Namespace) -> int:
    """Run ``cairn checkpoint upgrade``."""
    from cairn.checkpoint import FORMAT_VERSION, get_checkpoint_info
    from cairn.cli.run_checkpoints import refuse_run_directory

    refuse_run_directory(args.checkpoint, "cairn checkpoint upgrade")
    version = get_checkpoint_info(args.checkpoint)["checkpoint_version"]
    if version == FORMAT_VERSION and args.out is None:
        print(f"{args.checkpoint} is already at format version {version}, the current one; nothing to do.")
        return 0
    written, old, new = upgrade_checkpoint(args.checkpoint, args.out)
    if old == new:  # --out of a current checkpoint: read, verified and written again, nothing migrated
        print(f"{args.checkpoint} is already at format version {old}, the current one; wrote a verified copy "
              f"to {written}")
    else:
        print(f"upgraded {args.checkpoint} from format version {old} to {new}: {written}")
    return 0
