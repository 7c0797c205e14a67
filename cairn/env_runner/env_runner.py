"""EnvRunner: steps vectorised environments with batched policy inference.

One runner owns ``num_envs_per_env_runner`` environments (in its process, or each in a child
process with ``gym_env_vectorize_mode="async"``: :mod:`cairn.env_runner.vector_envs`), the
episode bookkeeping, and a numpy random generator that seeds resets. It steps single-agent
Gymnasium envs itself, and hands multi-agent ones to a sampler: PettingZoo ``ParallelEnv`` ones to a
:class:`~cairn.env_runner.parallel.ParallelSampler`, turn-based ``AECEnv`` ones to a
:class:`~cairn.env_runner.turn_based.TurnBasedSampler`. Policies are passed in (the learner's
own objects for the local runner, copies for remote ones). ``sample()`` returns
``{policy_id: SampleBatch}``.
"""

from __future__ import annotations

import copy
from collections.abc import Container, Mapping
from functools import partial
from typing import TYPE_CHECKING, Any

import numpy as np

from cairn.callbacks.base import Callbacks, make_callbacks, overrides
from cairn.env_runner.agent_mapping import agent_ids_by_name
from cairn.env_runner.blas_threads import single_threaded_blas
from cairn.env_runner.episode import EpisodeBook
from cairn.env_runner.episode_policies import ActedRows, group_by_policy, process_by_policy
from cairn.env_runner.inference import RowOrigin
from cairn.env_runner.make_env import is_multi_agent_env, is_turn_based_env, make_env
from cairn.env_runner.parallel import ParallelSampler
from cairn.env_runner.recurrent_state import RecurrentStates, refuse_recurrent_policies
from cairn.env_runner.sample_batch import SampleBatch, count_sampled_steps, stream_ids
from cairn.env_runner.turn_based import TurnBasedSampler
from cairn.env_runner.vector_envs import make_vector_envs
from cairn.errors import ConfigError
from cairn.policy_ids import check_mapped_policy_id
from cairn.rng import draw_reset_seed, env_runner_rng, make_rng, rng_state

if TYPE_CHECKING:
    from cairn.config.algorithm_config import AlgorithmConfig
    from cairn.policy.policy import Policy

__all__ = ["EnvRunner", "make_env", "is_multi_agent_env", "DEFAULT_AGENT_ID"]

#: The agent ID under which a single-agent environment's one agent is mapped to a policy.
DEFAULT_AGENT_ID = "default_agent"


