"""League self-play (docs/league.md): snapshots of the trained policy, per-episode
matchmaking, ratings and a payoff table, all part of the algorithm's state; fixed and scripted
opponents, games against them."""

from cairn.league.league import League, attach_league
from cairn.league.matchmaking import LeagueMapping, opponent_weights, pfsp_weight

__all__ = ["League", "LeagueMapping", "attach_league", "opponent_weights", "pfsp_weight"]
