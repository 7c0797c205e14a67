"""Turn-based games (PettingZoo ``AECEnv``): the agent whose turn it is acts, in every env copy.

An :class:`~cairn.env_runner.env_runner.EnvRunner` whose environments are turn-based AEC envs
(:func:`~cairn.env_runner.make_env.is_turn_based_env`) hands its sampling to a
:class:`TurnBasedSampler`. One sampling step moves once in each env copy: the agents to move
(``env.agent_selection``) are grouped by the policy they map to, each policy computes its
actions in one batch, and every env steps.

Transition semantics (docs/multi-agent.md, "Turn-based games"):

* An agent's transition spans from its move to its next move. Its reward is what ``env.last()``
  reports when the agent is next selected (PettingZoo's cumulative reward since the agent last
  acted); its next observation is its observation then, processed by its policy.
* When the game ends, PettingZoo selects every remaining agent once more as a dead agent; each
  one's pending transition ends there with its terminal reward and the terminated/truncated
  flags, and the env is stepped with ``None`` as PettingZoo's protocol asks.
* An agent whose part ends before the game does is selected dead likewise (its transition ends
  with its flags, the env is stepped with ``None``); if the env adds it back in the same game, its
  next move starts a new trajectory (``firsts``).
* A transition whose agent left the game (``env.agents``) without being selected again ends
  with reward 0, ``truncated`` and no next observation of its own, at the step it left (if the
  env adds it back, its next move starts a new trajectory); so does the next observation of a
  dead agent that the env observes as None (its own observation stands in, as in
  :class:`~cairn.env_runner.trajectories.AgentTrajectories`).
* Transitions still waiting for their agent's next move when a fragment ends are carried over
  (and saved by :meth:`TurnBasedSampler.get_state`); they appear in a later batch.

The episode length counts moves (dead-agent steps excluded); returns add up every reward that
``env.last()`` reports, per agent and in total.
"""

from __future__ import annotations

import copy
from collections import defaultdict
from collections.abc import Container, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from cairn.env_runner.agent_mapping import (
    AgentSampler,
    agent_ids_by_name,
    restore_agent_pids,
)
from cairn.env_runner.inference import compute_raw_actions
from cairn.env_runner.sample_batch import SampleBatch, count_sampled_steps
from cairn.env_runner.trajectories import AgentTrajectories
from cairn.env_runner.turn_based_check import check_moves_in_flight
from cairn.errors import ConfigError, EnvError

if TYPE_CHECKING:
    from cairn.policy.policy import Policy

__all__ = ["TurnBasedSampler"]

#: A move waiting for its agent's next observation: (processed obs, raw action, the action's
#: behaviour log-probability under the weights that acted it, or None for a policy that does not
#: want it). The logp is kept with the move: the move may complete in a later fragment, after the
#: policy has learned, and its learner must still see the probability it was acted with.
Pending = tuple[np.ndarray, np.ndarray, "np.floating[Any] | None"]

#: One selection of an agent: (env index, agent, raw obs, reward, terminated, truncated,
#: pending move it completes or None, whether the agent is to move now, whether that pending
#: move was the agent's first of its game).
_Selection = tuple[int, Any, Any, float, bool, bool, "Pending | None", bool, bool]


#: The observation slot of a scripted opponent to move: it acts on the env's own observation
#: (``env.observe``) when it moves, so nothing of it is processed, kept or saved.
NO_ROW = np.zeros(0, np.float32)


