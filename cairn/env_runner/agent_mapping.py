"""Which policy each agent of a multi-agent env acts with: the mapping the multi-agent samplers
share (:class:`AgentSampler`), and as saved in an env runner's state."""

from __future__ import annotations

from collections.abc import Callable, Collection, Container, Mapping
from typing import TYPE_CHECKING, Any, Protocol

import gymnasium as gym
import numpy as np

from cairn.core import ScriptedOpponent
from cairn.env_runner.recurrent_state import RecurrentStates
from cairn.env_runner.scripted_opponents import (
    check_discrete_action,
    resolve_opponent,
    scripted_move,
    split_observation,
)
from cairn.errors import EnvError
from cairn.policy_ids import check_mapped_policy_id

if TYPE_CHECKING:
    from cairn.config.algorithm_config import AlgorithmConfig
    from cairn.env_runner.episode import EpisodeBook
    from cairn.policy.policy import Policy

__all__ = ["SampledRunner", "AgentSampler", "agent_ids_by_name", "restore_agent_pids"]


class SampledRunner(Protocol):
    """What a multi-agent sampler reads of the :class:`~cairn.env_runner.env_runner.EnvRunner`
    that owns it (and imports the samplers): named here, not imported back."""

    envs: list[Any]
    config: AlgorithmConfig
    policies: dict[str, Policy]
    evaluation: bool
    worker_index: int
    recurrent_states: RecurrentStates

    @property
    def rng(self) -> np.random.Generator: ...

    def unfed_filters(self, update_filter: bool) -> Container[str]: ...


