"""Ratings of a league's participants, updated after every rated game by openskill's
Plackett-Luce model (a maintained Weng-Lin rating library: not a hand-rolled TrueSkill).

openskill is the ``league`` extra (``pip install cairn[league]``), imported when a league is
built, never at ``import cairn``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from cairn.errors import ConfigError

__all__ = ["Ratings", "rating_model"]


def rating_model() -> Any:
    """openskill's Plackett-Luce model with its defaults (mu 25, sigma 25/3)."""
    try:
        from openskill.models import PlackettLuce
    except ImportError as exc:
        raise ConfigError("A league rates its games with openskill, which is not installed: "
                          "pip install 'cairn[league]' (or pip install openskill).") from exc
    return PlackettLuce()


class Ratings:
    """``{participant: (mu, sigma)}``; a new participant starts at the model's default rating
    or a copy of another's (a snapshot starts where main stands)."""

    def __init__(self) -> None:
        self._model = rating_model()
        self.table: dict[str, tuple[float, float]] = {}

    def ensure(self, participant: str, like: str | None = None) -> None:
        """Give ``participant`` a rating if it has none: ``like``'s, else the default."""
        if participant in self.table:
            return
        if like is not None and like in self.table:
            self.table[participant] = self.table[like]
        else:
            rating = self._model.rating()
            self.table[participant] = (float(rating.mu), float(rating.sigma))

    def rate(self, first: str, second: str, score: float) -> None:
        """Update both after a game that ``first`` won (``score`` 1), drew (0.5) or lost (0)."""
        self.ensure(first)
        self.ensure(second)
        model = self._model
        teams = [[model.rating(*self.table[first])], [model.rating(*self.table[second])]]
        ranks = [0, 0] if score == 0.5 else ([0, 1] if score > 0.5 else [1, 0])
        (new_first,), (new_second,) = model.rate(teams, ranks=ranks)
        self.table[first] = (float(new_first.mu), float(new_first.sigma))
        self.table[second] = (float(new_second.mu), float(new_second.sigma))

    def keep_only(self, participants: Iterable[str]) -> None:
        """Forget every participant not in ``participants`` (a snapshot that left the pool)."""
        keep = set(participants)
        self.table = {p: r for p, r in self.table.items() if p in keep}

    def get_state(self) -> dict[str, list[float]]:
        """``{participant: [mu, sigma]}`` (JSON floats round-trip exactly)."""
        return {p: [mu, sigma] for p, (mu, sigma) in self.table.items()}

    def set_state(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`get_state`."""
        self.table = {str(p): (float(r[0]), float(r[1])) for p, r in state.items()}
