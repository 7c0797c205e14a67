"""RemoteRunners: the one place that owns the remote env runners' actors, their health and
their restarts (as RLlib's ``FaultTolerantActorManager`` does); the runner group only asks it.

Every call to the actors waits under a deadline (``config.fault_tolerance(...)``). A runner
whose actor died (``ray.kill``, its process killed, its node lost), whose ``sample()`` raised
(an environment raising in ``step``) or that did not answer in time counts as failed. A failed
runner is then, in this order of preference:

1. recreated (``restart_failed_env_runners``, while fewer than ``max_num_env_runner_restarts``
   restarts were made in all, and unless it raised the same error
   ``max_num_repeated_env_runner_failures`` times in a row without completing a sample in
   between: :mod:`cairn.env_runner.repeated_failures`): a new actor built from the learner's
   current policies, brought to where its seed stream stood after its last successful sample
   (or to the state last set on it by a restore), and given the failed work again;
2. left out (``ignore_env_runner_failures``): the healthy runners take over its share;
3. else the call raises :class:`~cairn.errors.EnvRunnerFailedError` naming it and the cause.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from cairn.env_runner.remote import SampleResult, start_actor
from cairn.env_runner.repeated_failures import ErrorSignature, RepeatedFailures, error_signature
from cairn.errors import CairnError, EnvRunnerFailedError
from cairn.ray_cluster import ensure_ray

if TYPE_CHECKING:
    from cairn.config.algorithm_config import AlgorithmConfig

__all__ = ["RemoteRunners", "Failure", "STARTUP_TIMEOUT_S"]

logger = logging.getLogger("cairn.env_runner")

STARTUP_TIMEOUT_S = 120.0
"""Seconds to wait for the remote runners to start when the group is built: each actor placed
on a free CPU, its policies and environments built. Runners still waiting after it fail the
group's construction with an error that says whether the cluster lacks free CPUs."""


@dataclass(frozen=True)
class Failure:
    """Why a remote runner is unusable: ``timed_out`` (it may still be alive), or it died or
    raised (``error``: the Ray error, chained onto cairn's own). ``signature``: the error its
    own code raised, compared with its next failure's (None when it died or timed out)."""

    cause: str
    timed_out: bool
    error: BaseException | None = None
    signature: ErrorSignature | None = None


K = TypeVar("K", bound=Hashable)


def _restarts(count: int) -> str:
    return f"{count} restart" if count == 1 else f"{count} restarts"


def _summary(exc: BaseException) -> str:
    return next((line.strip() for line in str(exc).splitlines() if line.strip()), "")


def _actor_failure(exc: BaseException) -> Failure:
    """The failure of a runner whose actor is gone. When its constructor raised (building its
    environments or policies), Ray keeps that error only as text: a first line naming the
    process, address and actor ID, then the traceback, ending with the exception's own line.
    The traceback is the error's signature (the same code failing the same way gives the same
    text); any other death has none."""
    lines = [line for line in str(exc).splitlines() if line.strip()]
    if getattr(exc, "actor_init_failed", False) and len(lines) > 1:
        return Failure(f"it raised while being built: {lines[-1].strip()}", timed_out=False, error=exc,
                       signature=ErrorSignature("<the runner's constructor>", "\n".join(lines[1:])))
    return Failure(f"its actor died ({type(exc).__name__}: {_summary(exc)})", timed_out=False, error=exc)


