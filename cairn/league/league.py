"""A league: main's pool of frozen snapshots, the matchmaking generator, ratings and the payoff
table, as algorithm state (docs/league.md).

The Algorithm owns one when ``config.league(...)`` is set: it installs :attr:`League.mapping`
as the policy mapping, feeds :meth:`League.record_episodes` every finished episode of every
env runner (their ``policy_returns`` say who played and who won), and calls
:meth:`League.end_iteration` after each training iteration (snapshots, then the metrics that
become ``result["league"]``). Its state is JSON numbers plus the generator's state.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from cairn.core import PolicyLike
from cairn.env_runner.make_env import make_env
from cairn.env_runner.scripted_opponents import resolve_opponent
from cairn.errors import CheckpointFormatError, ConfigError
from cairn.league.games import play_games
from cairn.league.matchmaking import LeagueMapping, copy_plans
from cairn.league.payoff import Payoff, game_score
from cairn.league.ratings import Ratings
from cairn.league.snapshots import (
    PolicyPool,
    add_snapshot,
    is_snapshot_id,
    snapshot_due,
    snapshot_id,
)
from cairn.rng import LEAGUE_STREAM, league_evaluation_seed, make_rng, rng_state, seeded_rng, set_rng_state

if TYPE_CHECKING:
    from cairn.config.algorithm_config import AlgorithmConfig
    from cairn.core import ScriptedOpponent

__all__ = ["League", "attach_league"]


class League:
    """The league of ``settings`` (``config.league_config``: what ``config.league(...)`` set),
    seeded by ``seed``."""

    def __init__(self, settings: Mapping[str, Any], seed: int | None) -> None:
        self.settings = dict(settings)
        self.main: str = self.settings["main"]
        self.seed = seed
        self.rng: np.random.Generator = seeded_rng(seed, LEAGUE_STREAM)
        #: The game's agents in seat order (the env's ``possible_agents``), set at build.
        self.agents: list[Any] = []
        #: Snapshot IDs in the pool, oldest first.
        self.pool: list[str] = []
        self.snapshots_taken = 0
        self.games = 0
        self.self_play_games = 0
        self.ratings = Ratings()
        self.ratings.ensure(self.main)
        self.payoff = Payoff(self.settings["win_rate_window"])
        #: ``{"<worker>:<env index>": {"opponent": ID or None, "main_seat": int}}``: the game drawn
        #: for each env copy's current episode (its later agents are mapped from it).
        self.plans: dict[str, dict[str, Any]] = {}
        self.mapping = LeagueMapping(self)
        #: The snapshot ID the league is adding now (Algorithm.add_policy takes that one only).
        self.adding: str | None = None
        #: The fixed opponents of ``settings["opponents"]``, resolved now through the one resolver
        #: (a bad spec fails the build, not a later evaluation).
        self.fixed_opponents = {name: _resolve_fixed(self.settings, name)
                                for name in self.settings["opponents"]}
        #: Their names, in the config's order: rating IDs, and what the mapping returns to seat
        #: one (the env runner resolves the spec itself; the code never travels).
        self.fixed_names: list[str] = list(self.settings["opponents"])
        for name in self.fixed_names:
            if name == self.main or name.startswith(f"{self.main}_v"):
                raise ConfigError(f"config.league(opponents=...) names a fixed opponent {name!r}, which is "
                                  f"main's policy ID or a snapshot's ({self.main!r}, '{self.main}_v<n>'). "
                                  "Fix: give the opponent another name.")
            self.ratings.ensure(name)

    def set_agents(self, env: Any) -> None:
        """Read the seats from the built env (a PettingZoo env of two or more players)."""
        agents = list(getattr(env, "possible_agents", None) or [])
        if len(agents) < 2:
            raise ConfigError(f"config.league(...) needs a PettingZoo game of two or more players; the "
                              f"environment {type(env).__name__} has agents {agents}. Use a two-player "
                              "env such as pettingzoo.classic.connect_four_v3, or drop config.league().")
        self.agents = agents

    def __getstate__(self) -> dict[str, Any]:
        # Copies sent to remote env runners carry the opponents' specs (in the config), not code.
        return {**self.__dict__, "fixed_opponents": {}}

    # ------------------------------------------------------------------------------ playing
    def opponents(self) -> list[str]:
        """The policies main may be drawn against (the snapshots, oldest first)."""
        return list(self.pool)

    def win_rates(self) -> dict[str, float]:
        """Main's mean score over the window against each opponent of the pool and each fixed
        opponent it played."""
        rates = self.payoff.win_rates()
        return {pid: rates[pid] for pid in [*self.opponents(), *self.fixed_names] if pid in rates}

    def record_episodes(self, episodes: Iterable[Mapping[str, Any]]) -> None:
        """Count finished games; a game of main against a pool member updates both ratings and
        the payoff table (main's score from its mean return per seat against the opponent's: in
        a game of three or more seats main holds every seat but the opponent's one)."""
        for episode in episodes:
            returns = episode.get("policy_returns") or {}
            if self.main not in returns:
                continue
            self.games += 1
            others = [pid for pid in returns if pid != self.main]
            if not others:
                self.self_play_games += 1
                continue
            if len(others) != 1 or (others[0] not in self.pool and others[0] not in self.fixed_names):
                continue  # an opponent that left the pool while the game was in flight
            opponent = others[0]
            # Per seat: in a game of three or more seats main holds all but the opponent's, and
            # the sum of its seats' returns would outscore the opponent's one seat in any game
            # whose seats all tied. (In a zero-sum game: by the sign of main's total, as
            # play_games scores.)
            score = game_score(float(np.mean(returns[self.main])), float(np.mean(returns[opponent])))
            self.payoff.record(opponent, score, is_snapshot=opponent in self.pool)
            self.ratings.rate(self.main, opponent, score)

    def end_iteration(self, algo: PolicyPool) -> dict[str, Any]:
        """Take a snapshot when one is due (dropping the oldest beyond ``max_snapshots``), then
        return the metrics of ``result["league"]``."""
        if snapshot_due(self.settings, algo.iteration, has_snapshot=bool(self.pool),
                        recent_scores=list(self.payoff.recent_against_snapshots)):
            self._take_snapshot(algo)
            limit = self.settings["max_snapshots"]
            while limit is not None and len(self.pool) > limit:
                self.remove_snapshot(algo, self.pool[0])  # the oldest
        return self.metrics()

    def _take_snapshot(self, algo: PolicyPool) -> None:
        """Add main's next snapshot to the algorithm and the pool. The pool ends up holding it
        exactly when the algorithm does, whether ``add_policy`` succeeds or raises; a policy
        of its name that the league did not take (configured so) is a ConfigError raised
        before the pool changes (``add_policy`` would refuse the ID in use, and the pool must
        not count that policy as its snapshot)."""
        pid = snapshot_id(self.main, self.snapshots_taken + 1)
        if pid in algo.policies:
            raise ConfigError(
                f"The league's next snapshot is {pid!r}, but the algorithm has a policy {pid!r} that is not "
                f"one of its snapshots (configured with that name?); the snapshot would replace it. IDs "
                f"'{self.main}_v<n>' are the league's snapshots. Fix: rename that policy, or remove it "
                f"(algo.remove_policy({pid!r})).")
        # In the pool before add_policy sends the config (and this league with its mapping) to
        # remote runners, so that their copies can draw it.
        self.pool.append(pid)
        self.adding = pid
        try:
            add_snapshot(algo, self.main, pid, self.seed)
        finally:
            self.adding = None
            if pid in algo.policies:  # also when add_policy raised after taking it
                self.snapshots_taken += 1
                self.ratings.ensure(pid, like=self.main)
                self.payoff.recent_against_snapshots.clear()
            else:
                self.pool.remove(pid)

    def check_added_policy(self, policy_id: str) -> None:
        """ConfigError for a policy that someone other than the league adds under a snapshot's
        ID (``"<main>_v<n>"``): the league would replace it with its own snapshot of that
        number, or it would sit outside the pool under a snapshot's name (Algorithm.add_policy
        asks first), and one under a fixed opponent's name (the policy would play its games)."""
        if policy_id in self.fixed_names:
            raise ConfigError(
                f"add_policy({policy_id!r}): that is the name of a fixed opponent of the league "
                "(config.league(opponents=...)), whose games the policy would play. Fix: add the policy "
                "under another ID.")
        if policy_id != self.adding and is_snapshot_id(self.main, policy_id):
            raise ConfigError(
                f"add_policy({policy_id!r}): IDs '{self.main}_v<n>' are the league's snapshots, which it "
                "takes and numbers itself (config.league(snapshot_every_iterations=..., "
                "snapshot_win_rate=...)). Fix: add the policy under another ID.")

    def remove_snapshot(self, algo: PolicyPool, pid: str) -> None:
        """Remove the pool's snapshot ``pid`` from the pool and the algorithm (the oldest when
        ``max_snapshots`` is reached; any of them through ``algo.remove_policy(pid)``). Out of
        the pool and forgotten before ``remove_policy`` sends the config (and this league) to
        remote runners, so that their copies no longer draw it; when the removal raises, the
        league comes back to its state before, keeping exactly the snapshots the algorithm still
        has (``pid`` stays when the algorithm kept it and goes when it was removed before the
        error)."""
        before = self.get_state()
        self.pool.remove(pid)
        self.forget(pid)
        try:
            algo.remove_policy(pid)  # its episodes in flight start again
        except BaseException:
            self.set_state(before, algo.policies)
            raise

    def forget(self, pid: str) -> None:
        """Forget ``pid``'s rating, payoff and planned games (those become self-play): a
        snapshot leaving the pool."""
        self.ratings.keep_only(p for p in self.ratings.table if p != pid)
        self.payoff.keep_only(p for p in self.payoff.table if p != pid)
        for plan in self.plans.values():
            if plan["opponent"] == pid:
                plan["opponent"] = None

    def metrics(self) -> dict[str, Any]:
        """``main`` (its policy ID), ``rating`` (mu) and ``rating_sigma`` per participant, main's
        ``win_rate`` per opponent over the window, ``payoff`` (W/D/L per opponent), ``games``,
        ``self_play_games``, ``pool`` and ``pool_size``."""
        return {
            "main": self.main,
            "rating": {p: mu for p, (mu, _) in self.ratings.table.items()},
            "rating_sigma": {p: sigma for p, (_, sigma) in self.ratings.table.items()},
            "win_rate": self.win_rates(),
            "payoff": {o: {"wins": r[0], "draws": r[1], "losses": r[2]}
                       for o, r in self.payoff.table.items()},
            "games": self.games, "self_play_games": self.self_play_games,
            "pool": self.opponents(), "pool_size": len(self.pool),
        }

    def evaluate(self, config: AlgorithmConfig, main: PolicyLike) -> dict[str, dict[str, float]]:
        """``{opponent name: play_games(...).to_dict()}``: ``evaluation_games`` greedy games of
        ``main`` against each fixed opponent (main seated first in even games, second in odd
        ones; :func:`cairn.league.games.play_games`), on envs made from ``config``, seeded by the
        config seed (the same games at every evaluation, so numbers compare across iterations)."""
        specs = self.settings["opponents"]
        return {name: play_games(lambda: make_env(config), main, opponent,
                                 games=self.settings["evaluation_games"], seed=self.evaluation_seed,
                                 opponent_name=f"fixed opponent {name!r} ({specs[name]!r})").to_dict()
                for name, opponent in self.fixed_opponents.items()}

    @property
    def evaluation_seed(self) -> int:
        """The ``seed`` of :meth:`evaluate`'s games: from the config seed's own stream (0
        without a seed)."""
        return league_evaluation_seed(self.seed)

    # -------------------------------------------------------------------------------- state
    def get_state(self) -> dict[str, Any]:
        """The league as JSON numbers and the generator's state."""
        return {"rng": rng_state(self.rng), "pool": list(self.pool),
                "snapshots_taken": self.snapshots_taken, "games": self.games,
                "self_play_games": self.self_play_games, "ratings": self.ratings.get_state(),
                "payoff": self.payoff.get_state(), "plans": copy_plans(self.plans)}

    def check_state(self, state: Mapping[str, Any], policies: Iterable[str]) -> None:
        """Raise :class:`~cairn.errors.CheckpointFormatError` when :meth:`set_state` would
        refuse ``state``, without changing anything: so that a caller restoring several objects
        can check them all first."""
        self._parsed(state, policies)

    def _parsed(self, state: Mapping[str, Any], policies: Iterable[str]) -> tuple[Any, ...]:
        present = set(policies)
        try:
            make_rng(dict(state["rng"]))  # checked here, set in place by set_state
            if state["rng"]["bit_generator"] != type(self.rng.bit_generator).__name__:
                raise ValueError(f"its generator is a {state['rng']['bit_generator']!r}, this "
                                 f"league's a {type(self.rng.bit_generator).__name__!r}")
            pool = [str(p) for p in state["pool"] if p in present]
            snapshots_taken, games = int(state["snapshots_taken"]), int(state["games"])
            self_play_games = int(state["self_play_games"])
            ratings, payoff = Ratings(), Payoff(self.payoff.window)
            ratings.set_state(state["ratings"])
            payoff.set_state(state["payoff"])
            plans = {str(k): {"opponent": None if v["opponent"] is None else str(v["opponent"]),
                              "main_seat": int(v["main_seat"])} for k, v in state["plans"].items()}
        except (KeyError, TypeError, ValueError, AttributeError, IndexError) as exc:
            raise CheckpointFormatError(f"The stored league state is malformed ({type(exc).__name__}: "
                                        f"{exc}); expected League.get_state()'s layout.") from exc
        return pool, snapshots_taken, games, self_play_games, ratings, payoff, plans

    def set_state(self, state: Mapping[str, Any], policies: Iterable[str],
                  stored_opponents: Mapping[str, Any] | None = None) -> None:
        """Restore :meth:`get_state`, keeping only the snapshots among ``policies`` (a restore
        of a subset such as ``policy_ids=["main"]`` drops the rest of the pool, their ratings,
        payoff rows and planned games; the snapshot numbering goes on). A state that
        :meth:`check_state` refuses changes nothing.

        ``stored_opponents``: the fixed opponents' specs of the league that saved ``state`` (its
        config's ``league_config["opponents"]``), when known. A fixed opponent whose spec this
        league replaced under the same name gets a new rating and payoff row: the stored games
        were another program's."""
        pool, snapshots_taken, games, self_play_games, ratings, payoff, plans = self._parsed(state, policies)
        set_rng_state(self.rng, dict(state["rng"]))
        self.pool, self.snapshots_taken, self.games = pool, snapshots_taken, games
        self.self_play_games, self.ratings, self.payoff, self.plans = self_play_games, ratings, payoff, plans
        specs = self.settings["opponents"]
        replaced = {name for name in self.fixed_names
                    if isinstance(stored_opponents, Mapping)
                    and stored_opponents.get(name, specs[name]) != specs[name]}
        members = {self.main, *pool, *(name for name in self.fixed_names if name not in replaced)}
        self.ratings.keep_only(members)
        self.ratings.ensure(self.main)
        for name in self.fixed_names:
            self.ratings.ensure(name)
        self.payoff.keep_only(members)
        for plan in self.plans.values():
            if plan["opponent"] is not None and plan["opponent"] not in members | replaced:
                plan["opponent"] = None


def _resolve_fixed(settings: Mapping[str, Any], name: str) -> ScriptedOpponent:
    """The fixed opponent ``name`` of the league ``settings``, or a :class:`ConfigError` naming
    it, its spec and every fix: training and ``algo.evaluate()`` play it, so a league without it
    (an algorithm built, or restored from a checkpoint, in a process where its module is not
    importable) is refused rather than played without it. The fixes: make the module importable
    (the command line adds ``--import MODULE``: :func:`cairn.cli.env_names.restore_hint`), or drop
    or replace the opponent with the whole ``league_config`` as ``config_overrides`` (written out
    here, ready to paste), or load what needs no opponent: main's policy alone, the ratings."""
    spec = settings["opponents"][name]
    try:
        return resolve_opponent(spec)
    except ConfigError as exc:
        others = {k: v for k, v in settings["opponents"].items() if k != name}
        dropped = {**settings, "opponents": others}
        main = settings["main"]
        raise ConfigError(
            f"config.league(opponents=...) has the fixed opponent {name!r} = {spec!r}, which the league "
            f"plays in training and algo.evaluate(); {exc} Restoring a checkpoint, you can instead drop "
            f"it (or replace its spec) with Algorithm.from_checkpoint(..., config_overrides="
            f"{{'league_config': {dropped!r}}}) (its games are then left out of the ratings and "
            f"payoff); without any opponent's code, Policy.from_checkpoint('<checkpoint>/policies/{main}') "
            f"loads {main!r} alone, 'cairn league CHECKPOINT' prints the ratings and payoff, and "
            f"'cairn evaluate CHECKPOINT --opponent random_legal' plays {main!r}.") from exc


def attach_league(config: AlgorithmConfig) -> League | None:
    """The league of ``config`` (None without one), its mapping installed as
    ``config.policy_mapping_fn``."""
    if config.league_config is None:
        return None
    league = League(config.league_config, config.seed)
    config.policy_mapping_fn = league.mapping
    return league
