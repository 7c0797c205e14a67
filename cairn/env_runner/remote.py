"""What runs inside a remote env runner's Ray actor, and how cairn starts the actors.

Ray is imported only inside the functions that need it (the ``ray`` extra): ``import cairn``
stays fast and works without it.
"""

from __future__ import annotations

import os
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from cairn.config.league_settings import DrawnMapping
from cairn.env_runner.env_runner import EnvRunner
from cairn.env_runner.sample_batch import SampleBatch, count_sampled_steps
from cairn.ray_cluster import ensure_ray
from cairn.rng import runner_actions_rng, runner_process_seed, seed_process_generators

if TYPE_CHECKING:
    from cairn.config.algorithm_config import AlgorithmConfig
    from cairn.policy.policy import Policy

__all__ = ["RemoteEnvRunner", "SampleResult", "join_batches", "start_actor"]


@dataclass
class SampleResult:
    """What one remote ``sample()`` sends back to the learner.

    ``filter_deltas``: the observation-filter statistics gathered during this sample, per
    policy (merged into the learner's filters). ``position``: the runner's generator and
    counters after it, i.e. where its own seed stream stands, so that a runner recreated after
    a failure continues the stream instead of starting it over.
    """

    batches: dict[str, SampleBatch]
    episodes: list[dict[str, Any]]
    filter_deltas: dict[str, Any]
    env_steps: int
    position: dict[str, Any]

    def merge_into(self, policies: Mapping[str, Policy]) -> None:
        """Count this sample's agent steps into the learner's ``policies`` and merge its filter
        statistics into theirs (policies this learner lacks are skipped)."""
        count_sampled_steps(policies, {pid: len(batch) for pid, batch in self.batches.items()})
        for pid, delta in self.filter_deltas.items():
            if delta is not None and pid in policies:
                policies[pid].observation_filter.merge_delta(delta)


def join_batches(results: Sequence[SampleResult]) -> dict[str, SampleBatch]:
    """The batches of ``results`` joined per policy, in the given order, as arrays the learner
    owns (one part alone is a read-only view of Ray's object store: it is copied)."""
    parts: dict[str, list[SampleBatch]] = defaultdict(list)
    for result in results:
        for pid, batch in result.batches.items():
            parts[pid].append(batch)
    return {pid: SampleBatch.concat(b) if len(b) > 1 else SampleBatch({k: v.copy() for k, v in b[0].items()})
            for pid, b in parts.items()}


class RemoteEnvRunner:
    """Runs inside a Ray actor: an :class:`EnvRunner` over copies of the learner's policies.

    Also usable in-process (tests compare it with the actor): every call is plain Python.
    """

    def __init__(self, config: AlgorithmConfig, policy_states: Mapping[str, Any], worker_index: int) -> None:
        from cairn.policy.policy import Policy

        # The actor's process is new: torch's global generator starts from the same fixed seed
        # in every one, so environments drawing from it (or numpy's) need a seed of their own.
        seed_process_generators(runner_process_seed(config.seed, worker_index))
        policies = {pid: Policy.from_state(s) for pid, s in policy_states.items()}
        self.runner = EnvRunner(config, policies, worker_index=worker_index)

    def sample(self, broadcast: Mapping[str, Any]) -> SampleResult:
        """Load the learner's weights, filters and timesteps (``broadcast``, one object in Ray's
        store read by every runner), sample one fragment and return it with the statistics."""
        runner = self.runner
        runner.set_weights(broadcast)
        for pid, policy in runner.policies.items():
            if pid in broadcast:
                policy.global_timestep = int(broadcast[pid]["global_timestep"])
            policy.observation_filter.pop_delta()
            # Each runner's own action-sampling stream, keyed by where the runner stands:
            # copies built from one policy state would otherwise draw the same numbers.
            policy.np_random = runner_actions_rng(
                runner.config.seed, runner.worker_index, pid, runner.num_env_steps_sampled)
        mapping = runner.config.policy_mapping_fn
        if isinstance(mapping, DrawnMapping):  # a league's: its games drawn from there too
            mapping.continue_from(runner.worker_index, runner.num_env_steps_sampled)
        before = runner.num_env_steps_sampled
        batches = runner.sample()
        deltas = {pid: p.observation_filter.pop_delta() for pid, p in runner.policies.items()}
        return SampleResult(batches, runner.get_metrics(), deltas,
                            runner.num_env_steps_sampled - before, self.position())

    def position(self) -> dict[str, Any]:
        """The runner's generator and counters: a state for :meth:`EnvRunner.set_state` that
        starts fresh episodes from where its seed stream stands."""
        state = self.runner.get_state()
        return {"worker_index": state["worker_index"], "num_envs": state["num_envs"],
                "multi_agent": state["multi_agent"], "rng": state["rng"], "needs_reset": True,
                "envs": [], "current_obs": None, "episodes": [], "counters": state["counters"]}

    def reset_policies(self, config: AlgorithmConfig, policy_states: Mapping[str, Any]) -> None:
        from cairn.policy.policy import Policy

        policies = {pid: Policy.from_state(s) for pid, s in policy_states.items()}
        self.runner.update_policies(config, policies)

    def ping(self) -> bool:
        """Answers while the actor lives (the group waits for it after starting an actor)."""
        return True

    def pid(self) -> int:
        """The actor's process ID (tests SIGKILL it)."""
        return os.getpid()

    def get_state(self) -> dict[str, Any]:
        return self.runner.get_state()

    def set_state(self, state: Mapping[str, Any]) -> None:
        self.runner.set_state(state)

    def stop(self) -> None:
        self.runner.stop()


def start_actor(config: AlgorithmConfig, policy_states: Any, worker_index: int) -> Any:
    """Create the Ray actor of remote runner ``worker_index`` (1 CPU; Ray does not restart it:
    the group does, restoring its weights, filters and seed stream)."""
    ray = ensure_ray()
    actor_cls = ray.remote(num_cpus=1, max_restarts=0)(RemoteEnvRunner)
    return actor_cls.remote(config, policy_states, worker_index=worker_index)
