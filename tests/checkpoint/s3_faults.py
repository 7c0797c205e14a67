"""Faults injected into every request of a save to S3 that changes the store, one at a time
(test_s3_replace, test_s3_crash).

The requests that change a bucket are made by five s3fs coroutines: ``_put_file`` (an upload),
``_pipe_file`` (a small PUT), ``_cp_file`` (a server-side CopyObject), ``_rm_file`` (a DELETE)
and ``_rm`` (a bulk delete). :func:`fail_request` makes the k-th of them to start fail, as a
connection reset that s3fs has given up retrying (the request never reaches the server); the
others go through to the test's moto server. :func:`fail_one` fails the first request of one
coroutine on one key, before it reaches the server or after the server executed it (its
response lost). :func:`killed_in_fork` runs a save in a forked child that SIGKILLs itself once
its k-th such request is done.
"""

from __future__ import annotations

import os
import re
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from cairn.checkpoint import load_algorithm_state, write_algorithm_checkpoint

#: The s3fs coroutines that change the store.
CHANGING = ("_put_file", "_pipe_file", "_cp_file", "_rm_file", "_rm")


def _reset() -> Exception:
    import aiohttp

    return aiohttp.ClientOSError(104, "Connection reset by peer")


def fail_request(monkeypatch: pytest.MonkeyPatch, fail_at: int | None) -> list[tuple[str, str]]:
    """Make the ``fail_at``-th changing request fail (None: none); returns ``(coroutine,
    path)`` of every changing request started, the failed one included."""
    import s3fs

    started: list[tuple[str, str]] = []

    def make(name: str, original: Callable[..., Any]) -> Callable[..., Any]:
        async def request(self: Any, path: Any, *args: Any, **kwargs: Any) -> Any:
            target = args[0] if name in ("_put_file", "_cp_file") else path
            started.append((name, str(target)))
            if len(started) == fail_at:
                raise _reset()
            return await original(self, path, *args, **kwargs)
        return request

    for name in CHANGING:
        monkeypatch.setattr(s3fs.S3FileSystem, name, make(name, getattr(s3fs.S3FileSystem, name)))
    monkeypatch.setattr(s3fs.S3FileSystem, "_cache", {})  # instances bind methods when made
    return started


def fail_one(monkeypatch: pytest.MonkeyPatch, coroutine: str, key_end: str, *,
             executed: bool = False) -> list[str]:
    """Make the first ``coroutine`` request (one of :data:`CHANGING`) whose key, or one of
    whose keys (a bulk delete), ends with a match of the regular expression ``key_end`` (a
    plain name: ``re.escape`` it) fail as a connection reset: before it
    reaches the server, or with ``executed`` after the server executed it (the response lost,
    as when a connection drops after S3 applied the request). Returns the keys it failed on."""
    import s3fs

    failed: list[str] = []
    original = getattr(s3fs.S3FileSystem, coroutine)

    async def request(self: Any, path: Any, *args: Any, **kwargs: Any) -> Any:
        target = args[0] if coroutine in ("_put_file", "_cp_file") else path
        keys = [str(key) for key in (target if isinstance(target, list) else [target])]
        if failed or not any(re.search(f"(?:{key_end})$", key) for key in keys):
            return await original(self, path, *args, **kwargs)
        failed.extend(keys)
        if executed:
            await original(self, path, *args, **kwargs)
        raise _reset()

    monkeypatch.setattr(s3fs.S3FileSystem, coroutine, request)
    monkeypatch.setattr(s3fs.S3FileSystem, "_cache", {})  # instances bind methods when made
    return failed


def killed_in_fork(action: Callable[[], Any], kill_at: int, temp: Path) -> int:
    """Fork a child that runs ``action()`` and SIGKILLs itself as soon as its ``kill_at``-th
    changing request has completed (others may be in flight in the transfer threads), as
    ``crash_child.run_in_child`` does at file-system steps; return its wait status (exit 0:
    finished; 3: ``action`` raised). fsspec starts its event loop afresh in a forked child.

    The child's temporary files go under ``temp`` (a folder the test owns): a killed save
    cannot remove its local staging folder (``cairn-upload-*``), which would stay in the
    system's temporary folder for good."""
    pid = os.fork()
    if pid == 0:  # never return into pytest
        try:
            import tempfile

            import s3fs

            tempfile.tempdir = str(temp)  # this process only: the fork's own copy of the module

            done: list[str] = []

            def make(name: str, original: Callable[..., Any]) -> Callable[..., Any]:
                async def request(self: Any, *args: Any, **kwargs: Any) -> Any:
                    result = await original(self, *args, **kwargs)
                    done.append(name)
                    if len(done) == kill_at:
                        os.kill(os.getpid(), signal.SIGKILL)
                    return result
                return request

            for name in CHANGING:
                setattr(s3fs.S3FileSystem, name, make(name, getattr(s3fs.S3FileSystem, name)))
            s3fs.S3FileSystem._cache = {}
            action()
            os._exit(0)
        except BaseException:
            os._exit(3)
    _, status = os.waitpid(pid, 0)
    return status


def state_tree(value: float, policies: tuple[str, ...] = ("p0",)) -> dict:
    """A small algorithm state tree whose every array holds ``value``."""
    policy = {"spec": {"policy_class": "Policy"}, "weights": {"w": np.full((8, 8), value, np.float32)},
              "counters": {"global_timestep": int(value)}}
    return {"algorithm_class": "PPO", "iteration": int(value), "policy_ids": list(policies),
            "rng": {"x": np.full(8, value)}, "policies": {pid: policy for pid in policies}}


def loaded_value(url: str, options: dict) -> float:
    """The value of the checkpoint at ``url``, loaded and verified: every array, and the
    iteration, must agree (a mix of two checkpoints fails here or in the load's hash checks)."""
    state = load_algorithm_state(url, storage_options=options)
    arrays = [state["rng"]["x"], *(p["weights"]["w"] for p in state["policies"].values())]
    values = {float(v) for array in arrays for v in np.unique(array)}
    assert len(values) == 1 and values == {float(state["iteration"])}, (values, state["iteration"])
    return values.pop()


class TreeAlgo:
    """What a :class:`~cairn.CheckpointManager` saves, standing in for an Algorithm: a state
    tree of ``value`` at iteration 1, written by the checkpoint layer."""

    iteration = 1

    def __init__(self, value: float) -> None:
        self.value = value

    def save(self, location: str, *, blocking: bool, storage_options: Any, previous: Any = None,
             **extra: Any) -> str:
        return write_algorithm_checkpoint(location, state_tree(self.value),
                                          storage_options=storage_options, previous=previous,
                                          metadata=extra.get("metadata"))


def stages(s3: Any, prefix: str) -> list[str]:
    """The keys of every stage (``.<name>.cairn-tmp-*``) under ``prefix``."""
    return [key for key in s3.keys(prefix) if ".cairn-tmp-" in key]
