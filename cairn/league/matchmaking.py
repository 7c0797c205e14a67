"""Who main plays in each game: the opponent weights of PFSP / uniform / latest, and the
league's policy mapping, which draws one game per episode of each env copy.

A game is drawn when the first agent of an episode is mapped (cairn calls the mapping once per
(episode, agent), docs/multi-agent.md): self-play with probability ``self_play_fraction``
(every seat acts with main), else an opponent drawn by the matchmaking weights and a seat for
main drawn uniformly, the opponent taking the next seat (the other one of two; in a game of
three or more seats main holds all but that one); the episode's other agents then read that
draw. The draws come from the
league's own generator, so a restored league draws the same games.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import numpy as np

from cairn.config.league_settings import DrawnMapping
from cairn.rng import league_remote_mapping_rng

__all__ = ["LeagueState", "LeagueMapping", "opponent_weights", "pfsp_weight"]


def pfsp_weight(win_rate: float) -> float:
    """AlphaStar's "hard" PFSP weight ``(1 - p)^2`` of an opponent main beats with rate ``p``:
    opponents main always beats are not drawn."""
    return (1.0 - win_rate) ** 2


def opponent_weights(kind: str, pool: Sequence[str], win_rates: Mapping[str, float],
                     fixed: Sequence[str] = ()) -> np.ndarray:
    """Draw weights of ``pool`` (snapshots, oldest first) followed by ``fixed`` (fixed
    opponents) under matchmaking ``kind``: ``"uniform"`` weighs all alike, ``"pfsp"`` each by
    its :func:`pfsp_weight` (an opponent with no game in the window counts as never beaten:
    ``p = 0``, weight 1), ``"latest"`` only the newest snapshot (fixed opponents are never
    drawn). All zeros means no opponent is to be drawn (the game is self-play)."""
    everyone = [*pool, *fixed]
    if kind == "uniform":
        return np.ones(len(everyone))
    if kind == "latest":
        return np.array([float(i == len(pool) - 1) for i in range(len(everyone))])
    return np.array([pfsp_weight(win_rates.get(pid, 0.0)) for pid in everyone])


class LeagueState(Protocol):
    """What the mapping reads of the :class:`cairn.league.league.League` that owns it (which
    imports this module, so it is named by what it offers, not imported back)."""

    main: str
    agents: list[Any]
    settings: dict[str, Any]
    plans: dict[str, dict[str, Any]]
    rng: np.random.Generator
    seed: int | None
    #: The fixed opponents' names (config order), drawn with the snapshots in every game kind.
    fixed_names: list[str]

    def opponents(self) -> list[str]: ...

    def win_rates(self) -> dict[str, float]: ...


class LeagueMapping(DrawnMapping):
    """The ``policy_mapping_fn`` a league installs: ``fn(agent_id, episode=..., worker=...)``.

    ``episode`` is ``{"env_index": i, "mapped": {agent: policy ID}, "evaluation": bool}`` (the
    agents of this episode mapped so far) from the env runners, None from the probes of
    ``build()`` and ``add_policy``. Probes and the evaluation runner's episodes get main for
    every agent and draw nothing (the league's draws and planned games are the training
    runners' alone; evaluation against fixed opponents is :meth:`League.evaluate`).

    Copies made for remote env runners (pickling) draw from their own generator per worker and
    sample, seeded by the config seed, the worker and the env steps that runner sampled before
    the sample (:meth:`continue_from`, which the remote runner calls before each sample: a
    runner recreated after a fault, brought to its last position, draws on from there rather
    than repeating its predecessor's draws), with the pool and win rates of when they were sent
    (each snapshot sends them again); only the local runner's draws are the league generator's
    (exact resume with ``num_env_runners=0``).
    """

    def __init__(self, league: LeagueState) -> None:
        self.league = league
        self._remote = False
        self._remote_rngs: dict[int, np.random.Generator] = {}

    def __deepcopy__(self, memo: dict[int, Any]) -> LeagueMapping:
        return self  # config copies share the live league, as they share other callables

    def __getstate__(self) -> dict[str, Any]:
        return {"league": self.league}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.league, self._remote, self._remote_rngs = state["league"], True, {}

    def continue_from(self, worker_index: int, num_env_steps_sampled: int) -> None:
        if self._remote:
            self._remote_rngs[worker_index] = league_remote_mapping_rng(
                self.league.seed, worker_index, num_env_steps_sampled)

    def _rng(self, worker: int | None) -> np.random.Generator:
        if not self._remote:
            return self.league.rng
        key = worker or 0
        if key not in self._remote_rngs:  # a copy no runner positioned (continue_from): its start
            self.continue_from(key, 0)
        return self._remote_rngs[key]

    def draw_game(self, rng: np.random.Generator) -> dict[str, Any]:
        """One game: ``{"opponent": policy ID or None (self-play), "main_seat": index}``."""
        league, settings = self.league, self.league.settings
        opponent = None
        if rng.random() >= settings["self_play_fraction"]:
            fixed = league.fixed_names
            weights = opponent_weights(settings["matchmaking"], league.opponents(), league.win_rates(), fixed)
            pool = [*league.opponents(), *fixed]
            if weights.sum() > 0:
                opponent = pool[int(rng.choice(len(pool), p=weights / weights.sum()))]
        seat = int(rng.integers(len(league.agents)))
        return {"opponent": opponent, "main_seat": seat}

    def __call__(self, agent_id: Any, episode: Mapping[str, Any] | None = None,
                 worker: int | None = None, **kwargs: Any) -> str:
        league = self.league
        main = league.main
        if episode is None or episode.get("evaluation") or agent_id not in league.agents:
            return main  # probes and evaluation episodes: main in every seat, nothing drawn
        slot = f"{worker or 0}:{episode['env_index']}"
        mapped = dict(episode.get("mapped") or {})
        plan = league.plans.get(slot)
        if not mapped or plan is None:
            plan = league.plans[slot] = self.draw_game(self._rng(worker))
        if plan["opponent"] is None:
            return main
        if any(pid != main for pid in mapped.values()):
            return main  # the episode's opponent is seated already
        # The opponent's one seat is the one after main's drawn seat (the other one of two), so
        # that in a game of three or more seats, where main holds all the others, it too is
        # drawn uniformly, whatever the order in which the runner maps the agents.
        opponent_seat = (int(plan["main_seat"]) + 1) % len(league.agents)
        return str(plan["opponent"]) if league.agents.index(agent_id) == opponent_seat else main


def copy_plans(plans: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """A JSON copy of a league's plans (``{slot: game}``)."""
    return copy.deepcopy({k: dict(v) for k, v in plans.items()})