class RemoteRunners:
    """The remote env runners with ``worker_index`` 1..N, their health and their restarts.

    ``policy_states``: called for the learner's current policy states when a runner is
    (re)built.
    """

    def __init__(
        self, config: AlgorithmConfig, policy_states: Callable[[], Mapping[str, Any]]
    ) -> None:
        self.config = config  # also the fault_tolerance(...) settings, read where they apply
        self.policy_states = policy_states
        self.actors: dict[int, Any] = {}
        self.failed: dict[int, Failure] = {}  # failed and not (yet) restarted
        self.ignored: set[int] = set()  # failed, and given up on (ignore_env_runner_failures)
        self.num_restarts = 0
        self.repeats = RepeatedFailures()  # the same error again, with no sample in between
        # Where each runner's seed stream stands (its last sample's position, or the state a
        # restore set on it): what a recreated runner is brought to.
        self.positions: dict[int, Mapping[str, Any]] = {}
        ray = ensure_ray()
        free_cpus = ray.available_resources().get("CPU", 0.0)
        states = ray.put(dict(policy_states()))
        self.actors = {i: start_actor(config, states, i) for i in range(1, config.num_env_runners + 1)}
        self._wait_until_started(free_cpus)

    # ------------------------------------------------------------------------------ waiting
    def wait(self, calls: Mapping[K, tuple[int, Any]], *, timeout_s: float,
             runner_errors_fail: bool) -> dict[K, Any]:
        """The results of ``calls`` (key -> (worker_index, object ref)) that came back within
        ``timeout_s``; each runner that died or did not answer is recorded in :attr:`failed`
        (and removed from :attr:`actors`). An exception raised by the runner's own code fails
        the runner when ``runner_errors_fail`` (``sample()``), else it propagates."""
        ray = ensure_ray()
        from ray.exceptions import GetTimeoutError, RayActorError, RayTaskError

        if not calls:
            return {}
        refs = [ref for _, ref in calls.values()]
        ready, _ = ray.wait(refs, num_returns=len(refs), timeout=timeout_s)
        answered = set(ready)
        results: dict[K, Any] = {}
        for key, (index, ref) in calls.items():
            try:
                if ref not in answered:
                    raise GetTimeoutError
                results[key] = ray.get(ref, timeout=timeout_s)
            except GetTimeoutError:
                self.time_out(index, timeout_s)
            except RayActorError as exc:
                self._fail(index, _actor_failure(exc))
            except RayTaskError as exc:
                if not runner_errors_fail:
                    raise  # ray.get raised it as an instance of the runner's own error, too
                own = exc.cause if isinstance(exc.cause, BaseException) else None
                cause = exc if own is None else own
                self._fail(index, Failure(f"it raised {type(cause).__name__}: {_summary(cause)}",
                                          timed_out=False, error=exc,
                                          signature=None if own is None else error_signature(own)))
        return results

    def _fail(self, index: int, failure: Failure) -> None:
        if index not in self.failed:  # a runner fails once until it is recreated
            self.failed[index] = failure
            self.repeats.failed(index, failure.signature)
        actor = self.actors.pop(index, None)
        if actor is not None:
            ensure_ray().kill(actor)  # a runner that timed out may still be alive: end it

    def time_out(self, index: int, timeout_s: float) -> None:
        """Fail runner ``index``, which has not answered within ``timeout_s`` (it is ended)."""
        self._fail(index, Failure(f"no answer within {timeout_s:g} s", timed_out=True))

    def completed(self, index: int, result: SampleResult) -> None:
        """Runner ``index`` delivered ``result``: a recreated runner continues from there, and
        its failures so far are no streak."""
        self.positions[index] = result.position
        self.repeats.progressed(index)

    def call(self, method: str, args: Mapping[int, tuple[Any, ...]], *, timeout_s: float) -> dict[int, Any]:
        """Call ``method`` on each healthy runner named in ``args`` (worker_index -> arguments)."""
        calls = {i: (i, getattr(self.actors[i], method).remote(*a))
                 for i, a in args.items() if i in self.actors}
        return self.wait(calls, timeout_s=timeout_s, runner_errors_fail=False)

    def _wait_until_started(self, free_cpus: float) -> None:
        """Wait for every actor to be built, so that an actor Ray cannot place (no free CPU: the
        CPUs of an earlier algorithm's runners stay taken until it is stopped) is an error here
        rather than a silent hang in the first call. ``free_cpus``: free before creating them."""
        ray = ensure_ray()
        count = len(self.actors)
        self.call("ping", {i: () for i in self.actors}, timeout_s=STARTUP_TIMEOUT_S)
        if not self.failed:
            return
        failed = sorted(self.failed.items())
        waiting = [index for index, f in failed if f.timed_out]
        if waiting and free_cpus < count:
            total = ray.cluster_resources().get("CPU", 0.0)
            message = (
                f"Not enough free CPUs in the Ray cluster for {count} env runners "
                f"(each needs 1): {free_cpus:g} of the cluster's {total:g} CPUs were free, and "
                f"the runners with worker_index {waiting} did not start within "
                f"{STARTUP_TIMEOUT_S:g} s. Another algorithm in this process may still hold its "
                "runners' CPUs: stop it with algo.stop(). Or start Ray with more CPUs "
                "(ray.init(num_cpus=...)), or lower num_env_runners."
            )
        else:
            message = (
                "Remote env runners failed to start: "
                + "; ".join(f"worker_index {index}: {f.cause}" for index, f in failed)
                + ". The Ray error of a runner that died is chained below; a runner that is slow "
                "to build its environments needs a larger "
                "cairn.env_runner.fault_tolerance.STARTUP_TIMEOUT_S."
            )
        error = next((f.error for _, f in failed if f.error), None)
        self.stop()  # release the CPUs of the runners that did start
        raise CairnError(message) from error

    # ----------------------------------------------------------------------------- recovery
    def recover(self, during: str) -> None:
        """Restart, leave out, or raise for every failed runner not given up on (module doc)."""
        states_ref = None
        for index in sorted(set(self.failed) - self.ignored):
            failure = self.failed[index]
            config = self.config
            while config.restart_failed_env_runners and (
                    self.num_restarts < config.max_num_env_runner_restarts) and not self._repeated(index):
                if states_ref is None:
                    states_ref = ensure_ray().put(dict(self.policy_states()))
                self.num_restarts += 1
                restarted = self._restart(index, states_ref)
                if restarted is None:
                    logger.warning("cairn: remote env runner worker_index=%d failed in %s (%s); "
                                   "recreated it (restart %d of at most %d).", index, during,
                                   failure.cause, self.num_restarts, config.max_num_env_runner_restarts)
                    break
                failure = restarted
            else:
                if config.ignore_env_runner_failures:
                    logger.warning("cairn: remote env runner worker_index=%d failed in %s (%s); not "
                                   "recreated (%s); going on without it (ignore_env_runner_failures=True).",
                                   index, during, failure.cause, self._why_not_recreated(index))
                    self.ignored.add(index)
                    continue
                raise EnvRunnerFailedError(self._failure_message(index, failure, during)) from failure.error
        if not self.actors:
            raise EnvRunnerFailedError(
                f"{during} has no healthy remote env runner left: all {self.config.num_env_runners} "
                "failed (" + "; ".join(f"worker_index {i}: {f.cause}" for i, f in sorted(self.failed.items()))
                + f"; {_restarts(self.num_restarts)} in all). Continue from a checkpoint with algo.stop() "
                "and Algorithm.from_checkpoint(path)."
            ) from next((f.error for f in self.failed.values() if f.error), None)

    def _repeated(self, index: int) -> bool:
        """Runner ``index`` raised the same error too many times in a row to be recreated."""
        return self.repeats.streak(index)[1] >= self.config.max_num_repeated_env_runner_failures

    def _why_not_recreated(self, index: int) -> str:
        config = self.config
        if not config.restart_failed_env_runners:
            return ("restart_failed_env_runners=False; config.fault_tolerance("
                    "restart_failed_env_runners=True) recreates it")
        if self._repeated(index):
            count = self.repeats.streak(index)[1]
            return (f"it raised this same error {count} times in a row, with no sample completed "
                    f"in between, after {_restarts(count - 1)} of it (max_num_repeated_env_runner_failures="
                    f"{config.max_num_repeated_env_runner_failures}): a new runner would fail the same "
                    "way. Fix the error; one that is transient yet repeats needs a larger "
                    "max_num_repeated_env_runner_failures in config.fault_tolerance(...)")
        return (f"all max_num_env_runner_restarts={config.max_num_env_runner_restarts} "
                "restarts are used; raise it in config.fault_tolerance(...)")

    def _failure_message(self, index: int, failure: Failure, during: str) -> str:
        why = self._why_not_recreated(index)
        return (f"Remote env runner worker_index {index} failed in {during}: {failure.cause}. It "
                f"was not recreated ({why}), and ignore_env_runner_failures=False "
                "(ignore_env_runner_failures=True goes on with the other runners). algo.save() "
                "still writes a checkpoint; continue from it with algo.stop() and "
                "Algorithm.from_checkpoint(path).")

    def _restart(self, index: int, states_ref: Any) -> Failure | None:
        """Start a new actor for ``index`` and bring it to its position; None when it works."""
        self.failed.pop(index, None)
        actor = start_actor(self.config, states_ref, index)
        self.actors[index] = actor
        position = self.positions.get(index)
        timeout = self.config.env_runner_restore_timeout_s
        calls = {"ping": (index, actor.ping.remote())}
        if position is not None:
            calls["state"] = (index, actor.set_state.remote(position))
        self.wait(calls, timeout_s=timeout, runner_errors_fail=True)
        return self.failed.get(index)

    # ----------------------------------------------------------------------------- sampling
    def sample(self, broadcast_ref: Any) -> list[SampleResult]:
        """One sample per configured runner (``num_env_runners`` shares, so the train batch
        keeps its size), in share order; failed runners are handled as the module doc says."""
        self.recover("sample()")
        healthy = itertools.cycle(sorted(self.actors))
        shares = {share: next(healthy) for share in range(self.config.num_env_runners)}
        results: dict[int, SampleResult] = {}
        while len(results) < len(shares):
            calls = {
                share: (index, self.actors[index].sample.remote(broadcast_ref))
                for share, index in shares.items() if share not in results}
            got = self.wait(calls, timeout_s=self.config.sample_timeout_s, runner_errors_fail=True)
            for share, result in got.items():
                results[share] = result
                self.completed(shares[share], result)
            self.recover("sample()")
            healthy = itertools.cycle(sorted(self.actors))
            for share, index in shares.items():  # the shares of runners left out move
                if share not in results and index not in self.actors:
                    shares[share] = next(healthy)
        return [results[share] for share in sorted(results)]

    def stop(self) -> None:
        import ray

        if ray.is_initialized():  # after ray.shutdown() the actors are gone already
            for actor in self.actors.values():
                ray.kill(actor)  # no wait: a dead actor's kill is a no-op
        self.actors = {}
