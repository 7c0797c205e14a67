"""EnvRunnerGroup: the local env runner, or remote ones as Ray actors, behind one interface."""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from cairn.env_runner.async_sampler import AsyncSampler, RemoteFragment
from cairn.env_runner.env_runner import EnvRunner
from cairn.env_runner.fault_tolerance import RemoteRunners
from cairn.env_runner.make_env import close_env
from cairn.env_runner.remote import join_batches
from cairn.env_runner.sample_batch import SampleBatch
from cairn.errors import CairnError, ConfigError
from cairn.ray_cluster import ensure_ray
from cairn.release import release_all

if TYPE_CHECKING:
    from cairn.callbacks.base import Callbacks
    from cairn.config.algorithm_config import AlgorithmConfig
    from cairn.policy.policy import Policy

__all__ = ["EnvRunnerGroup"]


class EnvRunnerGroup:
    """Samples with the local runner (``num_env_runners=0``) or with remote Ray actors.

    The local runner shares the learner's policy objects. Remote runners (worker_index 1..N)
    hold copies: before each sample the learner's weights, filter states and timesteps go into
    Ray's object store once, and every runner reads that one object; afterwards the runners'
    filter statistics are merged into the learner's filters, in worker order. Failed runners
    are restarted, left out or reported as ``config.fault_tolerance(...)`` says
    (:mod:`cairn.env_runner.fault_tolerance`).
    """

    def __init__(
        self, config: AlgorithmConfig, policies: Mapping[str, Policy], *, first_env: Any = None,
        callbacks: Callbacks | None = None,
    ) -> None:
        self.config = config
        self.policies = policies
        self.local: EnvRunner | None = None
        self._remote: RemoteRunners | None = None
        self._async: AsyncSampler | None = None
        self._fragments_dropped = 0  # by samplers ended before the current one
        self._async_used = False
        if config.num_env_runners == 0:
            self.local = EnvRunner(config, policies, worker_index=0, first_env=first_env, callbacks=callbacks)
            return
        close_env(first_env)  # remote runners build their own
        self._remote = RemoteRunners(config, self._policy_states)

    def _policy_states(self) -> dict[str, Any]:
        return {pid: p.get_state() for pid, p in self.policies.items()}

    def remote_actors(self) -> list[Any]:
        """The Ray actor handles of the healthy remote runners, by worker_index (none when
        sampling locally)."""
        return [] if self._remote is None else [a for _, a in sorted(self._remote.actors.items())]

    def health_metrics(self) -> dict[str, int]:
        """``num_healthy_env_runners`` (remote runners that answer; 0 when sampling locally) and
        ``num_env_runner_restarts`` (remote runners recreated since this group was built), as
        ``Algorithm.train()`` reports them; once asynchronous sampling ran, also
        ``num_env_runner_fragments_dropped`` (:attr:`num_fragments_dropped`)."""
        if self._remote is None:
            return {"num_healthy_env_runners": 0, "num_env_runner_restarts": 0}
        dropped = {"num_env_runner_fragments_dropped": self.num_fragments_dropped} if self._async_used else {}
        return {"num_healthy_env_runners": len(self._remote.actors),
                "num_env_runner_restarts": self._remote.num_restarts, **dropped}

    def _broadcast(self) -> dict[str, Any]:
        return {
            pid: {"weights": p.get_weights(), "observation_filter": p.observation_filter.get_state(),
                  "global_timestep": p.global_timestep, "acting": p.acting_settings()}
            for pid, p in self.policies.items()
        }

    def sample(self) -> tuple[dict[str, SampleBatch], list[dict[str, Any]], int]:
        """One round of sampling: ``(batches by policy, finished episodes, env steps)``."""
        if self._remote is None:
            assert self.local is not None
            before = self.local.num_env_steps_sampled
            batches = self.local.sample()
            return batches, self.local.get_metrics(), self.local.num_env_steps_sampled - before
        if self._async is not None and self._async.num_requests_in_flight:
            raise CairnError(
                "EnvRunnerGroup.sample() while asynchronous sampling has requests in flight: the "
                "runners would sample both at once. Take them with sample_async() or drop them with "
                "stop_async_sampling() first.")
        weights = ensure_ray().put(self._broadcast())
        results = self._remote.sample(weights)
        episodes: list[dict[str, Any]] = []
        for result in results:
            result.merge_into(self.policies)
            episodes.extend(result.episodes)
        return join_batches(results), episodes, sum(r.env_steps for r in results)

    # ------------------------------------------------------------------ asynchronous sampling
    def broadcast_weights(self, version: int, *, requests_in_flight: int = 1) -> None:
        """Asynchronous sampling (IMPALA/APPO, remote runners only): put the learner's weights,
        filter states and timesteps into Ray's object store once, as weights ``version``;
        every sample request sent from now on acts with them. The first call starts the
        :class:`~cairn.env_runner.async_sampler.AsyncSampler`, which keeps
        ``requests_in_flight`` requests queued on each runner (IMPALA's
        ``max_requests_in_flight_per_env_runner``) until :meth:`stop_async_sampling`."""
        if self._remote is None:
            raise ConfigError("Asynchronous sampling needs remote env runners, but num_env_runners=0: "
                              "set config.env_runners(num_env_runners=1) or more, or sample with sample().")
        if self._async is None:
            self._async = AsyncSampler(self._remote, requests_in_flight=requests_in_flight)
            self._async_used = True
        self._async.set_weights(self._broadcast(), version)

    @property
    def broadcast_version(self) -> int | None:
        """The weights version of the last :meth:`broadcast_weights`; None when asynchronous
        sampling is not running (never started, or ended: by :meth:`stop_async_sampling`, a
        restore or a policy change, after which the runners need the learner's weights anew)."""
        return None if self._async is None else self._async.weights_version

    @property
    def num_requests_in_flight(self) -> int:
        """Asynchronous ``sample()`` requests sent to the runners and not yet collected (0 when
        asynchronous sampling is not running)."""
        return 0 if self._async is None else self._async.num_requests_in_flight

    def sample_async(self, *, min_fragments: int = 1,
                     max_fragments: int | None = None) -> list[RemoteFragment]:
        """The fragments the runners finished (at least ``min_fragments``, at most
        ``max_fragments``), each tagged with its weights version, their statistics merged into
        the learner's policies as :meth:`sample` merges them; the runners keep sampling
        meanwhile (:mod:`cairn.env_runner.async_sampler`). Join them with
        :func:`~cairn.env_runner.remote.join_batches`."""
        if self._async is None:
            raise CairnError("sample_async() before broadcast_weights(version): the runners have no "
                             "weights version to sample with. Call broadcast_weights(version) first.")
        fragments = self._async.get(min_fragments=min_fragments, max_fragments=max_fragments)
        for fragment in fragments:
            fragment.result.merge_into(self.policies)
        return fragments

    def stop_async_sampling(self, *, wait: bool = False) -> list[RemoteFragment]:
        """End asynchronous sampling; the next :meth:`broadcast_weights` starts it again. With
        ``wait``, wait for the requests in flight and return every fragment not yet taken
        (merged as :meth:`sample_async` merges them); else drop them and return none."""
        sampler, self._async = self._async, None
        if sampler is None:
            return []
        fragments = sampler.drain() if wait else []
        sampler.discard()
        self._fragments_dropped += sampler.num_fragments_dropped
        for fragment in fragments:
            fragment.result.merge_into(self.policies)
        return fragments

    @property
    def num_fragments_dropped(self) -> int:
        """Asynchronous fragments lost with a runner that failed while sampling them, since
        this group was built."""
        return self._fragments_dropped + (0 if self._async is None else self._async.num_fragments_dropped)

    def update_policies(self, config: AlgorithmConfig, policies: Mapping[str, Policy]) -> None:
        """Follow an added or removed policy (and a new mapping): every runner checks the new
        mapping and applies it from each env's next episode (:meth:`EnvRunner.update_policies`:
        the episodes in flight keep theirs); remote runners get copies of ``policies``."""
        if self._remote is None:
            assert self.local is not None
            self.local.update_policies(config, policies)
        else:
            remote = self._remote
            self.stop_async_sampling()  # its fragments and weights are of the old policies
            self.policies, remote.config = policies, config  # what a recreated runner is built from
            remote.recover("update_policies()")
            states = ensure_ray().put(self._policy_states())
            remote.call("reset_policies", {i: (config, states) for i in remote.actors},
                        timeout_s=remote.config.env_runner_health_probe_timeout_s)
            remote.recover("update_policies()")
        self.config, self.policies = config, policies

    def get_state(self) -> list[dict[str, Any]]:
        """One state per runner, local first (index 0) or remote ones in order.

        A remote runner that failed or gives no state within
        ``env_runner_health_probe_timeout_s`` is left out, with a warning naming it: the
        policies, optimizers, counters and filters a checkpoint needs all live in this process,
        and each state names its ``worker_index``, so that :meth:`set_state` starts the missing
        runner fresh from its own seed stream. The next ``sample()`` restarts it.
        """
        if self._remote is None:
            assert self.local is not None
            return [self.local.get_state()]
        remote = self._remote
        states = remote.call("get_state", {i: () for i in remote.actors},
                             timeout_s=remote.config.env_runner_health_probe_timeout_s)
        for index, failure in sorted(remote.failed.items()):
            warnings.warn(
                f"Remote env runner worker_index={index} gave no state: {failure.cause}. The "
                "state leaves it out; a restore starts that runner fresh from its own seed stream.",
                RuntimeWarning, stacklevel=2,
            )
        return [states[index] for index in sorted(states)]

    def set_state(self, states: list[dict[str, Any]]) -> None:
        """Restore runner states, by ``worker_index``; runners without one start fresh.

        The rule across layouts (docs/ray.md): each runner takes the saved state with its own
        ``worker_index``; the first runner of this group (the local one, or remote runner 1),
        when no state has its index, takes the saved state with the lowest ``worker_index``
        that no runner here claims (so a checkpoint of remote runners restores into the local
        runner, and the other way round); every other runner starts fresh from its own seed
        stream; states of runners this group lacks are not used.
        """
        indices = [0] if self._remote is None else list(range(1, self.config.num_env_runners + 1))
        by_index = {int(s["worker_index"]): s for s in states if type(s.get("worker_index")) is int}
        chosen = {i: by_index[i] for i in indices if i in by_index}
        unclaimed = sorted(i for i in by_index if i not in indices)
        if indices[0] not in chosen and unclaimed:
            chosen[indices[0]] = by_index[unclaimed[0]]
        if self._remote is None:
            assert self.local is not None
            if 0 in chosen:
                self.local.set_state(chosen[0])
            return
        remote = self._remote
        self.stop_async_sampling()  # its fragments and weights are of the state being replaced
        remote.recover("set_state()")
        remote.positions.update(chosen)  # a runner recreated later comes back to its state
        remote.call("set_state", {i: (s,) for i, s in chosen.items()},
                    timeout_s=remote.config.env_runner_health_probe_timeout_s)
        remote.recover("set_state()")  # a recreated runner is brought to its state

    def stop(self) -> None:
        """Stop the local runner, asynchronous sampling and the remote runners, each also when
        an earlier one raised (the first error is raised after)."""
        local = self.local

        def stop_remote() -> None:
            if self._remote is not None:
                self._remote.stop()
                self._remote = None

        release_all(local.stop if local is not None else lambda: None, self.stop_async_sampling,
                    stop_remote)