class TurnBasedSampler(AgentSampler):
    """Samples turn-based envs (each a PettingZoo ``AECEnv``) for an env runner (the runner
    owns envs, episodes, seeds; the arguments are :class:`AgentSampler`'s).

    An agent mapped to a scripted opponent (a league's fixed opponent: the mapping returned its
    name) moves by ``opponent(observation, action_mask, runner.rng)`` on its raw observation and
    leaves no row: the batches hold only the policies' moves."""

    def init_slots(self) -> None:
        #: Per env: the agent to move and its processed observation (None before a reset).
        self.to_move: list[tuple[Any, np.ndarray] | None] = [None for _ in self.envs]
        #: Per env: the agents that moved and wait for their next observation.
        self.pending: list[dict[Any, Pending]] = [{} for _ in self.envs]
        #: Per env: whether ``on_episode_start`` ran for its episode (at its first selection).
        self.started: list[bool] = [False for _ in self.envs]
        #: Per env: the agents that moved in their current part of its game (an agent whose
        #: part ended, selected as a dead agent, is forgotten: if it is added back, its next move
        #: starts a new trajectory), None after a restore (derived from the moves in flight), and
        #: those whose pending move is their first.
        self.moved: list[set[Any] | None] = [set() for _ in self.envs]
        self.first_moves: list[set[Any]] = [set() for _ in self.envs]

    # ------------------------------------------------------------------------------ mapping
    def agents_in_flight(self) -> list[list[Any]]:
        """Per env: the agents with a pending move, then the agent to move."""
        return [list(self.pending[i]) + ([entry[0]] if entry is not None else [])
                for i, entry in enumerate(self.to_move)]

    # ------------------------------------------------------------------------------ stepping
    def reset_all(self, *, update_filter: bool) -> None:
        """Reset every env and advance each to its first agent to move (pending moves of the
        episodes cut short are dropped). The caller restarts the episode totals first."""
        for i, env in enumerate(self.envs):
            self._reset_env(i, env)
        self._advance(range(len(self.envs)), unfed=self.runner.unfed_filters(update_filter), trajs=None)

    def sample(
        self, steps: int, *, explore: bool, record: bool, update_filter: bool,
    ) -> dict[str, SampleBatch]:
        """Move ``steps`` times in every env; with ``record``, return the transitions that
        completed meanwhile as one batch per policy. In ``EnvRunner.run_episodes`` (not
        recording) only the envs that still owe episodes (``episodes.playing``) move, and
        moving stops once none does."""
        trajs = AgentTrajectories() if record else None
        unfed = self.runner.unfed_filters(update_filter)
        for _ in range(steps):
            live = self.episodes.playing(range(len(self.envs)))
            self._move_all(live, explore=explore, record=record)
            self._advance(live, unfed=unfed, trajs=trajs)
            if self.episodes.all_played():
                break
        return {} if trajs is None else trajs.batches(self.runner.worker_index)

    def _reset_env(self, i: int, env: Any) -> None:
        env.reset(seed=self.draw_seed())
        self.agent_pids[i], self.pending[i], self.to_move[i] = {}, {}, None
        self.started[i] = False
        self.moved[i], self.first_moves[i] = set(), set()
        if not env.agents:
            raise EnvError(f"{type(env).__name__}.reset() left env.agents empty: a turn-based "
                           "game needs at least one agent to move after a reset.")

    def _move_all(self, live: Sequence[int], *, explore: bool, record: bool) -> None:
        """The agent to move of each env in ``live`` acts; one batched inference per policy."""
        by_pid: dict[str, list[int]] = defaultdict(list)
        for i in live:
            entry = self.to_move[i]
            if entry is None:
                raise EnvError("TurnBasedSampler.sample() before reset_all(): no agent to move.")
            by_pid[self.policy_of(i, entry[0])].append(i)
        actions: list[Any] = [None] * len(self.envs)
        for pid, indices in by_pid.items():
            if self.scripted(pid) is not None:
                for i in indices:
                    actions[i] = self._scripted_move(i, pid)
                continue
            policy = self.policies[pid]
            movers = [self.to_move[i] for i in indices]
            obs = np.stack([m[1] for m in movers if m is not None])

            def origin(row: int, indices: list[int] = indices) -> tuple[Any, int, int]:
                i = indices[row]
                entry = self.to_move[i]
                return (None if entry is None else entry[0]), i, self.episodes.current[i].length

            raw, logp = compute_raw_actions(policy, obs, explore=explore, policy_id=pid, origin=origin,
                                            record=record)
            env_actions = policy.dist.to_env(raw)
            if record:  # counted as they act: a DQN policy's epsilon follows at once
                count_sampled_steps(self.policies, {pid: len(indices)})
            for k, (i, mover) in enumerate(zip(indices, movers)):
                assert mover is not None
                self.pending[i][mover[0]] = (obs[k], raw[k], None if logp is None else logp[k])
                self._count_move(i, mover[0])
                actions[i] = env_actions[k]
                history = self.episodes.current[i].history
                if history is not None:
                    history.act(mover[0], env_actions[k])
        for i in live:
            self.envs[i].step(actions[i])
            self.episodes.current[i].length += 1
            self.episodes.step(i)  # on_episode_step (the move's rewards are read at the next selection)

    def _scripted_move(self, i: int, pid: str) -> Any:
        """The move of env ``i``'s agent to move, seated by the scripted opponent ``pid``, on
        its observation now (``env.observe``: :meth:`AgentSampler.scripted_action`)."""
        env, entry = self.envs[i], self.to_move[i]
        assert entry is not None
        agent = entry[0]
        info = (getattr(env, "infos", None) or {}).get(agent)
        action = self.scripted_action(pid, env, agent, env.observe(agent), info)
        history = self.episodes.current[i].history
        if history is not None:
            history.act(agent, action)
        return action

    def _moved(self, i: int) -> set[Any]:
        """The agents that moved in their current part of env ``i``'s game. After a restore it is
        derived from the game as it stands: a game of length 0 had no move; else every agent in
        flight moved (an agent moves, then waits with its move pending until it is selected
        again), and no other did in its current part (an agent whose part ended was selected
        dead, which completed its move: it is in flight no more)."""
        moved = self.moved[i]
        if moved is None:
            entry = self.to_move[i]
            moved = self.moved[i] = (set() if self.episodes.current[i].length == 0 else
                                     {*self.pending[i], *([] if entry is None else [entry[0]])})
        return moved

    def _count_move(self, i: int, agent: Any) -> None:
        """``agent`` moved in env ``i``: note whether it was its first move of its part of the
        game (of the game, unless its part ended and it was added back)."""
        moved = self._moved(i)
        if agent not in moved:
            moved.add(agent)
            self.first_moves[i].add(agent)

    def _advance(self, live: Sequence[int], *, unfed: Container[str],
                 trajs: AgentTrajectories | None) -> None:
        """Bring each env in ``live`` (those that moved) to its next agent to move: read each
        selected agent's reward, step dead agents with ``None``, finish and reset ended games;
        then process the observations per policy in one batch each and complete the pending
        moves."""
        selections: dict[str, list[_Selection]] = defaultdict(list)
        for i in live:
            env = self.envs[i]
            while True:
                self._end_departed_moves(i, trajs)
                if not env.agents:
                    # No move is pending: the agents that left without being selected again had
                    # theirs ended by _end_departed_moves, truncated.
                    assert not self.pending[i]
                    self.finish_episode(i)
                    self._reset_env(i, env)
                agent = env.agent_selection
                obs, reward, terminated, truncated, info = env.last()
                reward = float(reward)
                episode = self.episodes.current[i]
                episode.ret += reward
                episode.agent_returns[agent] += reward
                done = bool(terminated or truncated)
                if done:  # processed below, after steps and maybe a reset that may write into it
                    obs = copy.deepcopy(obs)
                pending = self.pending[i].pop(agent, None)
                # Read now: a game that ends here is reset below, which forgets its first moves.
                first = pending is not None and agent in self.first_moves[i]
                self.first_moves[i].discard(agent)
                selections[self.policy_of(i, agent)].append(
                    (i, agent, obs, reward, bool(terminated), bool(truncated), pending, not done, first))
                if episode.history is not None:  # the reward of its last move, then what it sees
                    if pending is not None:
                        episode.history.reward(agent, reward)
                    episode.history.observe(agent, obs, info)
                if not self.started[i]:  # the game's first selection: its reset is recorded
                    self.started[i] = True
                    self.episodes.start(i)
                if not done:
                    break
                # Its part of the game ends here: added back later in this game, its next move
                # starts a new trajectory (as it does after a restore, which derives the same).
                self._moved(i).discard(agent)
                env.step(None)  # PettingZoo's protocol: a dead agent steps with None
        for pid, items in selections.items():
            if self.scripted(pid) is not None:  # it moves on env.observe(): no row, nothing pending
                for selection in items:
                    if selection[7]:
                        self.to_move[selection[0]] = (selection[1], NO_ROW)
                continue
            # A dead agent's observation may be None (some envs observe nothing after the end):
            # its last transition then has no next observation of its own (AgentTrajectories).
            observed = [s for s in items if s[2] is not None or s[7]]
            processed: dict[int, np.ndarray] = {}
            if observed:
                rows = self.policies[pid].process_observations(
                    [s[2] for s in observed], update=pid not in unfed)
                processed = {id(s): row for s, row in zip(observed, rows)}
            for selection in items:
                i, agent, _, reward, terminated, truncated, pending, moves, first = selection
                row = processed.get(id(selection))
                if pending is not None and trajs is not None:
                    trajs.add((i, agent), pid, pending[0], pending[1], reward, terminated, truncated,
                              first=first, action_logp=pending[2])
                    if row is not None:
                        trajs.set_next_obs((i, agent), row)
                if moves and row is not None:
                    self.to_move[i] = (agent, row)

    def _end_departed_moves(self, i: int, trajs: AgentTrajectories | None) -> None:
        """End the pending moves of the agents that left env ``i``'s ``env.agents`` without being
        selected again, as at the game's end (reward 0, truncated): at once, so that an agent the
        env adds back later in the game starts a new trajectory instead of its move spanning its
        absence. Decided from ``env.agents`` after each step, which a restored runner sees alike."""
        if not self.pending[i]:
            return
        alive = self.envs[i].agents  # a short list: no set built on this per-move path
        for agent in [a for a in self.pending[i] if a not in alive]:  # in the moves' order
            pending = self.pending[i].pop(agent)
            if trajs is not None:
                trajs.add((i, agent), self.agent_pids[i][agent], pending[0], pending[1], 0.0, False, True,
                          first=agent in self.first_moves[i], action_logp=pending[2])
            self.first_moves[i].discard(agent)
            self._moved(i).discard(agent)

    # --------------------------------------------------------------------------------- state
    def get_state(self, *, copy: bool = True) -> list[dict[str, Any]]:
        """Per env: the agent to move and its processed observation, the pending moves
        (processed observations, raw actions and, where the policies want them, behaviour
        log-probabilities; stacked) and the agents' policy IDs."""
        def arr(a: np.ndarray) -> np.ndarray:
            return a.copy() if copy else a

        states = []
        for i, entry in enumerate(self.to_move):
            pending = self.pending[i]
            states.append({
                "agent_pids": {str(a): p for a, p in self.agent_pids[i].items()},
                "to_move": None if entry is None else {"agent": str(entry[0]), "obs": arr(entry[1])},
                "pending_agents": [str(a) for a in pending],
                "pending_obs": _stack_moves(i, pending, 0, "observation rows") if pending else None,
                "pending_actions": _stack_moves(i, pending, 1, "raw actions") if pending else None,
                # NaN for a move whose policy does not want its logp (None in memory).
                "pending_action_logp": np.array([np.nan if p[2] is None else p[2] for p in pending.values()],
                                                np.float32) if pending else None,
            })
        return states

    def set_state(self, states: list[Mapping[str, Any]]) -> bool:
        """Restore :meth:`get_state` (after the envs' own states), the games' mapping included;
        False, with nothing changed, when the agents or the policy set no longer fit what was
        in flight."""
        restored = []
        for i, state in enumerate(states):
            pids = restore_agent_pids(self.envs[i], state["agent_pids"], self.seat_ids())
            if pids is None:
                return False
            ids = agent_ids_by_name(self.envs[i])
            entry = state["to_move"]
            named = ([] if entry is None else [entry["agent"]]) + list(state["pending_agents"])
            if any(name not in ids for name in named):
                return False
            to_move = None if entry is None else (
                ids[entry["agent"]], np.asarray(entry["obs"], dtype=np.float32).copy())

            def policy_of(name: str, pids: dict[Any, str] = pids, ids: dict[str, Any] = ids) -> Any:
                pid = pids.get(ids[name]) or self.config.map_agent(ids[name])
                return None if self.scripted(pid) is not None else self.policies[pid]

            moves = check_moves_in_flight(self.envs[i], i, state, to_move, policy_of)
            pending = {ids[name]: self._restored_move(policy_of(name), *move)
                       for name, move in zip(state["pending_agents"], moves)}
            restored.append((pids, to_move, pending))
        for i, (pids, to_move, pending) in enumerate(restored):
            self.agent_pids[i], self.to_move[i], self.pending[i] = pids, to_move, pending
            self.started[i] = True  # a game in flight: it started before the save
            # Not saved: who moved (derived at the next move) and whether a pending move was its
            # agent's first (taken as not; docs/fault-tolerance.md, n-step).
            self.moved[i], self.first_moves[i] = None, set()
        return True

    @staticmethod
    def _restored_move(policy: Policy, obs: np.ndarray, action: np.ndarray, logp: Any) -> Pending:
        """A pending move as :func:`~cairn.env_runner.turn_based_check.check_moves_in_flight`
        restores it, with its behaviour log-probability where the policy wants one. A state saved
        before ``pending_action_logp`` existed has none: it is taken from the restored weights,
        which are the weights that learn from the move next, so such a move counts as on-policy,
        as it did when that checkpoint was written."""
        if logp is None and policy.wants_action_logp:
            logp = policy.dist.logp_numpy(policy.compute_action_inputs(obs[None]), action[None])[0]
        return obs, action, logp


