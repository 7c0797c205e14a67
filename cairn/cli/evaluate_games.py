"""``cairn evaluate CKPT --opponent OPP --games N``: greedy games of a checkpoint's policy against a
fixed opponent in a two-player game, reported as wins, draws, losses and illegal moves
(:func:`cairn.league.games.play_games`; docs/league.md, "Playing against fixed opponents").

``OPP`` is a policy ID of the checkpoint (a past snapshot, another player), ``random_legal``, or
a scripted opponent ``package.module:function_or_class``
(:func:`cairn.env_runner.scripted_opponents.resolve_opponent`).
"""

from __future__ import annotations

import argparse
import difflib
import json
import os
from typing import TYPE_CHECKING

from cairn.cli.common import ArgumentsError, UsageError, json_safe

if TYPE_CHECKING:
    from cairn.algorithms.algorithm import Algorithm
    from cairn.core import ScriptedOpponent
    from cairn.policy.policy import Policy

__all__ = ["DEFAULT_GAMES", "DEFAULT_MAIN", "check_arguments", "run_games"]

#: Games played when ``--games`` is not given.
DEFAULT_GAMES = 100
#: The policy that plays when the checkpoint has several and ``--policy-id`` names none.
DEFAULT_MAIN = "main"


def check_arguments(args: argparse.Namespace) -> None:
    """Refuse flags that do not go with ``--opponent`` (or need it), before any work."""
    if args.opponent is None:
        given = [flag for flag, value in (("--games", args.games), ("--policy-id", args.policy_id))
                 if value is not None]
        if given:
            raise ArgumentsError(f"{' and '.join(given)} go{'es' if len(given) == 1 else ''} with --opponent "
                                 "(games of a two-player game); without it, use --episodes.")
        return
    flags = (("--episodes", args.episodes), ("--render", args.render),
             ("--max-episode-steps", args.max_episode_steps))
    clashing = [flag for flag, value in flags if value is not None]
    if clashing:
        raise ArgumentsError(f"{', '.join(clashing)} cannot go with --opponent: games against an opponent "
                             "are counted with --games N.")
    if args.games is not None and args.games < 1:
        raise UsageError(f"--games {args.games}: expected at least 1.")


def _main_policy_id(algo: Algorithm, requested: str | None) -> str:
    """The policy that plays: ``--policy-id``, else the only one, else ``"main"``."""
    policies = sorted(algo.policies)
    if requested is not None:
        if requested not in algo.policies:
            raise UsageError(f"--policy-id {requested}: the checkpoint has no such policy; its policies: "
                             f"{policies}.")
        return requested
    if len(policies) == 1:
        return policies[0]
    if DEFAULT_MAIN in algo.policies:
        return DEFAULT_MAIN
    raise UsageError(f"the checkpoint has several policies {policies} and none is {DEFAULT_MAIN!r}: name the "
                     "one that plays with --policy-id.")


def _opponent(algo: Algorithm, spec: str) -> Policy | ScriptedOpponent:
    """A policy of the checkpoint named ``spec``, else the scripted opponent it names."""
    from cairn.env_runner.scripted_opponents import resolve_opponent
    from cairn.errors import ConfigError

    if spec in algo.policies:
        return algo.get_policy(spec)
    try:
        return resolve_opponent(spec)
    except ConfigError as exc:
        close = difflib.get_close_matches(spec, sorted(algo.policies), n=1)  # a misspelt policy ID
        hint = f" Did you mean the checkpoint's policy {close[0]!r}?" if close else ""
        raise UsageError(f"--opponent {spec}: not a policy of the checkpoint ({sorted(algo.policies)}), and "
                         f"{exc}{hint}") from exc


def run_games(algo: Algorithm, args: argparse.Namespace, env_label: str) -> int:
    """Play the games of ``cairn evaluate --opponent`` with the restored ``algo`` and report them."""
    from cairn.env_runner.make_env import close_env, make_env
    from cairn.errors import ConfigError
    from cairn.league.games import play_games, two_player_agents
    from cairn.policy.torch_utils import torch_threads

    env = make_env(algo.config)
    try:
        two_player_agents(env)
    except ConfigError as exc:
        raise UsageError(f"--opponent plays two-player games, and {exc} Leave out --opponent and --games "
                         "to play its episodes.") from exc
    finally:
        close_env(env)
    main_id = _main_policy_id(algo, args.policy_id)
    opponent = _opponent(algo, args.opponent)
    games = args.games or DEFAULT_GAMES
    seed = args.seed or 0
    with torch_threads(algo.config.torch_num_threads, algo.policies.values()):
        results = play_games(lambda: make_env(algo.config), algo.get_policy(main_id), opponent,
                             games=games, seed=seed, opponent_name=f"--opponent {args.opponent}")
    report = {"checkpoint": args.checkpoint, "env": env_label, "policy_id": main_id,
              "opponent": args.opponent, "seed": seed, **results.to_dict()}
    if args.json:
        print(json.dumps(json_safe(report), indent=2))
        return 0
    name = os.path.basename(os.path.normpath(args.checkpoint))
    print(f"{name} on {env_label}: {main_id} against {args.opponent}, {games} greedy "
          f"game{'s' if games != 1 else ''}, seed {seed}")
    print("  " + "  ".join(f"{what} {count:>5} {f'({rate:.1%})':>8}" for what, count, rate in (
        ("wins", results.wins, results.win_rate), ("draws", results.draws, results.draw_rate),
        ("losses", results.losses, results.loss_rate))))
    print(f"  illegal moves: {main_id} {results.illegal_moves}, "
          f"{args.opponent} {results.opponent_illegal_moves}")
    distinct = results.distinct_games
    if distinct is not None and distinct < games:
        plural = "s" if distinct != 1 else ""
        print(f"  note: only {distinct} distinct game{plural} among the {games} played: both players "
              "act deterministically (greedy, or a scripted opponent that ignores its generator), so "
              f"games repeat and the rates rest on {distinct}. For games that differ, play a scripted "
              "opponent that draws from its generator (--opponent random_legal, "
              "cairn.envs.connect_four:connect_four_heuristic).")
    return 0
