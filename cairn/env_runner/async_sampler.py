"""AsyncSampler: remote env runners that sample continuously while the learner learns, as
IMPALA and APPO need (RLlib's asynchronous env-runner requests).

Each healthy runner always has ``requests_in_flight`` ``sample()`` requests queued on its actor;
finished fragments wait in a queue until the learner takes them with :meth:`AsyncSampler.get`,
which sends the runners that delivered their next request at once. The learner's weights go into
Ray's object store once per :meth:`AsyncSampler.set_weights` (every ``broadcast_interval`` learner
updates, as the algorithm decides), tagged with the learner's weights version; each request
carries the weights object current when it was sent, so every :class:`RemoteFragment` records the
version its actions were sampled with, and the learner can report how far it has moved on since
(the policy lag: IMPALA's ``policy_lag_mean`` / ``policy_lag_max``).

Faults are :class:`~cairn.env_runner.fault_tolerance.RemoteRunners`' one mechanism: a runner
whose actor died (``ray.kill``, its node lost), whose ``sample()`` raised, or whose oldest request
went unanswered for ``sample_timeout_s`` is failed there and then restarted, left out or reported
as ``config.fault_tolerance(...)`` says. Its requests in flight are dropped (counted in
:attr:`AsyncSampler.num_fragments_dropped`); a recreated runner continues its seed stream from
its last delivered fragment, so the learner sees no fragment twice and none out of order.

What asynchronous sampling cannot save: the fragments in flight and in the queue when a
checkpoint is written. A runner's saved state is taken after the requests queued before it (an
actor runs its calls in order), so a restored run continues each runner's seed stream after
those fragments, which its learner never sees; the running learner still receives them.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from cairn.errors import CairnError, ConfigError
from cairn.ray_cluster import ensure_ray

if TYPE_CHECKING:
    from cairn.env_runner.fault_tolerance import RemoteRunners
    from cairn.env_runner.remote import SampleResult

__all__ = ["AsyncSampler", "RemoteFragment"]


@dataclass(frozen=True)
class RemoteFragment:
    """One remote ``sample()``: ``result`` (batches, episodes, filter statistics), the
    ``worker_index`` of the runner that sampled it, and ``weights_version``, the version given to
    :meth:`AsyncSampler.set_weights` for the weights its runner loaded before sampling it."""

    worker_index: int
    weights_version: int
    result: SampleResult


@dataclass
class _Request:
    """A ``sample()`` request queued on ``actor``; ``started``: when it became the runner's
    oldest request, i.e. when its ``sample_timeout_s`` began to run (an actor runs one call
    at a time, so a request behind another has not started)."""

    ref: Any
    actor: Any
    weights_version: int
    started: float


class AsyncSampler:
    """Keeps ``requests_in_flight`` ``sample()`` requests queued on every healthy runner of
    ``runners``, and a queue of the fragments they delivered.

    The learner calls :meth:`set_weights` once before the first :meth:`get` and again whenever
    it wants the runners to act with newer weights. Not thread-safe: one driver thread calls it.
    """

    def __init__(self, runners: RemoteRunners, *, requests_in_flight: int = 1) -> None:
        if type(requests_in_flight) is not int or requests_in_flight < 1:
            raise ConfigError(f"requests_in_flight must be an int >= 1, got {requests_in_flight!r}: "
                              "each runner needs at least one sample() request queued to sample.")
        self.runners = runners
        self.requests_in_flight = requests_in_flight
        self.weights_version = 0
        self.num_fragments_dropped = 0
        self._weights_ref: Any = None
        self._requests: dict[int, deque[_Request]] = {}  # by worker_index, oldest first
        self._queue: deque[RemoteFragment] = deque()

    def set_weights(self, broadcast: Mapping[str, Any], version: int) -> None:
        """Put ``broadcast`` (the learner's weights, filters and timesteps by policy ID, as
        :meth:`~cairn.env_runner.remote.RemoteEnvRunner.sample` reads it) into Ray's object
        store once; every request sent from now on carries it, tagged ``version``. Requests
        already queued keep the weights they were sent with."""
        self._weights_ref = ensure_ray().put(dict(broadcast))
        self.weights_version = int(version)

    @property
    def num_requests_in_flight(self) -> int:
        """Requests sent and not yet collected (finished ones included)."""
        return sum(len(r) for r in self._requests.values())

    def get(self, *, min_fragments: int = 1, max_fragments: int | None = None) -> list[RemoteFragment]:
        """At least ``min_fragments`` (at most ``max_fragments``; None: all queued) finished
        fragments, oldest first, waiting for them if the queue holds fewer. Every healthy
        runner is first topped up to ``requests_in_flight`` requests. Raises
        :class:`~cairn.errors.EnvRunnerFailedError` when failed runners may neither be
        restarted nor left out, or none is left."""
        if self._weights_ref is None:
            raise CairnError("AsyncSampler.get() before set_weights(): the runners have no weights "
                             "version to sample with. Call set_weights(broadcast, version) first.")
        if max_fragments is not None and max_fragments < min_fragments:
            raise ConfigError(f"max_fragments={max_fragments} is below min_fragments={min_fragments}.")
        while len(self._queue) < min_fragments:
            # As the synchronous sample() does: a runner that failed in another call (a save's
            # get_state) is restarted or left out first, and no runner left is an error, not a
            # wait without end.
            self.runners.recover("sample()")
            self._top_up()
            self._collect()
        self._top_up()  # the runners that just delivered get their next request at once
        count = len(self._queue) if max_fragments is None else min(max_fragments, len(self._queue))
        return [self._queue.popleft() for _ in range(count)]

    def drain(self) -> list[RemoteFragment]:
        """Send nothing more; wait for every request in flight and return all queued
        fragments. Afterwards the runners are idle until the next :meth:`get`."""
        while self._requests:
            self._collect()
        fragments = list(self._queue)
        self._queue.clear()
        return fragments

    def discard(self) -> None:
        """Forget the requests in flight and the queued fragments without waiting (their
        runners were given new policies or states, so those fragments belong to the past).
        Each actor still runs what it was sent before its newer calls."""
        self._requests.clear()
        self._queue.clear()

    # ------------------------------------------------------------------------------ internals
    def _top_up(self) -> None:
        now = time.monotonic()
        for index, actor in sorted(self.runners.actors.items()):
            pending = self._requests.setdefault(index, deque())
            while len(pending) < self.requests_in_flight:
                ref = actor.sample.remote(self._weights_ref)
                pending.append(_Request(ref, actor, self.weights_version, now))

    def _collect(self) -> None:
        """Move every finished request to the queue (failed runners recorded, then recovered);
        first wait until one finishes or a runner's oldest request is overdue."""
        ray = ensure_ray()
        runners = self.runners
        timeout_s = runners.config.sample_timeout_s
        for index in list(self._requests):
            reqs = self._requests[index]
            if not reqs or reqs[0].actor is not runners.actors.get(index):
                # Failed (by this sampler or in another call to the runners) and replaced or left
                # out: what the old actor had in flight is lost with it.
                self.num_fragments_dropped += len(self._requests.pop(index))
        if not self._requests:
            return
        refs = [r.ref for reqs in self._requests.values() for r in reqs]
        oldest = min(reqs[0].started for reqs in self._requests.values())
        ray.wait(refs, num_returns=1, timeout=max(0.0, oldest + timeout_s - time.monotonic()))
        ready = set(ray.wait(refs, num_returns=len(refs), timeout=0)[0])
        now = time.monotonic()
        for index, reqs in sorted(self._requests.items()):
            done = 0
            while reqs and reqs[0].ref in ready:  # an actor answers its requests in order
                request = reqs.popleft()
                done += 1
                # One at a time, so that a delivered fragment counts as the runner's progress
                # before a failure of its next request is recorded (repeated_failures).
                result = runners.wait({0: (index, request.ref)}, timeout_s=timeout_s,
                                      runner_errors_fail=True)
                if 0 not in result:
                    self.num_fragments_dropped += 1
                    break  # failed: its later requests die with its actor (below)
                runners.completed(index, result[0])
                self._queue.append(RemoteFragment(index, request.weights_version, result[0]))
            if index not in runners.actors:
                continue
            if reqs and done:
                reqs[0].started = now  # the next request has only now begun
            elif reqs and now - reqs[0].started >= timeout_s:
                runners.time_out(index, timeout_s)
        for index in list(self._requests):
            if index not in runners.actors:  # failed: its later requests die with its actor
                self.num_fragments_dropped += len(self._requests.pop(index))
        runners.recover("sample()")
