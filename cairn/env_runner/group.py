"""EnvRunnerGroup: the local env runner, or remote ones as Ray actors, behind one interface."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from cairn.env_runner.env_runner import EnvRunner
from cairn.env_runner.sample_batch import SampleBatch
from cairn.errors import ConfigError

if TYPE_CHECKING:
    from cairn.config.algorithm_config import AlgorithmConfig
    from cairn.policy.policy import Policy

__all__ = ["EnvRunnerGroup"]


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

        self.runner.config = config
        self.runner.policies = {pid: Policy.from_state(s) for pid, s in policy_states.items()}
        self.runner._agent_pids = [{} for _ in range(self.runner.num_envs)]

    def get_state(self) -> dict[str, Any]:
        return self.runner.get_state()

    def set_state(self, state: Mapping[str, Any]) -> None:
        self.runner.set_state(state)

    def stop(self) -> None:
        self.runner.stop()


class EnvRunnerGroup:
    """Samples with the local runner (``num_env_runners=0``) or with remote Ray actors.

    The local runner shares the learner's policy objects. Remote runners receive weights and
    filter states before each sample and send back their filter statistics, which are merged
    into the learner's policies.
    """

    def __init__(
        self, config: AlgorithmConfig, policies: Mapping[str, Policy], *, first_env: Any = None
    ) -> None:
        self.config = config
        self.policies = policies
        self.local: EnvRunner | None = None
        self.remote: list[Any] = []
        if config.num_env_runners == 0:
            self.local = EnvRunner(config, policies, worker_index=0, first_env=first_env)
            return
        close = getattr(first_env, "close", None)
        if close is not None:  # remote runners build their own
            close()
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
        self.remote = [
            actor_cls.remote(config, states, worker_index=i + 1)
            for i in range(config.num_env_runners)
        ]

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

        weights = ray.put(self._weights())
        results = ray.get([actor.sample.remote(weights) for actor in self.remote])
        parts: dict[str, list[SampleBatch]] = defaultdict(list)
        episodes: list[dict[str, Any]] = []
        env_steps = 0
        for batches, metrics, deltas, steps in results:
            for pid, batch in batches.items():
                parts[pid].append(batch)
                self.policies[pid].global_timestep += len(batch)
            for pid, delta in deltas.items():
                if delta is not None and pid in self.policies:
                    self.policies[pid].observation_filter.merge_delta(delta)
            episodes.extend(metrics)
            env_steps += steps
        return {pid: SampleBatch.concat(b) for pid, b in parts.items()}, episodes, env_steps

    def update_policies(self, config: AlgorithmConfig, policies: Mapping[str, Policy]) -> None:
        """Follow an added or removed policy (and a new mapping)."""
        self.config, self.policies = config, policies
        if self.local is not None:
            self.local.config = config
            self.local.policies = dict(policies)
            self.local._agent_pids = [{} for _ in range(self.local.num_envs)]
            return
        import ray

        states = {pid: p.get_state() for pid, p in policies.items()}
        ray.get([actor.reset_policies.remote(config, states) for actor in self.remote])

    def get_state(self) -> list[dict[str, Any]]:
        """One state per runner, local first (index 0) or remote ones in order."""
        if self.local is not None:
            return [self.local.get_state()]
        import ray

        return list(ray.get([actor.get_state.remote() for actor in self.remote]))

    def set_state(self, states: list[dict[str, Any]]) -> None:
        """Restore runner states by position; runners without a saved state start fresh."""
        if self.local is not None:
            if states:
                self.local.set_state(states[0])
            return
        import ray

        ray.get([a.set_state.remote(s) for a, s in zip(self.remote, states)])

    def stop(self) -> None:
        if self.local is not None:
            self.local.stop()
        if self.remote:
            import ray

            for actor in self.remote:
                ray.kill(actor)
            self.remote = []
