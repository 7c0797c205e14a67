"""Parallel multi-agent envs (PettingZoo ``ParallelEnv``): every live agent acts at every step.

An :class:`~cairn.env_runner.env_runner.EnvRunner` whose environments are parallel multi-agent
envs hands its sampling to a :class:`ParallelSampler`: at each step, the agents of all env
copies are grouped by the policy they map to, each policy computes their actions in one batch,
and every env steps with its agents' actions. One trajectory per (env index, agent); a row's
reward, terminated and truncated flags come with the step, its next observation with the
agent's following observation (or its final one). An agent that leaves the game (or whose
episode ends) with neither flag ends its trajectory there as truncated. An agent that got no
observation at a step does not act at the next: the rewards and flags the env gives it until
it observes again (or ends) join the row of its last action. A row still waiting when its
fragment ends waits on into the next (:attr:`ParallelSampler.pending`, saved with the runner's
state), which sends it complete (docs/multi-agent.md). A step or reset that observes no live
agent leaves none to act, and the env could never step again: an
:class:`~cairn.errors.EnvError` naming the env copy.

An agent mapped to a scripted opponent (a league's fixed opponent: the mapping returned its
name) leaves no row: its next action is drawn as soon as its observation arrives, by
``opponent(observation, action_mask, runner.rng)`` on the raw observation, and kept (and saved)
until the env steps with it.
"""

from __future__ import annotations

import copy
from collections import defaultdict
from collections.abc import Container, Mapping
from functools import partial
from typing import TYPE_CHECKING, Any

import numpy as np

from cairn.env_runner.agent_mapping import (
    AgentSampler,
    agent_ids_by_name,
    restore_agent_pids,
)
from cairn.env_runner.episode_history import EpisodeHistory
from cairn.env_runner.inference import RowOrigin
from cairn.env_runner.parallel_state import pending_state, plain_action, restore_action, restore_pending
from cairn.env_runner.sample_batch import SampleBatch, count_sampled_steps
from cairn.env_runner.trajectories import AgentTrajectories, WaitingRow
from cairn.errors import CheckpointFormatError, EnvError

if TYPE_CHECKING:
    from cairn.policy.policy import Policy

__all__ = ["ParallelSampler"]


def _record_step(history: EpisodeHistory, actions: Mapping[Any, Any], rewards: Mapping[Any, Any],
                 obs: Mapping[Any, Any], infos: Mapping[Any, Any] | None, alive: set[Any]) -> None:
    """One step of a parallel env in its episode's history: each acting agent's action and
    reward (0.0 when the env gave none, as in its return), and the observation (with its info)
    of each agent that acted or is alive (an agent that joined: its first)."""
    for agent, action in actions.items():
        history.act(agent, action)
        history.reward(agent, float(rewards.get(agent, 0.0)))
    for agent, o in obs.items():
        if agent in actions or agent in alive:
            history.observe(agent, o, (infos or {}).get(agent, {}))


