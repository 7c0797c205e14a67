"""EnvRunnerGroup: the local env runner, or remote ones as Ray actors, behind one interface."""

from __future__ import annotations

import warnings
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from cairn.env_runner.env_runner import EnvRunner
from cairn.env_runner.make_env import close_env
from cairn.env_runner.sample_batch import SampleBatch, count_sampled_steps
from cairn.errors import CairnError, ConfigError

if TYPE_CHECKING:
    from cairn.config.algorithm_config import AlgorithmConfig
    from cairn.policy.policy import Policy

__all__ = ["EnvRunnerGroup", "SAMPLE_TIMEOUT_S", "STARTUP_TIMEOUT_S", "STATE_TIMEOUT_S"]

# No config option sets these yet; the Ray fault-tolerance issue replaces them with RLlib's
# names (``sample_timeout_s`` and friends). Every wait on a remote runner uses one of them.
STARTUP_TIMEOUT_S = 120.0
"""Seconds to wait for the remote runners to start: each actor placed on a free CPU, its
policies and environments built. Runners still waiting after it fail the group's construction
with an error that says whether the cluster lacks free CPUs."""

STATE_TIMEOUT_S = 60.0
"""Seconds to wait for a remote runner's ``get_state()`` or ``set_state()``."""

SAMPLE_TIMEOUT_S = 300.0
"""Seconds to wait for a remote runner's ``sample()``. Generous, because one call collects the
runner's whole share of a train batch; a runner that takes longer counts as failed."""


class _RemoteEnvRunner:
    """Runs inside a Ray actor: owns copies of the policies, built from their states."""

    def __init__(self, config: AlgorithmConfig, policy_states: Mapping[str, Any], worker_index: int) -> None:
        from cairn.policy.policy import Policy

        policies = {pid: Policy.from_state(s) for pid, s in policy_states.items()}
        self.runner = EnvRunner(config, policies, worker_index=worker_index)

    def sample(self, weights: Mapping[str, Any]) -> tuple[dict[str, SampleBatch], list[dict[str, Any]], dict[str, Any], int]:
        self.runner.set_weights(weights)
        for policy in self.runner.policies.values():
            policy.observation_filter.pop_delta()
        before = self.runner.num_env_steps_sampled
        batches = self.runner.sample()
        deltas = {pid: p.observation_filter.pop_delta() for pid, p in self.runner.policies.items()}
        steps = self.runner.num_env_steps_sampled - before
        return batches, self.runner.get_metrics(), deltas, steps

    def reset_policies(self, config: AlgorithmConfig, policy_states: Mapping[str, Any]) -> None:
        from cairn.policy.policy import Policy

        policies = {pid: Policy.from_state(s) for pid, s in policy_states.items()}
        self.runner.update_policies(config, policies)

    def ready(self) -> bool:
        """Answers once the actor is built (the group waits for it at construction)."""
        return True

    def get_state(self) -> dict[str, Any]:
        return self.runner.get_state()

    def set_state(self, state: Mapping[str, Any]) -> None:
        self.runner.set_state(state)

    def stop(self) -> None:
        self.runner.stop()


@dataclass(frozen=True)
class _Failure:
    """Why a remote runner is unusable: ``timed_out`` (it may still be alive), or its actor died."""

    cause: str
    timed_out: bool
    error: BaseException | None = None


class _RunnerHealth:
    """The one place that knows which remote runners answer (as RLlib's
    ``FaultTolerantActorManager`` does): it gathers one call per runner under a deadline and
    records each runner whose actor died or that did not answer in time, by worker index.
    A failed runner is not called again; restarting it is left to the fault-tolerance issue.
    """

    def __init__(self) -> None:
        self.failed: dict[int, _Failure] = {}

    def is_healthy(self, worker_index: int) -> bool:
        return worker_index not in self.failed

    def first_error(self) -> BaseException | None:
        """The Ray error of the first runner that died (to chain onto cairn's own error)."""
        return next((f.error for _, f in sorted(self.failed.items()) if f.error), None)

    def gather(self, calls: Mapping[int, Any], *, timeout_s: float) -> dict[int, Any]:
        """The results of ``calls`` (worker index -> object ref) that came back within
        ``timeout_s``; the others are recorded in :attr:`failed`. An exception raised by the
        runner's own code (not the actor's death) propagates as Ray raises it."""
        import ray
        from ray.exceptions import GetTimeoutError, RayActorError

        if not calls:
            return {}
        ready, _ = ray.wait(list(calls.values()), num_returns=len(calls), timeout=timeout_s)
        answered = set(ready)
        results: dict[int, Any] = {}
        for index, ref in calls.items():
            try:
                if ref not in answered:
                    raise GetTimeoutError
                results[index] = ray.get(ref, timeout=timeout_s)
            except GetTimeoutError:
                self.failed[index] = _Failure(f"no answer within {timeout_s:g} s", timed_out=True)
            except RayActorError as exc:
                summary = next((line.strip() for line in str(exc).splitlines() if line.strip()), "")
                self.failed[index] = _Failure(
                    f"its actor died ({type(exc).__name__}: {summary})", timed_out=False, error=exc)
        return results