class EnvRunner:
    """Collects experience from vectorised environments.

    Args:
        config: The algorithm config (environment, mapping, vectorisation).
        policies: ``{policy_id: Policy}`` used for inference.
        worker_index: 0 for the local runner, 1.. for remote ones; selects env seeds.
        num_envs: Overrides ``config.num_envs_per_env_runner`` (evaluation uses 1).
        seed_offset: Added to the seed, to keep evaluation envs apart from training envs.
        first_env: An already created environment to use as the first one (``"async"``
            closes it: each environment is created in its own child process).
        callbacks: The ``cairn.Callbacks`` whose episode and sample hooks run here (default:
            a new instance of ``config.callbacks_class``).
        evaluation: This runner plays evaluation episodes: the policy mapping gets
            ``episode["evaluation"] = True`` (a league then seats main everywhere).
    """

    def __init__(
        self,
        config: AlgorithmConfig,
        policies: Mapping[str, Policy],
        *,
        worker_index: int = 0,
        num_envs: int | None = None,
        seed_offset: int = 0,
        first_env: Any = None,
        callbacks: Callbacks | None = None,
        evaluation: bool = False,
    ) -> None:
        self.config = config
        #: Whether this runner plays :meth:`Algorithm.evaluate`'s episodes (told to the policy
        #: mapping, so that a league draws no training game there).
        self.evaluation = evaluation
        #: The hooks of ``config.callbacks_class`` (the local runner shares its algorithm's).
        self.callbacks = callbacks if callbacks is not None else make_callbacks(config.callbacks_class)
        self.policies = dict(policies)
        self.worker_index = worker_index
        self.num_envs = num_envs or config.num_envs_per_env_runner
        self._rng = env_runner_rng(config.seed, worker_index, seed_offset)
        #: The environments, stepped together (in this process or in children).
        self.vector_envs = make_vector_envs(config, self.num_envs, first_env, worker_index=worker_index,
                                            seed_offset=seed_offset)
        self.envs = self.vector_envs.envs
        self.multi_agent = is_multi_agent_env(self.envs[0])
        self._episodes = EpisodeBook(self.num_envs, self.callbacks, self, multi_agent=self.multi_agent)
        # Infos cross from "async" children only when an episode hook may read them.
        self.vector_envs.keep_infos = self._episodes.recording
        self.num_env_steps_sampled = 0
        self._obs: np.ndarray | None = None  # single-agent: processed obs [E, d]
        self._needs_reset = True
        #: The recurrent policies' state of each trajectory in flight (env copy, or env and agent).
        self.recurrent_states = RecurrentStates()
        #: The multi-agent sampler (None for single-agent envs).
        self._agents: ParallelSampler | TurnBasedSampler | None = None
        if self.multi_agent:
            sampler = TurnBasedSampler if is_turn_based_env(self.envs[0]) else ParallelSampler
            if sampler is TurnBasedSampler:
                refuse_recurrent_policies(self.policies)
            self._agents = sampler(self, episodes=self._episodes, draw_seed=self._draw_seed)
        #: Single-agent: per env, the policy of its current episode (mapped as each one starts).
        self._env_pids: list[str] = []

    @property
    def num_episodes(self) -> int:
        """Episodes this runner has completed (a counter of its state)."""
        return self._episodes.num_episodes

    @property
    def rng(self) -> np.random.Generator:
        """The runner's generator (saved in its state): the seeds of env resets, and the moves of
        scripted opponents (:mod:`cairn.env_runner.scripted_opponents`)."""
        return self._rng

    def unfed_filters(self, update_filter: bool) -> Container[str]:
        """The policies whose observation filters a sampling call leaves unfed (read once per
        call): all of them without ``update_filter``, else those outside
        ``config.policies_to_train`` (none when it is None: all learn). Those act, but a frozen
        policy (a league snapshot, a fixed opponent) keeps normalising as it did when it was
        frozen, as it keeps its weights."""
        chosen = self.config.policies_to_train
        if not update_filter:
            return self.policies.keys()
        return frozenset() if chosen is None else frozenset(p for p in self.policies if p not in chosen)

    # ------------------------------------------------------------------------------- helpers
    def _draw_seed(self) -> int | None:
        return None if self.config.seed is None else draw_reset_seed(self._rng)

    def _mapped_policy(self, config: AlgorithmConfig | None = None,
                       policies: Mapping[str, Policy] | None = None) -> str:
        """The policy ID that ``config`` (default: this runner's) maps the single agent to, which
        must be one of ``policies`` (default: this runner's)."""
        config = self.config if config is None else config
        policies = self.policies if policies is None else policies
        return check_mapped_policy_id(DEFAULT_AGENT_ID, config.map_agent(DEFAULT_AGENT_ID), policies)

    def _reset_all(self, *, update_filter: bool) -> None:
        self._episodes.restart_all()
        self.recurrent_states.clear()
        if self._agents is not None:
            self._agents.reset_all(update_filter=update_filter)
        else:
            seeds = {i: self._draw_seed() for i in range(self.num_envs)}
            resets = self.vector_envs.reset(seeds)
            self._env_pids = [self._mapped_policy() for _ in range(self.num_envs)]
            self._obs = process_by_policy(self.policies, [o for o, _ in resets.values()], self._env_pids,
                                          unfed=self.unfed_filters(update_filter))
            for i, (o, info) in resets.items():
                self._begin_episode(i, o, info)
        self._needs_reset = False

    def _begin_episode(self, i: int, obs: Any, info: Any) -> None:
        """Env ``i`` was reset to ``obs``: its episode records it, then ``on_episode_start``."""
        history = self._episodes.current[i].history
        if history is not None:
            history.observe(DEFAULT_AGENT_ID, obs, info)
        self._episodes.start(i)

    # -------------------------------------------------------------------------------- sample
    def sample(self, num_steps: int | None = None, *, explore: bool = True) -> dict[str, SampleBatch]:
        """Step every environment ``num_steps`` times (default: the rollout fragment length)
        and return the experience keyed by policy ID."""
        steps = num_steps or self.config.get_rollout_fragment_length()
        # What _discard_fragment puts back should this sample raise.
        before = (self.num_env_steps_sampled, self._episodes.mark(),
                  {pid: p.global_timestep for pid, p in self.policies.items()})
        try:
            with single_threaded_blas():  # acting on a few rows at a time: one BLAS thread
                if self._needs_reset:
                    self._reset_all(update_filter=True)
                batches = self._sampler()(steps, explore=explore, record=True, update_filter=True)
            self.num_env_steps_sampled += steps * self.num_envs
            if overrides(self.callbacks, "on_sample_end"):
                self.callbacks.on_sample_end(samples=batches, env_runner=self)
        except BaseException as error:
            self._discard_fragment(before, error)
            raise
        return batches

    def _discard_fragment(self, before: tuple[int, tuple[int, int], dict[str, int]],
                          error: BaseException) -> None:
        """After a ``sample()`` that raised ``error`` (an env, a callback, a model): the fragment
        is dropped, the counters are as before it, and every env starts a new episode before it
        is stepped again (the one that raised is in an unknown state; docs/fault-tolerance.md).

        The new episodes start here, so that a checkpoint saved before the next ``sample()``
        holds envs in step with their runner and resumes exactly. Not on an interrupt (Ctrl-C
        should end the program at once): then, or when a reset raises too, the envs are reset
        at the next ``sample()``, which raises what it meets; ``error`` goes on unchanged."""
        self.num_env_steps_sampled, mark, timesteps = before
        self._episodes.forget_since(mark)
        for pid, timestep in timesteps.items():
            if pid in self.policies:
                self.policies[pid].global_timestep = timestep
        self._needs_reset = True
        if isinstance(error, Exception):
            try:
                with single_threaded_blas():
                    self._reset_all(update_filter=True)
            except Exception:  # the next sample() resets again, and raises this one then
                pass

    def run_episodes(self, num_episodes: int, *, explore: bool = False) -> list[dict[str, Any]]:
        """Play ``num_episodes`` fresh episodes without recording or updating filters
        (used for evaluation) and return their metrics, in the order they ended.

        Which episodes count is decided before their lengths are known, so that short episodes
        are not favoured: env copy ``i`` of the runner's ``k`` plays the first
        ``num_episodes // k + (1 if i < num_episodes % k else 0)`` episodes it starts (its
        *share*; one env copy plays them all), and only the copies that still owe episodes are
        stepped. (Keeping the first ``num_episodes`` to *end* would: a copy in a short episode
        ends it and starts another while a long one is still in flight.) Equal seeds give
        equal episodes.

        Stepping stops at the step that ends the last of them: no episode beyond them ends,
        so the episode hooks see the episodes reported and no others (the next one begins, in
        the reset that follows an end, and is left unplayed; so is the first episode of a copy
        whose share is 0).

        The episodes a ``sample()`` finished and :meth:`get_metrics` has not taken yet (a
        direct ``sample()`` outside ``train()``) stay waiting, whether this call returns or
        raises: the next ``train()`` or ``get_state()`` of the algorithm still counts them."""
        if (isinstance(num_episodes, bool) or not isinstance(num_episodes, (int, np.integer))
                or num_episodes < 0):
            raise ConfigError(f"run_episodes(num_episodes={num_episodes!r}): pass an int of at least 0.")
        n, k = int(num_episodes), self.num_envs
        waiting = self._episodes.take()  # put back below, after this run's episodes are taken
        try:
            with single_threaded_blas():
                self._reset_all(update_filter=False)
                self._episodes.owed = [n // k + (1 if i < n % k else 0) for i in range(k)]
                sample = self._sampler()
                while not self._episodes.all_played():
                    sample(64, explore=explore, record=False, update_filter=False)
            played = self._episodes.take()
        except BaseException:
            self._episodes.take()  # the episodes of a run that raised are not reported
            raise
        finally:
            self._episodes.completed = waiting
            self._episodes.owed = None
            self._needs_reset = True
        return played

    def _sampler(self) -> Any:
        """The sampling function for this runner's kind of environment."""
        return self._sample_single_agent if self._agents is None else self._agents.sample

    def _row_origin(self, env_indices: list[int] | None, row: int) -> RowOrigin:
        """Agent, env index and episode step of row ``row`` of a batch acted for
        ``env_indices`` (None: every env)."""
        i = row if env_indices is None else env_indices[row]
        return DEFAULT_AGENT_ID, i, self._episodes.current[i].length

    def _sample_single_agent(
        self, steps: int, *, explore: bool, record: bool, update_filter: bool,
    ) -> dict[str, SampleBatch]:
        """Step the envs ``steps`` times; with ``record``, return the experience by policy ID.
        In :meth:`run_episodes` (not recording) only the envs that still owe episodes act and
        step, and stepping stops once none does."""
        n_envs, envs, episodes = self.num_envs, self.vector_envs, self._episodes.current
        env_pids = self._env_pids  # each env's policy for its episode (mapped as one starts)
        step_hook = self._episodes.step if self._episodes.has_step_hook else None
        recording = self._episodes.recording
        unfed = self.unfed_filters(update_filter)
        obs = self._obs
        assert obs is not None
        if record:
            # [steps, envs, d] views of env-major storage: the batch's env-major rows are then
            # these arrays themselves, not copies (for image rows, 2 x 58 MB an iteration).
            obs_buf = np.empty((n_envs, steps, obs.shape[1]), dtype=np.float32).swapaxes(0, 1)
            next_buf = np.empty((n_envs, steps, obs.shape[1]), dtype=np.float32).swapaxes(0, 1)
            rew_buf = np.empty((steps, n_envs), dtype=np.float32)
            term_buf = np.zeros((steps, n_envs), dtype=bool)
            trunc_buf = np.zeros((steps, n_envs), dtype=bool)
            acted = ActedRows(steps, n_envs)
        keys = [(i, DEFAULT_AGENT_ID) for i in range(n_envs)]
        if record:  # an episode's first step: at t = 0, one that had not stepped yet
            firsts = np.zeros((steps, n_envs), dtype=bool)
            firsts[0] = [ep.length == 0 for ep in episodes]
        for t in range(steps):
            # run_episodes: the envs that owe episodes (None: every env; always so in sample()).
            live = self._episodes.playing(None)
            assert live is None or not record
            env_actions: Any = [None] * n_envs
            for pid, rows in _acting_groups(env_pids, live):  # one group (rows None) unless per-episode draws
                policy = self.policies[pid]
                group_keys = keys if rows is None else [keys[i] for i in rows]
                raw, logp, state_in = self.recurrent_states.act(
                    policy, obs if rows is None else obs[rows], group_keys, explore=explore,
                    policy_id=pid, origin=partial(self._row_origin, rows), record=record)
                if record:  # the actions, their logps and the state each row acted from
                    acted.record(t, pid, policy, rows, raw, logp, state_in)
                    # Counted as they act, as the multi-agent runners count: a DQN policy's
                    # epsilon (and SAC's random warm-up) follows its schedule step by step,
                    # not once per fragment.
                    count_sampled_steps(self.policies, {pid: n_envs if rows is None else len(rows)})
                actions = policy.dist.to_env(raw)
                if rows is None:
                    env_actions = actions
                else:
                    for k, i in enumerate(rows):
                        env_actions[i] = actions[k]
            next_raw: list[Any] = [None] * n_envs
            finals, reset_seeds = [], {}
            if live is None:
                stepped: Any = enumerate(envs.step(env_actions))
            else:
                stepped = zip(live, envs.step([env_actions[i] for i in live], live))
            for i, (o, r, terminated, truncated, info) in stepped:
                ep = episodes[i]
                # As a Python float: an env's numpy float32 rewards would otherwise add up in
                # float32, which drifts over long episodes (the multi-agent samplers do the same).
                ep.ret += float(r)
                ep.length += 1
                ep.agent_returns[DEFAULT_AGENT_ID] += float(r)
                if recording:  # the raw observation, as the env returned it
                    ep.history.step(DEFAULT_AGENT_ID, env_actions[i], r, o, info)  # type: ignore[union-attr]
                if step_hook is not None:
                    step_hook(i)
                if record:
                    rew_buf[t, i] = r
                    term_buf[t, i] = terminated
                    trunc_buf[t, i] = truncated
                if terminated or truncated:
                    # A copy: it is filtered after the env's reset, which may write the next
                    # episode's first observation into the very array (an env returning its own
                    # buffer); "async" copies it anyway, in the pipe.
                    finals.append((i, copy.deepcopy(o), env_pids[i]))
                    self._episodes.finish(i, {DEFAULT_AGENT_ID: env_pids[i]}.__getitem__)
                    self.recurrent_states.end_episode(i)
                    reset_seeds[i] = self._draw_seed()  # drawn in env order, in both modes
                next_raw[i] = o
            for i, (o, info) in envs.reset(reset_seeds).items():
                next_raw[i] = o
                env_pids[i] = self._mapped_policy()  # its next episode's policy
                self._begin_episode(i, o, info)
            if live is None:
                next_obs = process_by_policy(self.policies, next_raw, env_pids, unfed=unfed)
            else:  # the envs that did not step keep their observations
                next_obs = obs.copy()
                next_obs[live] = process_by_policy(self.policies, [next_raw[i] for i in live],
                                                   [env_pids[i] for i in live], unfed=unfed)
            if record:
                obs_buf[t] = obs
                next_buf[t] = next_obs
                if finals:  # processed by the policy of the episode they end
                    final_rows = process_by_policy(self.policies, [o for _, o, _ in finals],
                                                   [pid for _, _, pid in finals], unfed=unfed)
                    next_buf[t, [i for i, _, _ in finals]] = final_rows
            obs = next_obs
            if self._episodes.all_played():
                break  # run_episodes has its episodes (not recording: no buffer is left part-filled)
        self._obs = obs
        if not record:
            return {}
        firsts[1:] = term_buf[:-1] | trunc_buf[:-1]  # ... later, the step after an episode's end
        return acted.batches(
            obs=obs_buf, rewards=rew_buf, terminateds=term_buf, truncateds=trunc_buf, firsts=firsts,
            next_obs=next_buf,
            streams=np.broadcast_to(stream_ids(self.worker_index, range(n_envs)), (steps, n_envs)))

    # ------------------------------------------------------------------------------- metrics
    def get_metrics(self) -> list[dict[str, Any]]:
        """Return and forget the episodes completed since the last call."""
        return self._episodes.take()

    # --------------------------------------------------------------------------------- state
    def get_state(self, *, copy: bool = True) -> dict[str, Any]:
        """Environments, current observations, episode totals, counters and RNG, as data
        (``copy=False``: the current observations as views)."""
        if self._agents is not None:
            current: Any = self._agents.get_state(copy=copy)
            # A multi-agent env's mapping of its episode is in its entry of current_obs.
            mapping: dict[str, Any] = {}
        else:
            current = None if self._obs is None else (self._obs.copy() if copy else self._obs)
            mapping = {"episode_policy_ids": list(self._env_pids)}
        return {
            "worker_index": self.worker_index,
            "num_envs": self.num_envs,
            "multi_agent": self.multi_agent,
            "turn_based": isinstance(self._agents, TurnBasedSampler),
            "rng": rng_state(self._rng),
            "needs_reset": self._needs_reset,
            "envs": self.vector_envs.get_states(),
            "current_obs": current,
            **mapping,
            "episodes": [ep.to_state() for ep in self._episodes.current],
            "recurrent_states": self.recurrent_states.get_state(copy=copy),
            "counters": {
                "num_env_steps_sampled": self.num_env_steps_sampled,
                "num_episodes": self.num_episodes,
            },
        }

    def set_state(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`get_state`. Environments whose state cannot be set (or a different
        number of them) start fresh episodes seeded from the restored generator. The episodes
        completed and not yet taken (:meth:`get_metrics`) are forgotten: they are the replaced
        run's."""
        # The episodes completed since the last get_metrics() (a direct sample(), outside
        # train()) belong to the run this state replaces: the next train() must not count them.
        self._episodes.take()
        self._rng = make_rng(state["rng"])
        counters = state["counters"]
        self.num_env_steps_sampled = int(counters["num_env_steps_sampled"])
        self._episodes.num_episodes = int(counters["num_episodes"])
        # Until the whole state is in: a state refused half-way (CheckpointFormatError from a
        # check below) leaves envs that the next sample() resets, not half-restored ones.
        self._needs_reset = True
        env_states = state.get("envs") or []
        exact = (
            not state.get("needs_reset", True)
            and len(env_states) == self.num_envs
            and bool(state.get("multi_agent")) == self.multi_agent
            and bool(state.get("turn_based")) == isinstance(self._agents, TurnBasedSampler)
            and self.vector_envs.set_states(env_states)
        )
        if not exact:
            self._needs_reset = True
            return
        if self._agents is not None:
            if not self._agents.set_state(state["current_obs"]):
                self._needs_reset = True  # the agents, the mapping or the policy set changed
                return
            self._episodes.restore(state["episodes"], lambda i: agent_ids_by_name(self.envs[i]))
        else:
            # The policy of each env's episode in flight is restored, not drawn again; a state
            # without it (older checkpoints, whose mapping was one policy for every episode)
            # maps each env now.
            pids = state.get("episode_policy_ids")
            pids = [self._mapped_policy() for _ in range(self.num_envs)] if pids is None \
                else [str(p) for p in pids]
            if len(pids) != self.num_envs or any(p not in self.policies for p in pids):
                self._needs_reset = True  # a saved policy is gone: its filter processed the obs
                return
            self._env_pids = pids
            self._obs = np.asarray(state["current_obs"], dtype=np.float32).copy()
            self._episodes.restore(state["episodes"], lambda i: {})
        # Without saved states (a checkpoint of a feed-forward policy) trajectories start afresh.
        agents = self._agents

        def policy_of(i: int, agent: Any) -> Policy:
            return self.policies[self._env_pids[i] if agents is None else agents.policy_of(i, agent)]

        single = {str(DEFAULT_AGENT_ID): DEFAULT_AGENT_ID}

        def agent_ids(i: int) -> Mapping[str, Any]:
            return agent_ids_by_name(self.envs[i]) if self.multi_agent else single

        self.recurrent_states.set_state(state.get("recurrent_states") or [], agent_ids, policy_of,
                                        num_envs=self.num_envs)
        self._needs_reset = False

    def update_policies(self, config: AlgorithmConfig, policies: Mapping[str, Policy]) -> None:
        """Follow an added or removed policy, or a new ``policy_mapping_fn``.

        The episodes in flight keep the mapping they started with (RLlib's rule); the agents
        follow ``config``'s mapping from their next episode. That mapping is checked first: an
        agent in flight that it maps to a policy not in ``policies`` raises
        :class:`~cairn.errors.ConfigError`, and nothing changes. When an episode in flight acts
        with a policy that is gone (removed), every environment starts a new episode at the
        next ``sample()`` (its observation in flight went through that policy's filter);
        otherwise the episodes go on.
        """
        policies = dict(policies)
        if self._agents is not None:
            changed = self._agents.update_policies(config, policies)
        else:
            self._mapped_policy(config, policies)  # checked before anything changes
            changed = any(pid not in policies for pid in self._env_pids)
        self.config, self.policies = config, policies
        self._needs_reset = self._needs_reset or changed

    def set_weights(self, weights: Mapping[str, Mapping[str, Any]]) -> None:
        """Load policy weights (and filter states, and the settings their actions read,
        ``Policy.acting_settings``) sent by the learner."""
        for pid, w in weights.items():
            if pid in self.policies:
                self.policies[pid].set_weights(w["weights"])
                self.policies[pid].observation_filter.set_state(w["observation_filter"])
                if "acting" in w:
                    self.policies[pid].set_acting_settings(w["acting"])

    def stop(self) -> None:
        """Close the environments (``"async"``: and end their child processes)."""
        self.vector_envs.close()


def _acting_groups(env_pids: list[str], live: list[int] | None) -> list[tuple[str, list[int] | None]]:
    """:func:`group_by_policy` of the envs ``live`` (None: every env, whose groups' rows are
    None when one policy acts for all)."""
    if live is None:
        return group_by_policy(env_pids)
    return [(pid, live if rows is None else [live[k] for k in rows])
            for pid, rows in group_by_policy([env_pids[i] for i in live])]
