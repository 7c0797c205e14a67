"""Algorithm: owns the config, the policies, the env runners and the training loop.

Subclasses implement :meth:`Algorithm.training_step`; everything else (building policies from
the environment's spaces, metrics, evaluation, state and checkpoints) is shared here.
"""

from __future__ import annotations

import contextlib
import os
import time
import warnings
from collections import deque
from collections.abc import Collection, Iterator, Mapping, Sequence
from concurrent.futures import Future
from pathlib import Path
from typing import Any, ClassVar, Literal, overload

import numpy as np

from cairn.algorithms.checkpointer import AlgorithmCheckpointer
from cairn.algorithms.evaluation import evaluate_episodes, evaluation_runner
from cairn.algorithms.metrics import episode_metrics
from cairn.algorithms.policy_changes import (
    config_adding_policy,
    config_removing_policy,
    policies_after_change,
)
from cairn.algorithms.policy_specs import build_policies, probe_agents, record_specs, resolve_policy_specs
from cairn.algorithms.save_restore import algorithm_from_checkpoint, from_state_inputs
from cairn.callbacks.base import make_callbacks, report_checkpoint_saved
from cairn.checkpoint.manager import checkpoint_name
from cairn.config.algorithm_config import AlgorithmConfig, PolicyMapping
from cairn.env_runner.env_runner import EnvRunner
from cairn.env_runner.group import EnvRunnerGroup
from cairn.env_runner.sample_batch import SampleBatch
from cairn.errors import ConfigError, LoggerWarning, UnknownPolicyIdError
from cairn.league import League, attach_league
from cairn.learners import LearnerGroup, LearnFunction, LearnOutput, learner_device
from cairn.policy.policy import Policy
from cairn.policy.spec import PolicySpec
from cairn.policy.state_check import check_finite_policy_state, finite_checked
from cairn.policy.torch_utils import torch_threads
from cairn.policy_ids import DEFAULT_POLICY_ID, check_policy_ids
from cairn.registry import class_reference
from cairn.release import release_all
from cairn.rng import algorithm_rng, rng_state, set_rng_state

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
        self, config: AlgorithmConfig, *, policy_states: Mapping[str, Any] | None = None,
        copy_policy_states: bool = True, followed_settings: Collection[str] | None = None,
    ) -> None:
        """Build from ``config``; ``policy_states`` (``{policy_id: Policy.get_state()}``, as
        :meth:`from_state` passes them) restore those policies instead of building new ones,
        taking their arrays as storage when ``copy_policy_states`` is False. The restored
        policies take the keys ``followed_settings`` of their config (None: all) from
        ``config`` (``Policy.follow_config``) and keep their stored value of the others."""
        if not isinstance(config, self.config_class):
            name = self.config_class.__name__
            raise ConfigError(f"{type(self).__name__} needs a {name}, got a {type(config).__name__}; "
                              f"build it with {name}()...build().")
        config.validate()
        if not config.num_learners:  # remote learners' GPUs are the Ray cluster's (checked there)
            learner_device(config)  # ConfigError now, before any env is built, where torch sees no GPU
        self.config = config.copy()
        self.iteration = 0
        #: Lifetime counters: env steps and agent steps (every agent's rows) sampled, episodes
        #: ended, and ``num_env_steps_trained_lifetime``: the env steps learned from, each once
        #: however many policies learned from it (off-policy: ``minibatch_size`` per minibatch
        #: replayed, a round's updates counted once over its policies; docs/multi-agent.md).
        self.counters = dict.fromkeys(("num_env_steps_sampled_lifetime", "num_agent_steps_sampled_lifetime",
                                       "num_env_steps_trained_lifetime", "num_episodes_lifetime"), 0)
        self._rng = algorithm_rng(self.config.seed)
        #: The result of the last iteration that completed (None before the first): what
        #: ``train()`` returned, or would have, had a league snapshot, evaluation or
        #: ``on_train_result`` not raised.
        self.last_result: dict[str, Any] | None = None
        self._recent_episodes: deque[dict[str, Any]] = deque(maxlen=_METRICS_WINDOW)
        self.policies: dict[str, Policy] = {}
        #: The hooks of ``config.callbacks_class`` (``cairn.Callbacks``; docs/callbacks.md).
        self.callbacks = make_callbacks(self.config.callbacks_class)
        # The instance whose episode hooks the local and evaluation runners run: a wrapper put
        # in self.callbacks later (cairn train --mlflow) forwards no episode hooks.
        self._runner_callbacks = self.callbacks
        #: The league of ``config.league(...)`` (None without one; docs/league.md).
        self.league: League | None = attach_league(self.config)
        probe_env = self._build_policies(policy_states or {}, copy=copy_policy_states,
                                         followed=followed_settings)
        if self.league is not None:
            self.league.set_agents(probe_env)
        self.env_runner_group = EnvRunnerGroup(self.config, self.policies, first_env=probe_env,
                                               callbacks=self._runner_callbacks)
        self._eval_runner: EnvRunner | None = None
        self._eval_runner_state: Mapping[str, Any] | None = None
        self._log_dir: str | None = self.config.log_dir
        #: Saves and restores this algorithm; holds the background writer (save(blocking=False)).
        self._checkpointer = AlgorithmCheckpointer(self)
        #: Who runs the learn functions: this process, or DDP learner actors (docs/learners.md).
        self.learner_group: LearnerGroup | None = None
        with self._stopped_on_error():
            self.learner_group = LearnerGroup(self.config)
            self.setup()
            # What was built took its settings: changing one now would be ignored by training
            # and used by a restore (AlgorithmConfig.freeze: a ConfigError naming the fix).
            self.config.freeze()
            self.callbacks.on_algorithm_init(algorithm=self)  # on the whole algorithm, once checked

    @contextlib.contextmanager
    def _stopped_on_error(self) -> Iterator[None]:
        """Stop this algorithm when the block raises, then let the error go on: while it is
        being built or loaded nobody holds it yet, so nobody else could release its envs,
        runners and learners."""
        try:
            yield
        except Exception:
            self.stop()
            raise

    def setup(self) -> None:
        """Build what a subclass adds (replay buffers, ...) and check the built or restored
        policies, raising what a user must fix. Runs once, in ``__init__``, after the policies,
        env runners and learners and before ``on_algorithm_init`` (which so sees the whole
        algorithm); an exception stops what was built. The base class adds nothing."""

    # ---------------------------------------------------------------------------- building
    def _build_policies(self, states: Mapping[str, Any], *, copy: bool,
                        followed: Collection[str] | None = None) -> Any:
        """New policies, or restored from ``states`` (see :mod:`cairn.algorithms.policy_specs`).
        Returns the env probed for its agents, for the local env runner to reuse."""
        env, agents = probe_agents(self.config)
        resolved = resolve_policy_specs(
            self.config, agents, {pid: PolicySpec.from_dict(s["spec"]) for pid, s in states.items()},
            default_class=self.default_policy_class)
        self.policies.update(build_policies(self.config, resolved, states, copy=copy, followed=followed))
        record_specs(self.config, resolved)
        return env

    @property
    def policies_to_train(self) -> list[str]:
        """IDs of the policies that learn."""
        chosen = self.config.policies_to_train
        return [pid for pid in self.policies if chosen is None or pid in chosen]

    # ---------------------------------------------------------------------------- training
    def training_step(self) -> dict[str, dict[str, float]]:
        """Sample and learn once; return learner stats per policy ID."""
        raise NotImplementedError(f"{type(self).__name__} must implement training_step().")

    def sample_rounds(self) -> Iterator[dict[str, SampleBatch]]:
        """Rounds of experience (:meth:`_sample`: one fragment per environment, by policy) until
        ``train_batch_size`` env steps were sampled since the first, as RLlib samples; a round
        that samples nothing (no env stepped) ends them instead of spinning."""
        counters = self.counters
        start = counters["num_env_steps_sampled_lifetime"]
        while counters["num_env_steps_sampled_lifetime"] - start < self.config.train_batch_size:
            before = counters["num_env_steps_sampled_lifetime"]
            batches = self._sample()
            if counters["num_env_steps_sampled_lifetime"] == before:
                return
            yield batches

    def _sample(self) -> dict[str, SampleBatch]:
        """Collect one round of experience, :meth:`check_sample` it, and update the sampling
        counters and metrics. The episodes waiting on the local runner are counted first
        (:meth:`_record_waiting_episodes`): a league draws this sample's games from a payoff
        that holds them, as in a run restored from a checkpoint saved before it."""
        self._record_waiting_episodes()
        batches, episodes, env_steps = self.env_runner_group.sample()
        self.check_sample(batches)
        self.record_sample(batches, episodes, env_steps)
        return batches

    def check_sample(self, batches: Mapping[str, SampleBatch]) -> None:
        """Refuse (raise) a round of experience before it is counted; accepts any by default."""

    def record_sample(self, batches: Mapping[str, SampleBatch], episodes: Sequence[dict[str, Any]],
                      env_steps: int) -> None:
        """Count a sample (``env_steps``, its batches' agent steps, its finished ``episodes``) into
        the counters, the recent episodes and the league: for samples taken other than by
        :meth:`_sample` (IMPALA's asynchronous fragments)."""
        self.counters["num_env_steps_sampled_lifetime"] += env_steps
        self.counters["num_agent_steps_sampled_lifetime"] += sum(len(b) for b in batches.values())
        self.counters["num_episodes_lifetime"] += len(episodes)
        self._recent_episodes.extend(episodes)
        if self.league is not None:
            self.league.record_episodes(episodes)

    def learn(self, fn: LearnFunction, policy_id: str, **inputs: Any) -> LearnOutput:
        """Run learn function ``fn(config, policy, sync, **inputs)`` on policy ``policy_id``
        where ``config.learners(...)`` says (see :class:`cairn.learners.LearnerGroup`)."""
        assert self.learner_group is not None  # built in __init__
        return self.learner_group.update(fn, policy_id, self.policies[policy_id], **inputs)

    def sync_learners(self, policy_ids: Sequence[str] | None = None) -> None:
        """End the learners' loan of the policies' training state (of ``policy_ids``; None:
        all): what they learned beyond the weights (optimizer state, ...) comes back, and the
        policies' next update sends their whole state (:mod:`cairn.learners.group`). ``train()``
        ends with it, so between iterations the policies own all of it; reading the state
        (``get_state()``, saves) starts with it, and code inside an iteration that writes a
        policy's training state (DQN's target sync) calls it first. A no-op when learning runs
        on the policies themselves."""
        if self.learner_group is not None:
            self.learner_group.sync_to_driver(policy_ids)

    def _torch_threads(self) -> contextlib.AbstractContextManager[None]:
        """Apply ``config.torch_num_threads`` for the duration of a call."""
        return torch_threads(self.config.torch_num_threads, self.policies.values())

    def train(self) -> dict[str, Any]:
        """Run one training iteration and return its results: ``training_iteration``, the
        :attr:`counters`, the :func:`~cairn.algorithms.metrics.episode_metrics` of the last 100
        episodes (``episode_return_mean``, ...), ``learners[policy_id]``, ``time_this_iter_s``,
        ``env_steps_per_s`` (env steps sampled in the iteration over its wall time); plus
        ``evaluation`` when evaluation is due and ``league`` with a league (docs/league.md).

        An exception from an environment, a model or a callback propagates unchanged and
        leaves the algorithm usable (docs/fault-tolerance.md): a sample that raised is
        discarded and its envs start new episodes; :attr:`iteration` counts only iterations
        whose learning completed. Once it did, the iteration counts even if a league snapshot,
        evaluation or ``on_train_result`` raises afterwards, and its result stays in
        :attr:`last_result`."""
        start, steps_before = time.perf_counter(), self.counters["num_env_steps_sampled_lifetime"]
        with self._torch_threads():
            try:
                learner_stats = self.training_step()
            finally:  # also after a failure: the policies keep what the learners learned
                self.sync_learners()
        self.iteration += 1
        result = self.last_result = {
            "training_iteration": self.iteration, **self.counters,
            **episode_metrics(list(self._recent_episodes), policy_ids=self.policies),
            **self.env_runner_group.health_metrics(), "learners": learner_stats}
        try:
            if self.league is not None:  # a snapshot that raises leaves last_result this iteration's
                # Under the same torch threads as training: a snapshot builds a policy and checks
                # its outputs in small forwards, which torch's default threads slow down (~0.3 s a
                # snapshot on a busy 2-core machine instead of milliseconds).
                with self._torch_threads():
                    result["league"] = self.league.end_iteration(self)
            interval = self.config.evaluation_interval
            if interval and self.iteration % interval == 0:
                result["evaluation"] = self.evaluate()
        finally:  # also when they raise: last_result is what train() would have returned
            elapsed = result["time_this_iter_s"] = time.perf_counter() - start
            steps = self.counters["num_env_steps_sampled_lifetime"] - steps_before
            result["env_steps_per_s"] = steps / elapsed if elapsed > 0 else float("nan")
        self.callbacks.on_train_result(algorithm=self, result=result)
        return result

    def evaluate(self, num_episodes: int | None = None, *, seed: int | None = None) -> dict[str, Any]:
        """Play ``num_episodes`` (default ``evaluation_duration``) greedy episodes and report
        returns and lengths (mean/std/min/max); ``seed`` and the keys are explained in
        :func:`cairn.algorithms.evaluation.evaluate_episodes`. A league with fixed opponents adds
        ``league``: main's greedy games against each (:meth:`cairn.league.League.evaluate`)."""
        if seed is None and self._eval_runner is None:
            self._eval_runner = evaluation_runner(self.config, self.policies, self._eval_runner_state,
                                                  callbacks=self._runner_callbacks)
        with self._torch_threads():
            metrics = evaluate_episodes(self._eval_runner, self.config, self.policies, num_episodes,
                                        seed=seed, callbacks=self._runner_callbacks)
            if self.league is not None and self.league.fixed_opponents:
                metrics["league"] = self.league.evaluate(self.config, self.get_policy(self.league.main))
        self.callbacks.on_evaluate_end(algorithm=self, evaluation_metrics=metrics)
        return metrics

    # ------------------------------------------------------------------------------ acting
    def get_policy(self, policy_id: str = DEFAULT_POLICY_ID) -> Policy:
        """The policy with this ID."""
        if policy_id not in self.policies:
            raise KeyError(f"No policy {policy_id!r}; policies are {sorted(self.policies)}.")
        return self.policies[policy_id]

    def compute_single_action(self, obs: Any, *, policy_id: str = DEFAULT_POLICY_ID,
                              explore: bool = False, state: Sequence[Any] | None = None) -> Any:
        """The action of ``policy_id`` for one raw observation, greedy by default
        (``explore=False``, as ``cairn evaluate`` plays), unlike :meth:`Policy.compute_single_action`,
        which samples by default (``explore=True``, as the env runners act while training). A
        recurrent policy takes its ``state`` (``policy.get_initial_state()`` at an episode's
        start) and returns ``(action, state_out)`` (docs/ppo.md, "Recurrent policies")."""
        return self.get_policy(policy_id).compute_single_action(obs, explore=explore, state=state)

    def add_policy(
        self, policy_id: str, spec_or_policy: PolicySpec | Policy, *,
        policy_mapping_fn: PolicyMapping | None = None, policies_to_train: Sequence[str] | None = None,
    ) -> Policy:
        """Add a policy (built from a spec, or an existing Policy object) while training, and
        replace the mapping and the learning policies where given. The ID (a safe directory
        name, not yet in use, unique ignoring case: to replace a policy, remove it first) and
        the new mapping (against the environment's agents) are checked before anything changes.
        A new ``policy_mapping_fn`` applies from each env's next episode: the episodes in flight
        keep their mapping (docs/multi-agent.md). With a league, the IDs ``"<main>_v<n>"`` (its
        snapshots') and its fixed opponents' names are a ConfigError here."""
        if self.league is not None:
            self.league.check_added_policy(policy_id)
        self._change_policies(config_adding_policy(self.config, policy_id, spec_or_policy,
                                                   policy_mapping_fn=policy_mapping_fn,
                                                   policies_to_train=policies_to_train),
                              add=(policy_id, spec_or_policy))
        return self.policies[policy_id]

    def remove_policy(
        self, policy_id: str, *, policy_mapping_fn: PolicyMapping | None = None,
        policies_to_train: Sequence[str] | None = None,
    ) -> None:
        """Remove a policy (``KeyError`` for an unknown ID); agents mapped to it need a new
        ``policy_mapping_fn``. With a league, removing one of its snapshots takes it out of the
        pool as well (the league keeps the mapping); its ``main`` cannot be removed."""
        self.get_policy(policy_id)  # KeyError for an unknown ID, before anything changes
        if self.league is not None and policy_id == self.league.main:
            raise ConfigError(f"Cannot remove policy {policy_id!r}: it is the league's main policy "
                              f"(config.league(main={policy_id!r})). Remove a snapshot instead, or "
                              "build the algorithm without config.league(...).")
        if self.league is not None and policy_id in self.league.pool:
            if policy_mapping_fn is not None or policies_to_train is not None:
                raise ConfigError(
                    f"remove_policy({policy_id!r}, policy_mapping_fn=..., policies_to_train=...): "
                    f"{policy_id!r} is a snapshot in the league's pool, whose mapping and trained "
                    "policies the league keeps. Call remove_policy(policy_id) alone.")
            self.league.remove_snapshot(self, policy_id)  # calls back here once out of the pool
            return
        self._change_policies(config_removing_policy(self.config, policy_id,
                                                     policy_mapping_fn=policy_mapping_fn,
                                                     policies_to_train=policies_to_train),
                              remove=policy_id)

    def _change_policies(self, new_config: AlgorithmConfig, *, remove: str | None = None,
                         add: tuple[str, PolicySpec | Policy] | None = None) -> None:
        """Take the checked ``new_config`` and its policy set (built first: a failure changes
        nothing), then tell the runners and, for a removed policy, the learners (which end its
        loan and drop their copy of it: :meth:`LearnerGroup.sync_to_driver
        <cairn.learners.LearnerGroup.sync_to_driver>`); when either refuses it (a mapping the
        runners cannot follow, a remote runner or learner that fails), the algorithm and its
        runners go back to the old config and policies, and the error goes on. Once all took
        it, :meth:`drop_policy_state` forgets what the algorithm kept for a removed policy. The
        evaluation runner follows the policies each time it evaluates
        (:func:`~cairn.algorithms.evaluation.evaluate_episodes`), not here."""
        policies = policies_after_change(self.policies, new_config, default_class=self.default_policy_class,
                                         add=add, remove=remove)
        old_config, old_policies = self.config, dict(self.policies)
        new_config.freeze()  # as the config it replaces
        self.config = new_config
        self.policies.clear()  # in place: the runner group holds this dict
        self.policies.update(policies)
        try:
            self.env_runner_group.update_policies(new_config, self.policies)
            if remove is not None and self.learner_group is not None:
                self.learner_group.sync_to_driver([remove], release=True)
        except BaseException:
            self.config = old_config
            self.policies.clear()
            self.policies.update(old_policies)
            # A local runner checks before it changes anything; remote ones may hold the new
            # set (and are recreated from the group's): give them the old one back.
            with contextlib.suppress(Exception):  # the first error is the one to report
                self.env_runner_group.update_policies(old_config, self.policies)
            raise
        if remove is not None:
            self.drop_policy_state(remove)

    def drop_policy_state(self, policy_id: str) -> None:
        """Hook: forget what this algorithm keeps for policy ``policy_id`` beside the policy
        (PPO's reward normaliser, a replay buffer), once it was removed: a policy added later
        under the same ID starts as a new one would, and checkpoints hold nothing of it."""

    # ------------------------------------------------------------------------------- state
    def get_state(self, *, copy: bool = True) -> dict[str, Any]:
        """The whole algorithm as a tree of JSON values and numpy arrays (the layout is in
        :mod:`cairn.algorithms.state`). ``copy=False`` may return views of live arrays (policy
        weights, a replay buffer), for a caller that writes them at once.

        Episodes the local env runner finished outside ``train()`` (a direct
        ``env_runner_group.local.sample()``), which the next ``train()`` would count, are
        counted first (counters, :attr:`recent_episodes`, the league): the state holds them,
        and the run goes on as it would have."""
        self.sync_learners()
        self._record_waiting_episodes()
        return {
            "algorithm_class": class_reference(type(self)),
            "config": self.config.to_dict(),
            "iteration": self.iteration,
            "counters": dict(self.counters),
            "rng": rng_state(self._rng),
            "policy_ids": list(self.policies),
            "policies": {pid: p.get_state(copy=copy) for pid, p in self.policies.items()},
            "env_runners": self.env_runner_group.get_state(),
            "evaluation_runner": self.get_evaluation_runner_state(),
            "recent_episodes": list(self._recent_episodes),
            "extra": self.get_extra_state(),
            "components": self.get_components(copy=copy),
            **({} if self.league is None else {"league": self.league.get_state()}),
        }

    def _record_waiting_episodes(self) -> None:
        """Record the episodes waiting on the local env runner, those of a direct
        ``sample()`` outside ``train()`` (a remote runner's are taken with each of its
        samples): before a state is read, since no runner state holds them, and before the
        next sample, so that a run that saved and one that did not count them alike.

        That sample's env and agent steps are not counted (0 here): the lifetime step counters
        are the steps ``train()`` sampled, which drive its batch sizes, the off-policy learning
        start and the save schedules, and that sample's rows reach no batch or replay buffer.
        The runner's ``num_env_steps_sampled`` and the policies' ``global_timestep`` count them."""
        local = self.env_runner_group.local
        if local is not None:
            episodes = local.get_metrics()
            if episodes:
                self.record_sample({}, episodes, 0)

    def set_state(self, state: Mapping[str, Any]) -> None:
        """Restore a state from :meth:`get_state` in place. Policies in the state replace those
        with the same ID; new IDs are added (with their spec in the config, and known to the env
        runners) but no agent is mapped to them unless the current ``policy_mapping_fn`` does
        so. The rest of the config is kept.

        What may refuse its part of the state is checked, or restored aside, first: a policy
        whose network the stored weights do not fit, or whose state holds a NaN weight or a NaN
        or infinite optimizer slot (ValueError naming the policy and the array), the
        iteration, counters and generator, the league's state, the extra state
        (:meth:`set_extra_state`, undone by setting the previous :meth:`get_extra_state` again
        when it or the components raise) and the components (a
        replay buffer of another kind than the config's). When one refuses, nothing has changed
        (``restore()`` of a checkpoint that does not fit keeps the algorithm as it was). With a
        league, its snapshots that the restored pool lacks (taken after an earlier checkpoint
        was saved) are removed, as snapshots leaving the pool are.

        An environment's own ``set_state`` cannot be checked before it runs, so the env runners
        are restored last, then the evaluation runner's stored state (also when a runner
        raised). When an env's ``set_state`` raises, everything else is the state's (policies,
        iteration, counters, generator, recent episodes, league, extra state, components,
        evaluation runner state), and the local runner of that env has the state's generator
        and counters and starts new episodes in all its envs at its next ``sample()``, seeded
        from that generator, as after a sample that raised (docs/fault-tolerance.md): the next
        ``train()`` works. The NaN and infinity check skips the policy states whose reader
        checked them (``restore()`` names them in :func:`cairn.policy.state_check.finite_checked`).
        Subclasses extend it (``super().set_state(state)``); ``restore()`` calls it."""
        # Loans left open (a direct training_step() call) end first: their next update must
        # send the restored state, not go on from the learners' copies.
        self.sync_learners()
        policy_states = state.get("policies", {})
        for pid, policy_state in policy_states.items():
            if isinstance(policy_state, Mapping):  # NaN weights, non-finite optimizer slots
                check_finite_policy_state(policy_state, f"Algorithm.set_state: policy {pid!r}")
        for pid, policy_state in policy_states.items():
            if pid in self.policies:
                self.policies[pid].check_state(policy_state)
        added: dict[str, Policy] = {}
        for pid, policy_state in policy_states.items():
            if pid not in self.policies:
                check_policy_ids([*self.policies, *added, pid])
                with finite_checked(policy_state):  # above, or by the reader
                    added[pid] = Policy.from_state(policy_state)
        iteration = int(state["iteration"])
        counters = {k: int(v) for k, v in state["counters"].items()}
        set_rng_state(np.random.Generator(type(self._rng.bit_generator)()), state["rng"])  # checked aside
        recent_episodes = list(state.get("recent_episodes") or [])
        league_state = state.get("league") if self.league is not None else None
        if self.league is not None and league_state is not None:
            self.league.check_state(league_state, [*self.policies, *added])
        previous_extra = self.get_extra_state()
        # The components know the new policies (a replay buffer is restored for each policy).
        self.policies.update(added)
        try:
            self.set_extra_state(state.get("extra") or {})
            self.set_components(state.get("components") or {})
        except BaseException:
            for pid in added:
                del self.policies[pid]
            self.set_extra_state(previous_extra)
            raise
        for pid, policy_state in policy_states.items():
            if pid not in added:  # checked above
                with finite_checked(policy_state):  # above, or by the reader
                    self.policies[pid].set_state(policy_state)
        if added:  # a new config, as add_policy makes: the built one's policies are read-only
            config = self.config.copy()
            config.policies = {**config.policies, **{pid: PolicySpec(
                type(policy), policy.observation_space, policy.action_space,
                policy_states[pid]["spec"].get("config")) for pid, policy in added.items()}}
            config.freeze()
            self.config = config
            self.env_runner_group.update_policies(self.config, self.policies)
        self.iteration = iteration
        self.counters.update(counters)
        set_rng_state(self._rng, state["rng"])
        self._recent_episodes.clear()  # in place: the window's length stays
        self._recent_episodes.extend(recent_episodes)
        if self.league is not None and league_state is not None:
            pool_before = list(self.league.pool)
            # The saved league's fixed opponents: one whose spec the config replaced starts anew.
            stored = (state.get("config") or {}).get("league_config")
            self.league.set_state(league_state, self.policies,
                                  stored.get("opponents") if isinstance(stored, Mapping) else None)
            # The league's snapshots that the restored pool lacks (taken after the checkpoint
            # was saved: an in-place restore of an earlier one) leave, as snapshots leaving the
            # pool do; kept, the next snapshot would find its ID taken.
            for pid in [p for p in pool_before if p not in self.league.pool and p in self.policies]:
                self.remove_policy(pid)
        try:  # last: a user env's set_state may raise
            self.env_runner_group.set_state(list(state.get("env_runners") or []))
        finally:
            self.set_evaluation_runner_state(state.get("evaluation_runner"))

    def get_extra_state(self) -> dict[str, Any]:
        """Hook: algorithm-specific state (subclasses: e.g. target-network timers)."""
        return {}

    def set_extra_state(self, state: Mapping[str, Any]) -> None:
        """Hook: restore :meth:`get_extra_state`. :meth:`set_state` calls it before the
        components, the policies and the rest change (the policies it adds are in
        :attr:`policies`); when it (or the components) raise, it is called again with the
        :meth:`get_extra_state` of before, so it need not be atomic itself."""

    def get_components(self, *, copy: bool) -> dict[str, Any]:
        """Hook: large parts of the state, each its own checkpoint component (a replay buffer)."""
        return {}

    def set_components(self, components: Mapping[str, Any]) -> None:
        """Hook: restore :meth:`get_components` (called with ``{}`` when none were stored).
        :meth:`set_state` calls it after :meth:`set_extra_state` and before it changes anything
        else, with the restored policies in :attr:`policies`: when it raises, it must leave the
        components as they were (the extra state is set back)."""

    @property
    def rng(self) -> np.random.Generator:
        """The algorithm's own random generator (PPO's minibatch order); part of its state
        (``set_state`` restores it in place)."""
        return self._rng

    @property
    def recent_episodes(self) -> deque[dict[str, Any]]:
        """The last 100 training episodes' metrics, which ``episode_return_mean`` averages."""
        return self._recent_episodes

    @property
    def evaluation_runner(self) -> EnvRunner | None:
        """The runner of :meth:`evaluate`'s episodes, once it has run (None before)."""
        return self._eval_runner

    def get_evaluation_runner_state(self) -> Mapping[str, Any] | None:
        """The evaluation runner's state: the stored one until :meth:`evaluate` builds it."""
        return self._eval_runner.get_state() if self._eval_runner else self._eval_runner_state

    def set_evaluation_runner_state(self, state: Mapping[str, Any] | None) -> None:
        """Restore :meth:`get_evaluation_runner_state` (None: nothing stored)."""
        self._eval_runner_state = state
        if self._eval_runner is not None and self._eval_runner_state is not None:
            self._eval_runner.set_state(self._eval_runner_state)

    @classmethod
    def from_state(
        cls, state: Mapping[str, Any], *, policy_ids: str | Sequence[str] | None = None,
        policy_mapping_fn: PolicyMapping | None = None, policies_to_train: Sequence[str] | None = None,
        config_overrides: Mapping[str, Any] | None = None, copy: bool = True,
    ) -> Algorithm:
        """Rebuild an algorithm from :meth:`get_state` alone (no config or class needed; a
        subclass builds only its own kind); the arguments are in
        :func:`cairn.algorithms.save_restore.from_state_inputs`, and ``copy=False`` lets the
        policies take the state's weight and optimizer arrays as their storage instead of
        copying them (the state must not be used afterwards). Its policy states are checked for
        NaN and infinity as by ``Policy.from_state`` (not again in :meth:`from_checkpoint`,
        whose reader checked them)."""
        algo_cls, config, policy_states = from_state_inputs(
            cls, state, policy_ids=policy_ids, policy_mapping_fn=policy_mapping_fn,
            policies_to_train=policies_to_train, config_overrides=config_overrides)
        # The restored policies keep what they used (a set_learning_rate included) but for the
        # settings that config_overrides names.
        algo: Algorithm = algo_cls(config, policy_states=policy_states, copy_policy_states=copy,
                                   followed_settings=config.policy_settings_set_by(config_overrides or {}))
        with algo._stopped_on_error():  # a state the config refuses (a replay buffer of another kind)
            algo.set_state({**state, "policies": {}})
        return algo

    # -------------------------------------------------------------------------- checkpoints
    @overload
    def save(self, path: str | os.PathLike[str] | None = None, *, blocking: Literal[True] = True,
             storage_options: Mapping[str, Any] | None = None,
             previous: str | os.PathLike[str] | None = None,
             metadata: Mapping[str, Any] | None = None) -> str: ...
    @overload
    def save(self, path: str | os.PathLike[str] | None = None, *, blocking: Literal[False],
             storage_options: Mapping[str, Any] | None = None,
             previous: str | os.PathLike[str] | None = None,
             metadata: Mapping[str, Any] | None = None) -> Future[str]: ...
    @overload  # a default here too: core.Checkpointable and AlgorithmLike promise blocking: bool = True
    def save(self, path: str | os.PathLike[str] | None = None, *, blocking: bool = True,
             storage_options: Mapping[str, Any] | None = None,
             previous: str | os.PathLike[str] | None = None,
             metadata: Mapping[str, Any] | None = None) -> str | Future[str]: ...

    def save(
        self, path: str | os.PathLike[str] | None = None, *, blocking: bool = True,
        storage_options: Mapping[str, Any] | None = None, previous: str | os.PathLike[str] | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> str | Future[str]:
        """Write a checkpoint (atomically) and return its location; without ``path``,
        ``<log_dir>/checkpoint_<NNNNNN>`` numbered by iteration. ``path`` may be a URL
        (``s3://``, ``gs://``, ``memory://``) with fsspec ``storage_options``.

        ``blocking=False`` returns at once a ``concurrent.futures.Future`` of the location:
        the state is snapshotted before ``save`` returns (training afterwards never reaches
        the checkpoint) and written in a background thread. One write is in flight at a time:
        a save while one is running waits for it first. A failed background write raises from
        its Future; if the Future did not deliver it, the next ``save()`` or :meth:`stop`
        (which waits for the write in flight) raises it, once; see
        :mod:`cairn.algorithms.async_save` and docs/checkpoints.md.

        ``previous`` (advanced; :class:`cairn.CheckpointManager` passes it): an earlier
        checkpoint of this algorithm on the same store, whose files are linked (copied
        server-side) instead of rewritten for the policies that did not change.

        ``metadata``: JSON data (a dict) stored in the checkpoint's manifest, which
        ``cairn.get_checkpoint_info(path)["metadata"]`` returns (docs/checkpoints.md).
        """
        if path is None:
            path = Path(self.log_dir) / checkpoint_name(self.iteration)
        iteration = self.iteration  # the snapshot's: a background write may finish later

        def report(location: str) -> None:
            try:  # the checkpoint is committed: a failing report must not say it was not
                report_checkpoint_saved(self.callbacks, algorithm=self, checkpoint=location,
                                        iteration=iteration)
            except Exception as exc:
                warnings.warn(LoggerWarning(
                    f"{type(self.callbacks).__name__}.on_checkpoint_saved raised {type(exc).__name__}: "
                    f"{exc}; the checkpoint {location} was saved and is intact."), stacklevel=2)

        return self._checkpointer.save(path, blocking=blocking, storage_options=storage_options,
                                       previous=previous, metadata=metadata, committed=report)

    @property
    def log_dir(self) -> str:
        """Where ``save()`` puts numbered checkpoints (``~/cairn_results/<Algo>_<time>``)."""
        if self._log_dir is None:
            stamp = time.strftime("%Y-%m-%d_%H-%M-%S")
            run_name = f"{type(self).__name__}_{stamp}_{os.getpid()}"
            self._log_dir = str(Path.home() / "cairn_results" / run_name)
        return self._log_dir

    def restore(self, checkpoint: Any, *, storage_options: Mapping[str, Any] | None = None) -> None:
        """Load a checkpoint of this algorithm (a directory or a URL such as ``s3://...``;
        ``storage_options`` for its fsspec file system) into this object, in place."""
        self._checkpointer.restore(checkpoint, storage_options=storage_options)
        self.callbacks.on_checkpoint_loaded(algorithm=self)

    def restore_from_path(self, path: Any, *, component: str | None = None,
                          storage_options: Mapping[str, Any] | None = None) -> None:
        """Load one component of a checkpoint into this object, in place (RLlib's name):
        ``"policies/<pid>"`` (that policy's whole state), ``"policies/<pid>/weights"`` (its
        network parameters) or None (everything, as :meth:`restore`); reads only that
        component's files. See :mod:`cairn.algorithms.component_restore`."""
        self.sync_learners()  # open loans end first: their next update sends the restored state
        self._checkpointer.restore_component(path, component, storage_options=storage_options)
        # Remote runners take restored weights and filters with the next broadcast: an
        # asynchronous sampler (IMPALA, APPO) would send none for up to broadcast_interval
        # updates, and its requests in flight act with the weights before the restore.
        self.env_runner_group.stop_async_sampling()
        self.callbacks.on_checkpoint_loaded(algorithm=self)

    @classmethod
    def from_checkpoint(
        cls, checkpoint: Any, *, policy_ids: str | Sequence[str] | None = None,
        policy_mapping_fn: PolicyMapping | None = None, policies_to_train: Sequence[str] | None = None,
        config_overrides: Mapping[str, Any] | None = None, storage_options: Mapping[str, Any] | None = None,
    ) -> Algorithm:
        """Rebuild an algorithm from a checkpoint directory or URL (``s3://``, ``memory://``,
        ...), with no config or class in hand (a subclass builds only its own kind: else
        :class:`~cairn.checkpoint.CheckpointClassMismatchError`); a
        :class:`~cairn.CheckpointManager` root means its latest checkpoint. ``policy_ids``
        reads only those policies' files; the other arguments are :meth:`from_state`'s."""
        algo = algorithm_from_checkpoint(
            cls, checkpoint, policy_ids=policy_ids, config_overrides=config_overrides,
            storage_options=storage_options,
            build=lambda state: cls.from_state(
                state, policy_ids=policy_ids, policy_mapping_fn=policy_mapping_fn,
                policies_to_train=policies_to_train, config_overrides=config_overrides, copy=False))
        with algo._stopped_on_error():
            algo.callbacks.on_checkpoint_loaded(algorithm=algo)
        return algo

    def export_policy_checkpoint(
        self, export_dir: str | os.PathLike[str], policy_id: str = DEFAULT_POLICY_ID, *,
        export_native_model_files: bool | None = None,
    ) -> None:
        """Write one policy as a standalone Policy checkpoint (RLlib's name for it), which
        ``Policy.from_checkpoint(export_dir)`` loads with no algorithm: the same as
        ``get_policy(policy_id).export_checkpoint(export_dir, ...)``.
        ``export_native_model_files`` (default: the config's setting) adds ``model/``. Raises
        :class:`~cairn.errors.UnknownPolicyIdError` for an ID this algorithm lacks."""
        if export_native_model_files is None:
            export_native_model_files = self.config.export_native_model_files
        policy = self._policy_to_export(policy_id, "export_policy_checkpoint")
        # A save of the policy's whole state: its loan ends first (as get_state()'s), so that
        # inside an iteration it holds the learners' optimizer state beside their weights.
        self.sync_learners([policy_id])
        policy.export_checkpoint(export_dir, export_native_model_files=export_native_model_files)

    def export_policy_model(
        self, export_dir: str | os.PathLike[str], policy_id: str = DEFAULT_POLICY_ID,
        onnx: int | None = None, extra_outputs: Sequence[str] = (),
    ) -> None:
        """Write one policy's model in a native format that loads without cairn (RLlib's name):
        a ``torch.export`` program (``onnx=None``) or ``model.onnx`` at opset ``onnx``, with
        ``signature.json`` and the optional outputs ``extra_outputs`` (``["value"]``); the same
        as ``get_policy(policy_id).export_model(...)`` (:func:`cairn.export.export_model`,
        docs/export.md). Raises :class:`~cairn.errors.UnknownPolicyIdError` for an ID this
        algorithm lacks, and :class:`~cairn.errors.ExportError` when the model cannot be exported."""
        self._policy_to_export(policy_id, "export_policy_model").export_model(
            export_dir, onnx=onnx, extra_outputs=extra_outputs)

    def _policy_to_export(self, policy_id: str, call: str) -> Policy:
        if policy_id not in self.policies:
            raise UnknownPolicyIdError(
                f"{call}: this algorithm has no policy {policy_id!r}; its policies are "
                f"{sorted(self.policies)}. Pass one of those as policy_id=...")
        return self.policies[policy_id]

    def stop(self) -> None:
        """Wait for a background save in flight (``save(blocking=False)``), then release
        learners, environments and remote runners and call ``on_algorithm_stop``; raises a
        background save's failure that no ``save()`` raised yet, or the first error of a
        release (an env's ``close()``), after every other step ran."""
        learners, evaluation = self.learner_group, self._eval_runner
        release_all(self._checkpointer.flush,
                    learners.stop if learners is not None else lambda: None,
                    self.env_runner_group.stop,
                    evaluation.stop if evaluation is not None else lambda: None,
                    lambda: self.callbacks.on_algorithm_stop(algorithm=self))

    def __repr__(self) -> str:
        return f"{type(self).__name__}(env={self.config.env!r}, policies={sorted(self.policies)})"