def _stack_moves(i: int, pending: Mapping[Any, Pending], column: int, what: str) -> np.ndarray:
    """Column ``column`` of env ``i``'s pending moves as one array (the state's format), or a
    :class:`~cairn.errors.ConfigError` when the agents' entries differ in shape or kind of dtype: in a
    game of three or more players whose policies make different observations or actions, two
    pending moves would not stack (numpy's bare ValueError), or would stack into a common dtype
    that restores one policy's actions in another's kind (an int action as a float)."""
    arrays = [np.asarray(p[column]) for p in pending.values()]
    # By kind of dtype: int32 beside int64 stacks (and restores) as it should.
    if len({a.shape for a in arrays}) > 1 or len({a.dtype.kind for a in arrays}) > 1:
        found = ", ".join(f"{str(agent)!r:.40}: {a.dtype}{list(a.shape)}"
                          for agent, a in zip(pending, arrays))
        raise ConfigError(
            f"Cannot save the turn-based env runner's state: in env {i}, the agents waiting for their "
            f"next move have {what} of different shapes or kinds of dtype ({found}), and the runner "
            "state keeps the moves in flight as one array. Fix: give the policies of the players of one game "
            "observations (and actions) of one shape, e.g. by padding the smaller observations.")
    return np.stack(arrays)