class EnvRunnerGroup:
    """Samples with the local runner (``num_env_runners=0``) or with remote Ray actors.

    The local runner shares the learner's policy objects. Remote runners receive weights and
    filter states before each sample and send back their filter statistics, which are merged
    into the learner's policies.

    Every wait on a remote runner has a timeout (``STARTUP_TIMEOUT_S``, ``STATE_TIMEOUT_S``,
    ``SAMPLE_TIMEOUT_S``). A runner that died or timed out makes ``sample()`` and
    ``set_state()`` raise a :class:`~cairn.errors.CairnError` naming it; ``get_state()`` leaves
    it out with a warning, so that a checkpoint can still be written.
    """

    def __init__(
        self, config: AlgorithmConfig, policies: Mapping[str, Policy], *, first_env: Any = None
    ) -> None:
        self.config = config
        self.policies = policies
        self.local: EnvRunner | None = None
        self.remote: list[Any] = []
        self._health = _RunnerHealth()
        if config.num_env_runners == 0:
            self.local = EnvRunner(config, policies, worker_index=0, first_env=first_env)
            return
        close_env(first_env)  # remote runners build their own
        try:
            import ray
        except ImportError:
            raise ConfigError(
                f"num_env_runners={config.num_env_runners} needs Ray: pip install 'cairn-rl[ray]', "
                "or set num_env_runners=0 to sample in this process."
            ) from None
        if not ray.is_initialized():
            ray.init(include_dashboard=False, log_to_driver=False, configure_logging=False)
        actor_cls = ray.remote(num_cpus=1)(_RemoteEnvRunner)
        states = {pid: p.get_state() for pid, p in policies.items()}
        free_cpus = ray.available_resources().get("CPU", 0.0)
        self.remote = [
            actor_cls.remote(config, states, worker_index=i + 1)
            for i in range(config.num_env_runners)
        ]
        self._wait_until_started(free_cpus)

    def _wait_until_started(self, free_cpus: float) -> None:
        """Wait for every actor to be built, so that an actor Ray cannot place (no free CPU: the
        CPUs of an earlier algorithm's runners stay taken until it is stopped) is an error here
        rather than a silent hang in the first call. ``free_cpus``: free before creating them."""
        import ray

        calls = {index: actor.ready.remote() for index, actor in enumerate(self.remote, start=1)}
        self._health.gather(calls, timeout_s=STARTUP_TIMEOUT_S)
        if not self._health.failed:
            return
        failed = sorted(self._health.failed.items())
        waiting = [index for index, f in failed if f.timed_out]
        if waiting and free_cpus < len(self.remote):
            total = ray.cluster_resources().get("CPU", 0.0)
            message = (
                f"Not enough free CPUs in the Ray cluster for {len(self.remote)} env runners "
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
                "to build its environments needs a larger cairn.env_runner.group.STARTUP_TIMEOUT_S."
            )
        error = self._health.first_error()
        self.stop()  # release the CPUs of the runners that did start
        raise CairnError(message) from error

    def _runners(self) -> list[tuple[int, Any]]:
        """``(worker_index, actor)`` of the remote runners not known to have failed."""
        return [(i, a) for i, a in enumerate(self.remote, start=1) if self._health.is_healthy(i)]

    def _raise_if_failed(self, call: str) -> None:
        if not self._health.failed:
            return
        failed = "; ".join(
            f"worker_index {index}: {f.cause}" for index, f in sorted(self._health.failed.items()))
        raise CairnError(
            f"{call} needs every remote env runner, but {len(self._health.failed)} of "
            f"{len(self.remote)} failed ({failed}). cairn does not restart failed env runners "
            "yet. algo.save() still writes a checkpoint (without the failed runners' states); "
            "continue from it with algo.stop() and Algorithm.from_checkpoint(path)."
        ) from self._health.first_error()

    def _weights(self) -> dict[str, Any]:
        return {
            pid: {"weights": p.get_weights(), "observation_filter": p.observation_filter.get_state()}
            for pid, p in self.policies.items()
        }

    def sample(self) -> tuple[dict[str, SampleBatch], list[dict[str, Any]], int]:
        """One round of sampling: ``(batches by policy, finished episodes, env steps)``."""
        if self.local is not None:
            before = self.local.num_env_steps_sampled
            batches = self.local.sample()
            return batches, self.local.get_metrics(), self.local.num_env_steps_sampled - before
        import ray

        self._raise_if_failed("sample()")
        weights = ray.put(self._weights())
        calls = {index: actor.sample.remote(weights) for index, actor in self._runners()}
        results = self._health.gather(calls, timeout_s=SAMPLE_TIMEOUT_S)
        self._raise_if_failed("sample()")
        parts: dict[str, list[SampleBatch]] = defaultdict(list)
        episodes: list[dict[str, Any]] = []
        env_steps = 0
        for batches, metrics, deltas, steps in (results[index] for index in sorted(results)):
            count_sampled_steps(self.policies, {pid: len(batch) for pid, batch in batches.items()})
            for pid, batch in batches.items():
                parts[pid].append(batch)
            for pid, delta in deltas.items():
                if delta is not None and pid in self.policies:
                    self.policies[pid].observation_filter.merge_delta(delta)
            episodes.extend(metrics)
            env_steps += steps
        return {pid: SampleBatch.concat(b) for pid, b in parts.items()}, episodes, env_steps

    def update_policies(self, config: AlgorithmConfig, policies: Mapping[str, Policy]) -> None:
        """Follow an added or removed policy (and a new mapping): every runner maps its agents
        again and checks that the policies exist (:meth:`EnvRunner.update_policies`); remote
        runners get copies of ``policies``."""
        if self.local is not None:
            self.local.update_policies(config, policies)
        else:
            self._raise_if_failed("update_policies()")
            states = {pid: p.get_state() for pid, p in policies.items()}
            calls = {index: actor.reset_policies.remote(config, states) for index, actor in self._runners()}
            self._health.gather(calls, timeout_s=STATE_TIMEOUT_S)
            self._raise_if_failed("update_policies()")
        self.config, self.policies = config, policies

    def get_state(self) -> list[dict[str, Any]]:
        """One state per runner, local first (index 0) or remote ones in order.

        A remote runner that died or gives no state within ``STATE_TIMEOUT_S`` is left out,
        with a warning naming it: the policies, optimizers, counters and filters a checkpoint
        needs all live in this process, and each state names its ``worker_index``, so that
        :meth:`set_state` starts the missing runner fresh from its own seed stream.
        """
        if self.local is not None:
            return [self.local.get_state()]
        calls = {index: actor.get_state.remote() for index, actor in self._runners()}
        states = self._health.gather(calls, timeout_s=STATE_TIMEOUT_S)
        for index, failure in sorted(self._health.failed.items()):
            warnings.warn(
                f"Remote env runner worker_index={index} gave no state: {failure.cause}. The "
                "state leaves it out; a restore starts that runner fresh from its own seed stream.",
                RuntimeWarning, stacklevel=2,
            )
        return [states[index] for index in sorted(states)]

    def set_state(self, states: list[dict[str, Any]]) -> None:
        """Restore runner states; runners without a saved state start fresh.

        Remote states go to the runner with their ``worker_index`` when every state names one
        of this group's runners (the same layout, perhaps with a runner missing), and by
        position otherwise (another layout, e.g. the local runner's state into remote ones).
        """
        if self.local is not None:
            if states:
                self.local.set_state(states[0])
            return
        indices = [state.get("worker_index") for state in states]
        if all(type(i) is int and 1 <= i <= len(self.remote) for i in indices) and len(
                set(indices)) == len(indices):
            by_index = dict(zip(indices, states))
        else:
            by_index = dict(enumerate(states[: len(self.remote)], start=1))
        calls = {index: actor.set_state.remote(by_index[index])
                 for index, actor in self._runners() if index in by_index}
        self._health.gather(calls, timeout_s=STATE_TIMEOUT_S)
        self._raise_if_failed("set_state()")

    def stop(self) -> None:
        if self.local is not None:
            self.local.stop()
        if self.remote:
            import ray

            for actor in self.remote:
                ray.kill(actor)  # no wait: a dead actor's kill is a no-op
            self.remote = []
            self._health = _RunnerHealth()
