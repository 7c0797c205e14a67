"""Ending real Ray actors in tests."""

from __future__ import annotations

import time

import ray


def kill_and_wait(actor, timeout_s: float = 60.0) -> None:
    """``ray.kill`` only sends the kill: a call made just after it may still be answered.
    Return once the actor (an env runner or a learner: both answer ``pid()``) no longer
    answers."""
    ray.kill(actor)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            ray.get(actor.pid.remote(), timeout=5)
        except ray.exceptions.RayActorError:
            return
        except ray.exceptions.GetTimeoutError:
            continue  # busy with a call sent before the kill
        time.sleep(0.05)
    raise AssertionError(f"{actor} still answers {timeout_s:g} s after ray.kill")
