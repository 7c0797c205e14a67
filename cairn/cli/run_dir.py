"""Run directories of ``cairn train``: where a run's files go, and when ``--out`` may take one.

A run directory holds the files :mod:`cairn.cli.runlog` writes and ``checkpoints/``; a new run
refuses a directory that holds anything else, and ``--overwrite`` removes only what an earlier
``cairn train`` wrote there.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from cairn.cli.common import UsageError
from cairn.cli.run_checkpoints import CHECKPOINTS_DIR, list_checkpoints
from cairn.cli.runlog import RUN_FILES

__all__ = ["run_files", "check_new_run_dir", "local_dir"]


def run_files(run_dir: Path) -> list[str]:
    """The names in ``run_dir`` that a ``cairn train`` run writes (log files, ``checkpoints``)."""
    return [name for name in (*RUN_FILES, CHECKPOINTS_DIR) if (run_dir / name).exists()]


def check_new_run_dir(run_dir: Path, out: str, *, overwrite: bool) -> None:
    """Check that a new run may start in ``run_dir`` (given as ``--out out``); with
    ``overwrite``, remove the files of the run it holds first."""
    from cairn.checkpoint.format import MANIFEST_FILE
    from cairn.checkpoint.manager_records import RECORD_SUFFIX

    if os.path.lexists(run_dir) and not run_dir.is_dir():
        raise UsageError(f"--out {out} exists and is not a directory; choose another --out.")
    if not run_dir.is_dir():
        return
    if (run_dir / MANIFEST_FILE).exists():
        raise UsageError(f"--out {out} is a cairn checkpoint, not a run directory; choose a new or empty "
                         "directory for the run (its checkpoints go to RUN/checkpoints/).")
    ours = run_files(run_dir)
    others = sorted(set(os.listdir(run_dir)) - set(ours))
    if ours and not overwrite:
        raise UsageError(f"--out {out} already holds a run ({', '.join(ours)}); continue it with "
                         f"--resume {out}, pass --overwrite to start over, or choose another --out.")
    if not ours and others:
        raise UsageError(f"--out {out} is not a cairn run directory and is not empty "
                         f"({others[0]!r}, ...); "
                         "choose a new or empty directory for the run.")
    for name in ours:  # --overwrite: only what an earlier cairn train wrote
        path = run_dir / name
        if name == CHECKPOINTS_DIR:
            for stored in list_checkpoints(str(path)):
                shutil.rmtree(stored.path)
                Path(stored.path + RECORD_SUFFIX).unlink(missing_ok=True)
        elif path.is_dir():
            shutil.rmtree(path)
        else:
            path.unlink()


def local_dir(location: str, flag: str) -> Path:
    """The local directory that ``flag location`` (``--out``, ``--resume``) names: an existing
    directory as it is, else the checkpoint layer's save location for it."""
    from cairn.checkpoint import save_location
    from cairn.errors import CheckpointError

    expanded = os.path.expanduser(location)
    try:
        return save_location(location) if not os.path.isdir(expanded) else Path(expanded)
    except CheckpointError as exc:
        raise UsageError(f"{flag} {location}: {exc}") from None
