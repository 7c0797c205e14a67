"""Algorithm: owns the config, the policies, the env runners and the training loop.

Subclasses implement :meth:`Algorithm.training_step`; everything else (building policies from
the environment's spaces, metrics, evaluation, state and checkpoints) is shared here.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections import deque
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

from cairn.algorithms.checkpointing import (
    algorithm_from_checkpoint,
    algorithm_from_state,
    policy_to_export,
    restore_algorithm,
    save_algorithm,
)
from cairn.algorithms.evaluation import evaluate_episodes, evaluation_runner
from cairn.algorithms.metrics import episode_metrics
from cairn.algorithms.policy_changes import config_adding_policy, config_removing_policy
from cairn.algorithms.policy_specs import (
    build_policies,
    new_policy,
    probe_agents,
    record_specs,
    resolve_policy_specs,
)
from cairn.config.algorithm_config import AlgorithmConfig, PolicyMapping
from cairn.env_runner.env_runner import EnvRunner
from cairn.env_runner.group import EnvRunnerGroup
from cairn.env_runner.make_env import close_env
from cairn.env_runner.sample_batch import SampleBatch
from cairn.errors import ConfigError
from cairn.policy.policy import Policy
from cairn.policy.spec import PolicySpec
from cairn.policy.torch_utils import torch_threads
from cairn.policy_ids import DEFAULT_POLICY_ID, check_policy_ids
from cairn.registry import class_reference
from cairn.rng import make_rng, rng_state, seeded_rng

__all__ = ["Algorithm"]

_METRICS_WINDOW = 100


class Algorithm:
    """Base class of cairn's algorithms.

    Build one from a config (``PPOConfig().environment("CartPole-v1").build()``) or from a
    checkpoint (``Algorithm.from_checkpoint(path)``), then call :meth:`train` repeatedly.
    """

    #: The config class of this algorithm (``PPOConfig`` for ``PPO``).
    config_class: ClassVar[type[AlgorithmConfig]] = AlgorithmConfig
    #: The policy class used when a PolicySpec names none.
    default_policy_class: ClassVar[type[Policy]] = Policy
    #: This algorithm's config, a ``config_class`` (subclasses narrow the type, so that mypy
    #: checks every option read: ``config: PPOConfig``).
    config: AlgorithmConfig

    def __init__(
        self, config: AlgorithmConfig, *, _policy_states: Mapping[str, Any] | None = None,
        _copy_states: bool = True,
    ) -> None:
        if not isinstance(config, self.config_class):
            raise ConfigError(
                f"{type(self).__name__} needs a {self.config_class.__name__}, got a "
                f"{type(config).__name__}; build it with {self.config_class.__name__}()...build()."
            )
        config.validate()
        self.config = config.copy()
        self.iteration = 0
        self.counters = {
            "num_env_steps_sampled_lifetime": 0,
            "num_agent_steps_sampled_lifetime": 0,
            "num_env_steps_trained_lifetime": 0,
            "num_episodes_lifetime": 0,
        }
        self._rng = seeded_rng(self.config.seed, 1)
        self._recent_episodes: deque[dict[str, Any]] = deque(maxlen=_METRICS_WINDOW)
        self.policies: dict[str, Policy] = {}
        self._probe_env: Any = None
        self._build_policies(_policy_states or {}, copy=_copy_states)
        probe_env, self._probe_env = self._probe_env, None
        self.env_runner_group = EnvRunnerGroup(self.config, self.policies, first_env=probe_env)
        self._eval_runner: EnvRunner | None = None
        self._eval_runner_state: dict[str, Any] | None = None
        self._log_dir: str | None = self.config.log_dir

    # ---------------------------------------------------------------------------- building
    def _probe_agents(self) -> dict[Any, tuple[Any, Any]]:
        """The environment's agents (:func:`~cairn.algorithms.policy_specs.probe_agents`); the
        env is kept in ``self._probe_env`` for the local env runner to reuse."""
        self._close_probe_env()
        self._probe_env, agents = probe_agents(self.config)
        return agents

    def _close_probe_env(self) -> None:
        env, self._probe_env = self._probe_env, None
        close_env(env)

    def _resolve_specs(self, known: Mapping[str, PolicySpec] | None = None) -> dict[str, PolicySpec]:
        """Complete every configured PolicySpec from the environment's agents (see
        :func:`cairn.algorithms.policy_specs.resolve_policy_specs`)."""
        return resolve_policy_specs(self.config, self._probe_agents(), known or {},
                                    default_class=self.default_policy_class)

    def _build_policies(self, states: Mapping[str, Any], *, copy: bool = True) -> None:
        """New policies, or restored from ``states`` (:func:`~cairn.algorithms.policy_specs.build_policies`)."""
        resolved = self._resolve_specs({pid: PolicySpec.from_dict(s["spec"]) for pid, s in states.items()})
        self.policies.update(build_policies(self.config, resolved, states, copy=copy))
        record_specs(self.config, resolved)

    @property
    def policies_to_train(self) -> list[str]:
        """IDs of the policies that learn."""
        chosen = self.config.policies_to_train
        return [pid for pid in self.policies if chosen is None or pid in chosen]

    # ---------------------------------------------------------------------------- training
    def training_step(self) -> dict[str, dict[str, float]]:
        """Sample and learn once; return learner stats per policy ID."""
        raise NotImplementedError(f"{type(self).__name__} must implement training_step().")

    def _sample(self) -> dict[str, SampleBatch]:
        """Collect one round of experience and update the sampling counters and metrics."""
        batches, episodes, env_steps = self.env_runner_group.sample()
        self.counters["num_env_steps_sampled_lifetime"] += env_steps
        self.counters["num_agent_steps_sampled_lifetime"] += sum(len(b) for b in batches.values())
        self.counters["num_episodes_lifetime"] += len(episodes)
        self._recent_episodes.extend(episodes)
        return batches

    def _torch_threads(self) -> contextlib.AbstractContextManager[None]:
        """Apply ``config.torch_num_threads`` for the duration of a call."""
        return torch_threads(self.config.torch_num_threads, self.policies.values())

    def train(self) -> dict[str, Any]:
        """Run one training iteration and return its results.

        Keys include ``training_iteration``, ``num_env_steps_sampled_lifetime``,
        ``num_episodes_lifetime``, ``episode_return_mean``, ``episode_len_mean`` (over the last
        100 episodes), ``policy_episode_return_mean``, ``time_this_iter_s`` and
        ``learners[policy_id]``; plus ``evaluation`` when evaluation is due.
        """
        start = time.perf_counter()
        with self._torch_threads():
            learner_stats = self.training_step()
        self.iteration += 1
        result = {"training_iteration": self.iteration, **self.counters,
                  **episode_metrics(list(self._recent_episodes), policy_ids=self.policies),
                  "learners": learner_stats}
        interval = self.config.evaluation_interval
        if interval and self.iteration % interval == 0:
            result["evaluation"] = self.evaluate()
        result["time_this_iter_s"] = time.perf_counter() - start
        return result

    def evaluate(self) -> dict[str, Any]:
        """Play ``evaluation_duration`` episodes with greedy actions and report their returns."""
        if self._eval_runner is None:
            self._eval_runner = evaluation_runner(self.config, self.policies, self._eval_runner_state)
        with self._torch_threads():
            return evaluate_episodes(self._eval_runner, self.config, self.policies)

    # ------------------------------------------------------------------------------ acting
    def get_policy(self, policy_id: str = DEFAULT_POLICY_ID) -> Policy:
        """The policy with this ID."""
        if policy_id not in self.policies:
            raise KeyError(f"No policy {policy_id!r}; policies are {sorted(self.policies)}.")
        return self.policies[policy_id]

    def compute_single_action(
        self, obs: Any, *, policy_id: str = DEFAULT_POLICY_ID, explore: bool = False
    ) -> Any:
        """The action of ``policy_id`` for one raw observation (greedy by default)."""
        return self.get_policy(policy_id).compute_single_action(obs, explore=explore)

    def add_policy(
        self,
        policy_id: str,
        spec_or_policy: PolicySpec | Policy,
        *,
        policy_mapping_fn: PolicyMapping | None = None,
        policies_to_train: Sequence[str] | None = None,
    ) -> Policy:
        """Add a policy (built from a spec, or an existing Policy object) while training.

        The ID is validated (safe directory name, unique ignoring case) before anything changes.
        """
        new_config = config_adding_policy(self.config, policy_id, spec_or_policy,
                                          policy_mapping_fn=policy_mapping_fn,
                                          policies_to_train=policies_to_train)
        self._apply_policy_change(new_config, add=(policy_id, spec_or_policy))
        return self.policies[policy_id]

    def remove_policy(
        self,
        policy_id: str,
        *,
        policy_mapping_fn: PolicyMapping | None = None,
        policies_to_train: Sequence[str] | None = None,
    ) -> None:
        """Remove a policy; agents mapped to it need a new ``policy_mapping_fn``."""
        self.get_policy(policy_id)  # KeyError for an unknown ID, before anything changes
        new_config = config_removing_policy(self.config, policy_id,
                                            policy_mapping_fn=policy_mapping_fn,
                                            policies_to_train=policies_to_train)
        self._apply_policy_change(new_config, remove=policy_id)

    def _apply_policy_change(
        self, new_config: AlgorithmConfig, *, add: tuple[str, Any] | None = None,
        remove: str | None = None,
    ) -> None:
        old_config = self.config
        self.config = new_config
        known = {pid: p.spec for pid, p in self.policies.items()}
        if add is not None and isinstance(add[1], Policy):
            known[add[0]] = add[1].spec
        try:
            resolved = self._resolve_specs(known)  # validates the mapping against the env's agents
        except Exception:
            self.config = old_config
            raise
        finally:
            self._close_probe_env()
        if remove is not None:
            self.policies.pop(remove)
        if add is not None:
            pid, obj = add
            self.policies[pid] = obj if isinstance(obj, Policy) else new_policy(
                self.config, pid, resolved[pid])
        record_specs(self.config, resolved)
        self.env_runner_group.update_policies(self.config, self.policies)
        if self._eval_runner is not None:
            self._eval_runner.update_policies(self.config, self.policies)

    # ------------------------------------------------------------------------------- state
    def get_state(self, *, copy: bool = True) -> dict[str, Any]:
        """The whole algorithm as a tree of JSON values and numpy arrays.

        ``copy=True`` returns a snapshot that later training does not change; ``copy=False``
        may return views of live arrays (policy weights, a replay buffer), for a caller that
        writes them at once (:meth:`save`).
        """
        eval_state = self._eval_runner.get_state() if self._eval_runner else self._eval_runner_state
        return {
            "algorithm_class": class_reference(type(self)),
            "config": self.config.to_dict(),
            "iteration": self.iteration,
            "counters": dict(self.counters),
            "rng": rng_state(self._rng),
            "policy_ids": list(self.policies),
            "policies": {pid: p.get_state(copy=copy) for pid, p in self.policies.items()},
            "env_runners": self.env_runner_group.get_state(),
            "evaluation_runner": eval_state,
            "recent_episodes": list(self._recent_episodes),
            "extra": self._get_extra_state(),
            "components": self._get_components(copy=copy),
        }

    def _get_extra_state(self) -> dict[str, Any]:
        """Algorithm-specific state (subclasses: e.g. target-network timers)."""
        return {}

    def _get_components(self, *, copy: bool) -> dict[str, Any]:
        """Optional large parts of the state, each stored as its own checkpoint component
        (``components/<name>/``), e.g. a replay buffer. Override in subclasses."""
        return {}

    def _set_components(self, components: Mapping[str, Any]) -> None:
        """Restore :meth:`_get_components` (called with ``{}`` when none were stored)."""

    def _set_extra_state(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`_get_extra_state`."""

    def set_state(self, state: Mapping[str, Any]) -> None:
        """Restore a state from :meth:`get_state` in place.

        Policies in the state replace those with the same ID; new IDs are added (with their
        spec in the config, and known to the env runners) but no agent is mapped to them unless
        the current ``policy_mapping_fn`` does so. The rest of this object's config is kept.
        """
        added = []
        for pid, policy_state in state.get("policies", {}).items():
            if pid in self.policies:
                self.policies[pid].set_state(policy_state)
            else:
                check_policy_ids([*self.policies, pid])
                policy = Policy.from_state(policy_state)
                self.policies[pid] = policy
                self.config.policies[pid] = PolicySpec(
                    type(policy), policy.observation_space, policy.action_space,
                    policy_state["spec"].get("config"))
                added.append(pid)
        if added:
            self.env_runner_group.update_policies(self.config, self.policies)
        self.iteration = int(state["iteration"])
        self.counters.update({k: int(v) for k, v in state["counters"].items()})
        self._rng = make_rng(state["rng"])
        self.env_runner_group.set_state(list(state.get("env_runners") or []))
        self._eval_runner_state = state.get("evaluation_runner")
        if self._eval_runner is not None and self._eval_runner_state is not None:
            self._eval_runner.set_state(self._eval_runner_state)
        self._recent_episodes = deque(state.get("recent_episodes") or [], maxlen=_METRICS_WINDOW)
        self._set_extra_state(state.get("extra") or {})
        self._set_components(state.get("components") or {})

    @classmethod
    def from_state(
        cls,
        state: Mapping[str, Any],
        *,
        policy_ids: str | Sequence[str] | None = None,
        policy_mapping_fn: PolicyMapping | None = None,
        policies_to_train: Sequence[str] | None = None,
        config_overrides: Mapping[str, Any] | None = None,
        copy: bool = True,
    ) -> Algorithm:
        """Rebuild an algorithm from :meth:`get_state` alone (no config or class needed).

        Args:
            policy_ids: Keep only these policies (a str is one policy ID).
            policy_mapping_fn: New agent -> policy mapping (needed when agents were mapped to a
                dropped policy, or when the stored one was a lambda).
            policies_to_train: New list of learning policies.
            config_overrides: Flat config keys as in ``config.to_dict()``, e.g.
                ``{"num_env_runners": 0, "lr": 1e-4}``. A dict for a dict-valued training
                setting (``model``, DQN's ``replay_buffer_config``) is merged into the stored
                one, as ``config.training()`` merges it: ``{"model": {"hidden": [32]}}`` keeps
                the stored activation. Other values replace the stored ones.
            copy: False lets the policies take the state's weight and optimizer arrays as
                their storage instead of copying them (the state must not be used afterwards).
        """
        return algorithm_from_state(
            state, base=Algorithm, policy_ids=policy_ids, policy_mapping_fn=policy_mapping_fn,
            policies_to_train=policies_to_train, config_overrides=config_overrides, copy=copy)

    # -------------------------------------------------------------------------- checkpoints
    def save(self, checkpoint_dir: str | os.PathLike[str] | None = None) -> str:
        """Write a checkpoint (atomically) and return its path.

        Without ``checkpoint_dir``: ``<log_dir>/checkpoint_<NNNNNN>`` numbered by iteration.
        """
        if checkpoint_dir is None:
            checkpoint_dir = Path(self.log_dir) / f"checkpoint_{self.iteration:06d}"
        return save_algorithm(self, checkpoint_dir)

    @property
    def log_dir(self) -> str:
        """Where ``save()`` puts numbered checkpoints (``~/cairn_results/<Algo>_<time>``)."""
        if self._log_dir is None:
            stamp = time.strftime("%Y-%m-%d_%H-%M-%S")
            self._log_dir = str(Path.home() / "cairn_results" / f"{type(self).__name__}_{stamp}_{os.getpid()}")
        return self._log_dir

    def restore(self, checkpoint: Any) -> None:
        """Load a checkpoint of this algorithm into this object, in place."""
        restore_algorithm(self, checkpoint)

    @classmethod
    def from_checkpoint(
        cls,
        checkpoint: Any,
        *,
        policy_ids: str | Sequence[str] | None = None,
        policy_mapping_fn: PolicyMapping | None = None,
        policies_to_train: Sequence[str] | None = None,
        config_overrides: Mapping[str, Any] | None = None,
    ) -> Algorithm:
        """Rebuild an algorithm from a checkpoint directory, with no config or class in hand.

        ``policy_ids`` (a list of IDs, or one ID as a str) restores only those policies and
        reads only their files. The other arguments are as in :meth:`from_state`.

        ``Algorithm.from_checkpoint`` builds whatever algorithm the checkpoint holds; a
        subclass builds only its own kind (or a subclass of it): ``PPO.from_checkpoint`` of a
        DQN checkpoint raises :class:`~cairn.checkpoint.CheckpointClassMismatchError`.
        """
        return algorithm_from_checkpoint(cls, checkpoint, base=Algorithm, policy_ids=policy_ids,
                                         policy_mapping_fn=policy_mapping_fn,
                                         policies_to_train=policies_to_train,
                                         config_overrides=config_overrides)

    def export_policy_checkpoint(
        self, export_dir: str | os.PathLike[str], policy_id: str = DEFAULT_POLICY_ID, *,
        export_native_model_files: bool | None = None,
    ) -> None:
        """Write one policy as a standalone Policy checkpoint (RLlib's name for it), which
        ``Policy.from_checkpoint(export_dir)`` loads with no algorithm.

        The same as ``algo.get_policy(policy_id).export_checkpoint(export_dir, ...)``.
        ``export_native_model_files`` (default: this config's setting) adds ``model/``.
        Raises :class:`~cairn.errors.UnknownPolicyIdError` for an ID this algorithm lacks.
        """
        policy = policy_to_export(self.policies, policy_id, "export_policy_checkpoint")
        if export_native_model_files is None:
            export_native_model_files = self.config.export_native_model_files
        policy.export_checkpoint(export_dir, export_native_model_files=export_native_model_files)

    def export_policy_model(
        self, export_dir: str | os.PathLike[str], policy_id: str = DEFAULT_POLICY_ID,
        onnx: int | None = None,
    ) -> None:
        """Write one policy's model in a native format that loads without cairn (RLlib's name):
        a ``torch.export`` program (``onnx=None``) or ``model.onnx`` at opset ``onnx``, with
        ``signature.json``; see :func:`cairn.export.export_model` and ``docs/export.md``.

        The same as ``algo.get_policy(policy_id).export_model(export_dir, onnx=onnx)``. Raises
        :class:`~cairn.errors.UnknownPolicyIdError` for an ID this algorithm lacks, and
        :class:`~cairn.errors.ExportError` when the model cannot be exported.
        """
        policy_to_export(self.policies, policy_id, "export_policy_model").export_model(
            export_dir, onnx=onnx)

    def stop(self) -> None:
        """Release environments and remote runners."""
        self.env_runner_group.stop()
        if self._eval_runner is not None:
            self._eval_runner.stop()

    def __repr__(self) -> str:
        return f"{type(self).__name__}(env={self.config.env!r}, policies={sorted(self.policies)})"