class AgentSampler:
    """What the multi-agent samplers (parallel, turn-based) share: their runner, its envs,
    episode book and seed stream, and each env's ``{agent: policy ID}`` of the episode.

    Args:
        runner: The env runner sampled for. Its ``envs``, ``config`` (the policy mapping),
            ``policies`` and ``worker_index`` (which names the trajectories' streams) are read
            from it, so they follow it when it changes them.
        episodes: The runner's episode book (totals of the current episodes, completed ones).
        draw_seed: Returns the seed of the next env reset (the runner's seed stream).
    """

    def __init__(
        self, runner: SampledRunner, *, episodes: EpisodeBook, draw_seed: Callable[[], int | None]
    ) -> None:
        self.runner = runner
        self.envs: list[Any] = runner.envs
        self.episodes = episodes
        self.draw_seed = draw_seed
        #: Per env: the policy ID of each agent seen this episode.
        self.agent_pids: list[dict[Any, str]] = [{} for _ in self.envs]
        #: Resolved scripted opponents by spec (resolved here, in the runner, from the string the
        #: config carries: remote runners get the spec, never the code).
        self._resolved: dict[str, ScriptedOpponent] = {}
        self.init_slots()

    def init_slots(self) -> None:
        """Create the sampler's own per-env slots (observations in flight, moves pending)."""

    @property
    def config(self) -> AlgorithmConfig:
        """The runner's config."""
        return self.runner.config

    @property
    def policies(self) -> Mapping[str, Policy]:
        """The runner's policies."""
        return self.runner.policies

    def scripted_opponents(self) -> dict[str, str]:
        """``{name: spec}`` of the league's fixed opponents (``config.league(opponents=...)``),
        which the mapping may return in place of a policy ID (both samplers seat them)."""
        league = self.config.league_config
        if not league:
            return {}
        return dict(league.get("opponents") or {})

    def scripted(self, pid: str) -> ScriptedOpponent | None:
        """The scripted opponent named ``pid`` (None when ``pid`` names a policy)."""
        if pid in self.policies:
            return None
        spec = self.scripted_opponents().get(pid)
        if spec is None:
            return None
        if spec not in self._resolved:
            self._resolved[spec] = resolve_opponent(spec)
        return self._resolved[spec]

    def scripted_action(self, pid: str, env: Any, agent: Any, observation: Any, info: Any) -> Any:
        """The action of ``agent``, seated by the scripted opponent named ``pid``, on its raw
        ``observation`` and ``info`` (:func:`~cairn.env_runner.scripted_opponents.split_observation`),
        drawn from the runner's generator (saved with the runner: a resumed run draws the same).
        An action outside a Discrete space, or one its action mask forbids, is an EnvError naming
        the opponent (games in training have no illegal-move count: a forfeit would pass for
        main's win)."""
        opponent = self.scripted(pid)
        assert opponent is not None, pid  # callers ask for the actions of scripted seats only
        space = env.action_space(agent)
        observation, mask = split_observation(observation, info, space)
        action = scripted_move(opponent, observation, mask, self.runner.rng, space)
        if isinstance(space, gym.spaces.Discrete):
            who = f"scripted opponent {pid!r} ({self.scripted_opponents()[pid]!r})"
            index = check_discrete_action(action, space, who)
            if mask is not None and not mask[index]:
                # Played, the env would end the game as the opponent's forfeit, and main's win rate,
                # rating and payoff against it would silently count a broken opponent's moves.
                raise EnvError(f"{who} played {action!r}, which its action mask forbids (legal: "
                               f"{(np.flatnonzero(mask) + int(space.start)).tolist()}). Fix the opponent: it "
                               "must play an action its action_mask allows.")
        return action

    def agents_in_flight(self) -> list[list[Any]]:
        """Per env: the agents of its episode in flight (with an observation to act on, or a
        move waiting for its outcome)."""
        raise NotImplementedError

    def update_policies(self, config: AlgorithmConfig, policies: Mapping[str, Policy]) -> bool:
        """After a policy change (``Algorithm.add_policy``/``remove_policy``, a new mapping):
        True when an episode in flight mapped one of its agents (in flight, or already gone from
        it) to a policy no longer in ``policies``, so that the envs must start new episodes: the
        rule a restore applies to the saved mapping (:func:`restore_agent_pids`), so that a run
        restored after the change continues as the live one. An episode in flight keeps the
        mapping drawn at its start (RLlib's rule: a new ``policy_mapping_fn`` applies from each
        env's next episode); ``agent_pids`` is not changed. ``config``'s mapping is checked
        first: an agent in flight that it maps to a policy not in ``policies`` raises
        :class:`~cairn.errors.ConfigError` (and nothing changes). The runner takes ``config``
        and ``policies`` afterwards."""
        in_flight, seats = self.agents_in_flight(), self.seat_ids(policies)
        for agents in in_flight:
            for agent in agents:
                check_mapped_policy_id(agent, config.map_agent(agent), seats)
        return any(pid not in seats for pids in self.agent_pids for pid in pids.values())

    def seat_ids(self, policies: Mapping[str, Any] | None = None) -> list[str]:
        """The IDs an agent may be mapped to: the policies', then the scripted opponents'."""
        return [*(self.policies if policies is None else policies), *self.scripted_opponents()]

    def policy_of(self, env_index: int, agent: Any) -> str:
        """The policy ID ``agent`` of env ``env_index`` acts with in its current episode: the
        mapping function is called at the agent's first step of each episode, never again in it,
        with ``episode={"env_index": env_index, "mapped": {agent: policy ID}, "evaluation":
        bool}`` (the episode's agents mapped before this one; whether the runner plays
        evaluation episodes) and ``worker`` (the runner's index)."""
        pids = self.agent_pids[env_index]
        if agent not in pids:
            episode = {"env_index": env_index, "mapped": dict(pids), "evaluation": self.runner.evaluation}
            mapped = self.config.map_agent(agent, episode=episode, worker=self.runner.worker_index)
            pids[agent] = check_mapped_policy_id(agent, mapped, self.seat_ids())
        return pids[agent]

    def finish_episode(self, env_index: int) -> None:
        """Record env ``env_index``'s episode as completed, each agent's return under the policy
        ID it was mapped to (:meth:`policy_of`; an agent never mapped, under its own name)."""
        pids = self.agent_pids[env_index]
        self.episodes.finish(env_index, lambda agent: pids.get(agent, str(agent)))


def agent_ids_by_name(env: Any) -> dict[str, Any]:
    """``{str(agent_id): agent_id}`` of ``env``'s possible agents: a state names agents by
    string (JSON keys), the env by its own IDs."""
    return {str(a): a for a in env.possible_agents}


def restore_agent_pids(
    env: Any, saved: Mapping[str, str], policies: Collection[str]
) -> dict[Any, str] | None:
    """The saved ``{agent name: policy ID}`` keyed by ``env``'s agent IDs, or None when it no
    longer fits: an agent the env does not have, or a policy not in ``policies``.

    The mapping of an episode in flight is restored, not drawn again (the mapping function is
    called once per (episode, agent)): its rows go on to the policy that acted its first ones,
    and a mapping function changed at restore applies from each env's next episode.
    Observations in flight were processed by the saved policies' filters, so a runner that
    gets None starts fresh episodes."""
    ids = agent_ids_by_name(env)
    pids = {ids.get(k, k): p for k, p in saved.items()}
    known = set(ids.values())
    if any(a not in known or p not in policies for a, p in pids.items()):
        return None
    return pids