class ParallelSampler(AgentSampler):
    """Samples parallel multi-agent envs (each a PettingZoo ``ParallelEnv``) for an env runner
    (the runner owns envs, episodes, seeds; the arguments are :class:`AgentSampler`'s)."""

    def init_slots(self) -> None:
        #: Per env: each live agent's processed observation, which its next action is computed from.
        self.obs: list[dict[Any, np.ndarray]] = [{} for _ in self.envs]
        #: Per env: the agents that joined its episode after the reset, or came back to it after
        #: their part in it ended (a respawn), and have not acted yet: their next step is the
        #: first of a new trajectory (``firsts``; at the reset, every agent's is).
        self.joined: list[set[Any]] = [set() for _ in self.envs]
        #: Per env: the next action of each live agent seated by a scripted opponent, drawn when
        #: its observation arrived (nothing of its observation is processed or kept).
        self.scripted_actions: list[dict[Any, Any]] = [{} for _ in self.envs]
        #: Per env: the rows of the agents that acted and still waited for their next observation
        #: when the last recorded fragment ended: the next fragment completes them (and sends
        #: them), with the rewards and flags paid meanwhile. A reset drops them.
        self.pending: list[dict[Any, WaitingRow]] = [{} for _ in self.envs]

    def agents_in_flight(self) -> list[list[Any]]:
        """Per env: the agents with an observation to act on, those a scripted opponent seats,
        then the live agents that acted and wait for their next observation (their episode
        goes on with the policy they acted with: that policy's removal must end it)."""
        in_flight = []
        for i, (obs, scripted) in enumerate(zip(self.obs, self.scripted_actions)):
            waiting = [a for a in self.envs[i].agents
                       if a in self.agent_pids[i] and a not in obs and a not in scripted]
            in_flight.append([*obs, *scripted, *waiting])
        return in_flight

    # ------------------------------------------------------------------------------ stepping
    def reset_all(self, *, update_filter: bool) -> None:
        """Reset every env and process the agents' first observations. The caller restarts the
        episode totals."""
        raw_by_pid: dict[str, list[tuple[int, Any, Any]]] = defaultdict(list)
        for i in range(len(self.envs)):
            first, infos = self._reset_env(i)
            for agent, obs in first.items():
                self._receive(i, agent, obs, infos, raw_by_pid)
        processed = self._process(raw_by_pid, unfed=self.runner.unfed_filters(update_filter))
        for (i, agent), row in processed.items():
            self.obs[i][agent] = row

    def _reset_env(self, i: int) -> tuple[dict[Any, Any], Mapping[Any, Any]]:
        """Reset env ``i``; its live agents' first observations and the infos. Its episode
        records them (with their infos), then ``on_episode_start`` runs."""
        obs, infos = self.envs[i].reset(seed=self.draw_seed())
        self.agent_pids[i] = {}
        self.obs[i] = {}
        self.joined[i] = set()
        self.scripted_actions[i] = {}
        self.pending[i] = {}
        first = {a: o for a, o in obs.items() if a in self.envs[i].agents}
        if not first:
            raise self._no_observation_error(i, "reset() returned")
        history = self.episodes.current[i].history
        if history is not None:
            for agent, o in first.items():
                history.observe(agent, o, (infos or {}).get(agent, {}))
        self.episodes.start(i)
        return first, infos or {}

    def _receive(self, i: int, agent: Any, obs: Any, infos: Mapping[Any, Any] | None,
                 incoming: dict[str, list[tuple[int, Any, Any]]]) -> None:
        """``agent`` of env ``i`` observed ``obs`` and is to act next: a scripted opponent draws
        its action now; a policy's observation joins ``incoming`` (processed per policy)."""
        pid = self.policy_of(i, agent)
        if self.scripted(pid) is None:
            incoming[pid].append((i, agent, obs))
        else:
            self.scripted_actions[i][agent] = self.scripted_action(
                pid, self.envs[i], agent, obs, (infos or {}).get(agent, {}))

    def _process(
        self, raw_by_pid: Mapping[str, list[tuple[int, Any, Any]]], *, unfed: Container[str]
    ) -> dict[tuple[int, Any], np.ndarray]:
        """Process newly received observations per policy in one batch each."""
        processed: dict[tuple[int, Any], np.ndarray] = {}
        for pid, items in raw_by_pid.items():
            rows = self.policies[pid].process_observations([o for _, _, o in items], update=pid not in unfed)
            for k, (i, agent, _) in enumerate(items):
                processed[(i, agent)] = rows[k]
        return processed

    def _no_observation_error(self, i: int, where: str) -> EnvError:
        """Env ``i`` observed none of its live agents: none can act, so it could never step
        again (its episode would neither go on nor end)."""
        env = self.envs[i]
        return EnvError(
            f"Env {i} ({type(env).__name__}): {where} no observation for any agent in env.agents "
            f"({list(env.agents)!r:.200}), so no agent can act and the env can never step again. "
            "A ParallelEnv must observe at least one agent in env.agents after reset() and each "
            "step(), or end the episode by emptying env.agents (PettingZoo's parallel API: an "
            "agent leaves env.agents at the step that terminates or truncates it).")

    def _agent_flags(self, i: int, agent: Any, term_d: Mapping[Any, Any], trunc_d: Mapping[Any, Any],
                     alive: set[Any]) -> tuple[bool, bool]:
        """``(terminated, truncated)`` of ``agent`` in env ``i`` after a step, whether it acted at
        it or not. An agent that left without a flag (an env that ends its episode by emptying
        ``agents``) ends its part truncated, as in turn-based games: unflagged, its rows would run
        on into its next episode's (GAE, a recurrent policy's sequences). A part that ends forgets
        its recurrent state: a later stay of the agent starts afresh."""
        terminated = bool(term_d.get(agent, False))
        truncated = bool(trunc_d.get(agent, False)) or (not terminated and agent not in alive)
        if terminated or truncated:
            self.runner.recurrent_states.end_trajectory((i, agent))
        return terminated, truncated

    def _slot_origin(self, slots: list[tuple[int, Any]], row: int) -> RowOrigin:
        """Agent, env index and episode step of batch row ``row`` (``slots[row]``)."""
        i, agent = slots[row]
        return agent, i, self.episodes.current[i].length

    def sample(
        self, steps: int, *, explore: bool, record: bool, update_filter: bool,
    ) -> dict[str, SampleBatch]:
        """Step every env ``steps`` times; with ``record``, return the experience as one batch
        per policy. In ``EnvRunner.run_episodes`` (not recording) only the envs that still owe
        episodes (``episodes.playing``) act and step, and stepping stops once none does."""
        # One trajectory per (env index, agent); rows are appended as the agent acts, and the
        # next observation of its last row is filled in when the following observation arrives.
        trajs = AgentTrajectories()
        unfed = self.runner.unfed_filters(update_filter)
        # The rows that waited across the last fragment's end wait on in this one (a sample that
        # raises drops them with its fragment; the runner then resets every env). Not recording,
        # nothing follows them: they are dropped (run_episodes resets every env first anyway).
        carried, self.pending = self.pending, [{} for _ in self.envs]
        if record:
            for i, rows in enumerate(carried):
                for agent, waiting in rows.items():
                    waiting.add_to(trajs, (i, agent))
        for _ in range(steps):
            acting = self.episodes.playing(range(len(self.envs)))  # run_episodes: those that owe episodes
            by_pid: dict[str, list[tuple[int, Any]]] = defaultdict(list)
            for i in acting:
                for agent in self.obs[i]:
                    by_pid[self.policy_of(i, agent)].append((i, agent))
            # Scripted opponents' actions were drawn when their observations arrived; an env
            # left out (no actions) is not stepped, and keeps them for its next step.
            actions: list[dict[Any, Any]] = [{} for _ in self.envs]
            for i in acting:
                actions[i] = dict(self.scripted_actions[i])
            acted: dict[tuple[int, Any], tuple[np.ndarray, np.ndarray]] = {}
            states_in: dict[tuple[int, Any], list[np.ndarray]] = {}  # recurrent policies' rows
            logps: dict[tuple[int, Any], np.ndarray] = {}  # of policies that want them
            for pid, slots in by_pid.items():
                policy = self.policies[pid]
                obs = np.stack([self.obs[i][a] for i, a in slots])
                origin = partial(self._slot_origin, slots)
                raw, logp, state_in = self.runner.recurrent_states.act(
                    policy, obs, slots, explore=explore, policy_id=pid, origin=origin, record=record)
                env_actions = policy.dist.to_env(raw)
                if record:  # counted as they act: a DQN policy's epsilon follows at once
                    count_sampled_steps(self.policies, {pid: len(slots)})
                for k, (i, agent) in enumerate(slots):
                    actions[i][agent] = env_actions[k]
                    acted[(i, agent)] = (obs[k], raw[k])
                    if state_in is not None:
                        states_in[(i, agent)] = [s[k] for s in state_in]
                    if logp is not None:
                        logps[(i, agent)] = logp[k]
            # Step every env; gather the raw observations to process, per policy.
            incoming: dict[str, list[tuple[int, Any, Any]]] = defaultdict(list)
            ended: set[tuple[int, Any]] = set()
            for i, env in enumerate(self.envs):
                if not actions[i]:
                    continue
                scripted = self.scripted_actions[i]
                self.scripted_actions[i] = {}
                # An agent alive after the step and not before it joins (or comes back: its part
                # before ended when it left env.agents, _agent_flags), and so does one whose part
                # ended at this step and that observes on (an env that respawns it at once).
                # Decided from this step alone, which a restored runner replays alike.
                was_alive = set(env.agents)
                obs_d, rew_d, term_d, trunc_d, infos_d = env.step(actions[i])
                ep = self.episodes.current[i]
                opening = ep.length == 0  # the episode's first step: every agent's first in it
                ep.length += 1
                alive = set(env.agents)
                parted: set[Any] = set()  # the agents whose part ended at this step
                for agent in actions[i]:
                    r = float(rew_d.get(agent, 0.0))
                    ep.ret += r
                    ep.agent_returns[agent] += r
                    first = opening or agent in self.joined[i]
                    self.joined[i].discard(agent)
                    terminated, truncated = self._agent_flags(i, agent, term_d, trunc_d, alive)
                    if terminated or truncated:
                        parted.add(agent)
                    if record and agent not in scripted:
                        trajs.add((i, agent), self.agent_pids[i][agent], *acted[(i, agent)], r,
                                  terminated, truncated, first=first, state_in=states_in.get((i, agent)),
                                  action_logp=logps.get((i, agent)))
                # The other agents of the episode (those that had no observation at the last
                # step did not act at this one): what the env pays them counts in their return,
                # and joins, with their flags, the row of their last action while it waits for
                # its next observation (carried from the last fragment, if need be).
                for agent in self.agent_pids[i]:
                    if agent in actions[i]:
                        continue
                    r = float(rew_d.get(agent, 0.0))
                    if agent in rew_d:
                        ep.ret += r
                        ep.agent_returns[agent] += r
                    terminated, truncated = self._agent_flags(i, agent, term_d, trunc_d, alive)
                    if terminated or truncated:
                        parted.add(agent)
                    if trajs.waiting((i, agent)):
                        trajs.extend_last((i, agent), r, terminated, truncated)
                        if agent not in alive:
                            ended.add((i, agent))
                            if agent in obs_d:  # a copy: see below
                                incoming[self.policy_of(i, agent)].append(
                                    (i, ("final", agent), copy.deepcopy(obs_d[agent])))
                if ep.history is not None:
                    _record_step(ep.history, actions[i], rew_d, obs_d, infos_d, alive)
                self.episodes.step(i)  # on_episode_step, when the user's callbacks have one
                episode_over = not alive
                for agent in actions[i]:
                    if (agent not in alive or episode_over) and agent not in scripted:
                        ended.add((i, agent))
                        if agent in obs_d:  # a copy: processed after the reset below, which may
                            # write into the very array (an env returning its own buffers)
                            incoming[self.policy_of(i, agent)].append(
                                (i, ("final", agent), copy.deepcopy(obs_d[agent])))
                if episode_over:
                    self.finish_episode(i)
                    self.runner.recurrent_states.end_episode(i)
                    reset_obs, reset_infos = self._reset_env(i)
                    for agent, o in reset_obs.items():
                        self._receive(i, agent, o, reset_infos, incoming)
                else:
                    self.obs[i] = {}
                    for agent in env.agents:  # not the set: its order varies with the hash seed
                        if agent in obs_d:
                            # Joined now (its first observation), or back after its part ended:
                            # a new trajectory, from the policy's initial recurrent state.
                            if agent not in self.agent_pids[i] or agent not in was_alive or agent in parted:
                                self.joined[i].add(agent)
                            self._receive(i, agent, obs_d[agent], infos_d, incoming)
                    if not any(agent in obs_d for agent in env.agents):
                        raise self._no_observation_error(i, f"step {ep.length} of its episode returned")
            processed = self._process(incoming, unfed=unfed)
            for (i, tag), processed_row in processed.items():
                if isinstance(tag, tuple):  # ("final", agent): next obs of a finished agent
                    if trajs.waiting((i, tag[1])):
                        trajs.set_next_obs((i, tag[1]), processed_row)
                    continue
                # The row of the agent's last action, at this step or (it did not observe since)
                # an earlier one.
                if (i, tag) not in ended and trajs.waiting((i, tag)):
                    trajs.set_next_obs((i, tag), processed_row)
                self.obs[i][tag] = processed_row
            for key in ended:  # no later observation is theirs (a reset's is the next episode's)
                trajs.close(key)
            if self.episodes.all_played():
                break
        if not record:
            return {}
        # A row still waiting for its agent's next observation is not sent with its own
        # observation standing in: the next fragment completes it.
        for i, agent in trajs.waiting_keys():
            self.pending[i][agent] = trajs.pop_waiting((i, agent))
        return trajs.batches(self.runner.worker_index)

    # --------------------------------------------------------------------------------- state
    def get_state(self, *, copy: bool = True) -> list[dict[str, Any]]:
        """Per env: the live agents, their processed observations (``copy=False``: views),
        their policy IDs, the scripted opponents' next actions (JSON numbers or arrays) and the
        rows waiting for their agents' next observations
        (:func:`~cairn.env_runner.parallel_state.pending_state`)."""
        return [
            {"agents": [str(a) for a in obs],
             "obs": {str(a): row.copy() if copy else row for a, row in obs.items()},
             "agent_pids": {str(a): p for a, p in self.agent_pids[i].items()},
             "scripted_actions": {str(a): plain_action(act) for a, act in self.scripted_actions[i].items()},
             "pending": pending_state(self.pending[i], copy=copy)}
            for i, obs in enumerate(self.obs)
        ]

    def set_state(self, states: list[Mapping[str, Any]]) -> bool:
        """Restore :meth:`get_state` (after the envs' own states), the episodes' mapping
        included; False, with nothing changed, when the agents changed or a saved policy is
        gone: the observations in flight belong to other agents or were processed by other
        policies' filters, so the envs start over. Scripted opponents' actions or waiting rows
        that do not fit the restored env are a :class:`~cairn.errors.CheckpointFormatError`
        (nothing changed)."""
        restored = []
        for i, entry in enumerate(states):
            saved = restore_agent_pids(self.envs[i], entry["agent_pids"], self.seat_ids())
            if saved is None:
                return False
            ids = agent_ids_by_name(self.envs[i])
            obs = {ids.get(k, k): np.asarray(v, dtype=np.float32) for k, v in entry["obs"].items()}
            scripted = self._restore_scripted_actions(i, saved, entry.get("scripted_actions") or {})
            # Format 4 on (the 3 -> 4 migration gives older states an empty list; none is refused).
            pending = restore_pending(self.envs[i], i, entry.get("pending"), pids=saved,
                                      acting={*obs, *scripted}, policy_of=self._restored_policy)
            restored.append((saved, obs, scripted, pending))
        for i, (saved, obs, scripted, pending) in enumerate(restored):
            self.agent_pids[i], self.obs[i], self.scripted_actions[i] = saved, obs, scripted
            self.pending[i] = pending
            # Not saved: an agent that joined (or came back) at the last step before the save
            # counts as having acted (docs/fault-tolerance.md, n-step).
            self.joined[i] = set()
        return True

    def _restored_policy(self, pid: str) -> Policy | None:
        """The policy ``pid`` names (:meth:`restore_agent_pids` checked it is one), None for a
        scripted opponent."""
        return None if self.scripted(pid) is not None else self.policies[pid]

    def _restore_scripted_actions(self, i: int, pids: Mapping[Any, str],
                                  saved: Mapping[str, Any]) -> dict[Any, Any]:
        """Env ``i``'s saved scripted actions keyed by agent, checked: one for each live agent
        that a scripted opponent seats and for no other, each an action of its space."""
        env = self.envs[i]
        where = f"The saved env runner state's current_obs[{i}]['scripted_actions']"
        ids = agent_ids_by_name(env)
        seated = [str(a) for a in env.agents if self.scripted(pids.get(a, "")) is not None]
        if sorted(saved) != sorted(seated):
            raise CheckpointFormatError(f"{where} has actions for {sorted(saved)!r:.100}; env {i}'s live "
                                        f"agents seated by scripted opponents are {sorted(seated)!r:.100}. "
                                        "Restore from an unedited checkpoint.")
        actions = {}
        for name, value in saved.items():
            space = env.action_space(ids[name])
            action = restore_action(space, value)
            if action is None:
                raise CheckpointFormatError(f"{where}[{name!r:.60}] is {value!r:.60}, not an action of "
                                            f"{space}. Restore from an unedited checkpoint.")
            actions[ids[name]] = action
        return actions

