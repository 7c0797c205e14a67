"""The crash tests' child: run an action in a forked process that kills itself (SIGKILL) at a
chosen file-system step, so that a test can check what a crash at each step leaves on disk
(test_crash_safety, test_manager_crash, test_retention)."""

from __future__ import annotations

import os
import signal
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from cairn.checkpoint import atomic as atomic_module

#: The calls a crash may come before or after: every file-system step of a save, a retention
#: or a delete (the links of an incremental save included).
STEP_FUNCTIONS: list[tuple[Any, str]] = [
    (os, "fsync"), (os, "rename"), (os, "replace"), (os, "mkdir"), (os, "link"), (os, "unlink"),
    (os, "rmdir"), (atomic_module, "_exchange")]


def run_in_child(action: Callable[[], Any], kill_at: int | None, count_file: Path | None, *,
                 also: Sequence[tuple[Any, str]] = ()) -> int:
    """Fork a child that runs ``action()`` with a step before and after each call of
    :data:`STEP_FUNCTIONS` (and of ``also``, more ``(owner, name)`` pairs) and SIGKILLs itself at
    step ``kill_at`` (None: never); a child that finishes writes its number of steps to
    ``count_file``. Return the child's wait status (exit 0: finished; 3: ``action`` raised)."""
    pid = os.fork()
    if pid == 0:  # never return into pytest
        try:
            steps = [0]

            def step() -> None:
                steps[0] += 1
                if steps[0] == kill_at:
                    os.kill(os.getpid(), signal.SIGKILL)

            def hooked(fn: Callable[..., Any]) -> Callable[..., Any]:
                def wrapper(*args: Any, **kwargs: Any) -> Any:
                    step()
                    result = fn(*args, **kwargs)
                    step()
                    return result
                return wrapper

            for owner, name in [*STEP_FUNCTIONS, *also]:
                setattr(owner, name, hooked(getattr(owner, name)))
            action()
            if count_file is not None:
                count_file.write_text(str(steps[0]))
            os._exit(0)
        except BaseException:
            os._exit(3)
    _, status = os.waitpid(pid, 0)
    return status
