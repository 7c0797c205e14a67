"""``cairn checkpoint verify CKPT``: every file's size and hash against the manifests, the
structure (manifests, listed files, nothing unlisted), that the state trees load, and what a
load checks before it builds anything (the classes named, counters, each policy's spec against
its weights).

It reports every problem it finds, one line each, rather than stopping at the first (as
loading does), and exits 1 when there is any.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Mapping
from typing import Any

from cairn.cli.common import EXIT_FAILURE

__all__ = ["add_parser", "run", "verify_checkpoint"]


def add_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    """Add ``verify`` to ``cairn checkpoint``'s actions."""
    p = sub.add_parser("verify", parents=[common], help="check every file's size and hash and the structure",
                       description="Check a checkpoint: each manifest, every listed file's size and hash, "
                                   "files the manifests do not list, and that the state loads. Prints one "
                                   "line per problem and exits 1 if there is any, 0 if none.")
    p.add_argument("checkpoint")
    p.set_defaults(run=run)


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())


def _check_file(storage: Any, where: str, name: str, entry: Mapping[str, Any]) -> str | None:
    """The problem of the listed file ``name`` of ``storage`` (shown under ``where``), or None."""
    from cairn.checkpoint.safetensors_io import file_entry
    from cairn.errors import CheckpointError

    path = f"{where}/{name}"
    if not storage.exists(name):
        return f"{path}: missing (listed in the manifest)"
    try:  # a file larger than the manifest says is refused unread
        data = storage.read_bytes(name, limit=entry["size"])
    except CheckpointError as exc:  # larger than listed; a link, a directory, a special file
        local = storage.local_file(name)
        if local and os.path.isfile(local) and not os.path.islink(local):
            return f"{path}: size {os.path.getsize(local)} bytes, the manifest says {entry['size']}"
        message = _one_line(exc)
        for prefix in (path, local or path):  # the library's message names the file too
            message = message.removeprefix(prefix).lstrip(": ")
        return f"{path}: {message}"
    if len(data) != entry["size"]:
        return f"{path}: size {len(data)} bytes, the manifest says {entry['size']}"
    found = file_entry([data])["hash"]
    if found != entry["hash"]:
        return f"{path}: content hash {found} does not match the manifest's {entry['hash']}"
    return None


def verify_checkpoint(checkpoint: str) -> tuple[list[str], dict[str, Any] | None]:
    """Problems of ``checkpoint`` (one line each; empty when it is sound) and its root
    manifest summary (``get_checkpoint_info``; None when the manifest itself is unreadable).
    ``checkpoint`` is any location cairn reads (a path, a ``file://`` or object-store URL)."""
    from cairn.algorithms.save_restore import check_algorithm_state, check_env_reference
    from cairn.checkpoint import get_checkpoint_info, load_algorithm_state, load_policy_state
    from cairn.checkpoint.format import MANIFEST_FILE
    from cairn.checkpoint.storage import resolve_storage
    from cairn.errors import CheckpointError
    from cairn.policy.policy import Policy
    from cairn.policy.state_check import check_policy_state

    try:
        info = get_checkpoint_info(checkpoint)
    except CheckpointError as exc:
        return [_one_line(exc)], None
    where = str(info["checkpoint_dir"]).rstrip("/")
    storage = resolve_storage(info["checkpoint_dir"])
    present = set(storage.list_files())
    problems = []
    listed = {MANIFEST_FILE}
    bad: set[str] = set()
    for name, entry in sorted(info["files"].items()):
        listed.add(name)
        problem = _check_file(storage, where, name, entry)
        if problem:
            problems.append(problem)
            bad.add(name)
    for pid in info["policy_ids"] or []:
        sub = f"policies/{pid}"
        if f"{sub}/{MANIFEST_FILE}" in bad:  # reported; a manifest that fails its hash vouches for nothing
            listed.update(name for name in present if name.startswith(f"{sub}/"))
            continue
        try:
            sub_info = get_checkpoint_info(f"{where}/{sub}")
        except CheckpointError as exc:
            problems.append(f"policy {pid!r}: {_one_line(exc)}")
            continue
        for name, entry in sorted(sub_info["files"].items()):
            listed.add(f"{sub}/{name}")
            problem = _check_file(storage, where, f"{sub}/{name}", entry)
            if problem:
                problems.append(problem)
    for name in sorted(present - listed):
        problems.append(f"{where}/{name}: not listed in any manifest")
    if not problems:  # the structure inside the files: JSON, safetensors, trees, migrations,
        try:  # then what a load checks before building: classes, counters, spec against weights
            if info["type"] == "Algorithm":
                state = load_algorithm_state(checkpoint)
                check_algorithm_state(state, checkpoint)
                check_env_reference(state["config"], checkpoint)
            else:
                check_policy_state(load_policy_state(checkpoint), checkpoint, base=Policy)
        except CheckpointError as exc:
            problems.append(_one_line(exc))
    return problems, info


def run(args: argparse.Namespace) -> int:
    """Run ``cairn checkpoint verify``."""
    from cairn.cli.run_checkpoints import refuse_run_directory

    refuse_run_directory(args.checkpoint, "cairn checkpoint verify")
    problems, info = verify_checkpoint(args.checkpoint)
    for problem in problems:
        print(problem, flush=True)
    if problems:
        print(f"cairn: error: {args.checkpoint}: {len(problems)} problem{'s' if len(problems) > 1 else ''}",
              file=sys.stderr)
        return EXIT_FAILURE
    assert info is not None
    print(f"ok: {info['checkpoint_dir']} ({info['type']} checkpoint, "
          f"format version {info['checkpoint_version']}): "
          f"manifests, sizes, hashes and state trees verified")
    return 0
