"""The payoff table of a league: wins, draws and losses of main against each opponent over
the whole run, and main's recent scores against each (the window PFSP and the win rates read).

A game's score for main is 1 (won), 0.5 (draw) or 0 (lost); a "win rate" is the mean score
over the window, so a draw counts half.

PFSP reads every opponent's win rate at each draw, so each window's sum is kept as scores come
and go rather than summed again. It equals ``sum(window)`` exactly, not nearly: every score is
0, 0.5 or 1 (:func:`game_score`; a restored state with any other is refused), and every sum of
at most ``window`` such halves is a multiple of 0.5 far below 2**52, which float64 adds and
subtracts without rounding, in any order.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["Payoff", "game_score"]


#: The scores a game can give main (lost, drawn, won).
SCORES = (0.0, 0.5, 1.0)


def game_score(main_return: float, opponent_return: float) -> float:
    """Main's score in a game with these returns: 1 if it got more, 0.5 if equal, else 0."""
    if main_return > opponent_return:
        return 1.0
    return 0.5 if main_return == opponent_return else 0.0


class Payoff:
    """W/D/L of main per opponent, and its last ``window`` scores per opponent and against the
    pool's snapshots together (the ``snapshot_win_rate`` rule)."""

    def __init__(self, window: int) -> None:
        self.window = window
        #: ``{opponent: [wins, draws, losses]}`` of main.
        self.table: dict[str, list[int]] = {}
        self.recent: dict[str, deque[float]] = {}
        #: ``sum(self.recent[opponent])``, kept exactly as scores come and go (module docstring).
        self.recent_sums: dict[str, float] = {}
        #: Main's recent scores against any snapshot, cleared when a snapshot is taken.
        self.recent_against_snapshots: deque[float] = deque(maxlen=window)

    def record(self, opponent: str, score: float, *, is_snapshot: bool) -> None:
        """Main scored ``score`` (one of :data:`SCORES`) against ``opponent``."""
        if score not in SCORES:
            raise ValueError(f"A game score is one of {SCORES}, got {score!r}.")
        row = self.table.setdefault(opponent, [0, 0, 0])
        row[0 if score == 1.0 else (1 if score == 0.5 else 2)] += 1
        recent = self.recent.setdefault(opponent, deque(maxlen=self.window))
        leaving = recent[0] if len(recent) == recent.maxlen else 0.0
        recent.append(score)
        self.recent_sums[opponent] = self.recent_sums.get(opponent, 0.0) - leaving + score
        if is_snapshot:
            self.recent_against_snapshots.append(score)

    def win_rates(self) -> dict[str, float]:
        """Main's mean score over the window against each opponent it played."""
        return {opp: self.recent_sums[opp] / len(s) for opp, s in self.recent.items() if s}

    def keep_only(self, opponents: Iterable[str]) -> None:
        """Forget every opponent not in ``opponents``."""
        keep = set(opponents)
        self.table = {o: r for o, r in self.table.items() if o in keep}
        self.recent = {o: r for o, r in self.recent.items() if o in keep}
        self.recent_sums = {o: r for o, r in self.recent_sums.items() if o in keep}

    def get_state(self) -> dict[str, Any]:
        """The table and windows as JSON numbers."""
        return {"table": {o: list(r) for o, r in self.table.items()},
                "recent": {o: list(s) for o, s in self.recent.items()},
                "recent_against_snapshots": list(self.recent_against_snapshots)}

    def set_state(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`get_state`; ValueError (nothing changed) for a score not in
        :data:`SCORES`."""
        table = {str(o): [int(x) for x in r] for o, r in state["table"].items()}
        recent = {str(o): deque((float(x) for x in s), maxlen=self.window)
                  for o, s in state["recent"].items()}
        found = {x for s in recent.values() for x in s} - set(SCORES)
        if found:
            raise ValueError(f"stored game scores are each one of {SCORES}, found {sorted(found)}")
        self.table, self.recent = table, recent
        self.recent_sums = {o: sum(s) for o, s in recent.items()}
        self.recent_against_snapshots = deque((float(x) for x in state["recent_against_snapshots"]),
                                              maxlen=self.window)
