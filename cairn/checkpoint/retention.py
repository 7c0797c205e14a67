"""Which of a manager's checkpoints to keep: the last, the n best, and every k-th (orbax's and
Lightning's rules), as a pure function of the committed checkpoints and their metrics.

:class:`~cairn.checkpoint.manager.CheckpointManager` applies :func:`retained` after each save
has committed; everything it does not name is deleted.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from cairn.errors import ConfigError

__all__ = ["KeepBest", "ManagedCheckpoint", "best_checkpoints", "newest_whole", "parse_keep_best", "retained"]


@dataclass(frozen=True)
class ManagedCheckpoint:
    """One committed checkpoint under a manager's root."""

    #: The training iteration it was saved at (from its name).
    iteration: int
    #: Its location: a local path or a URI, as accepted by ``Algorithm.from_checkpoint``.
    path: str
    #: The ``keep_best`` metric of the result it was saved with; None without one.
    metric: float | None
    #: The ``metadata`` given to ``save()`` (stored in the checkpoint's manifest); None when
    #: none was given.
    metadata: Mapping[str, Any] | None = field(default=None, compare=False)


@dataclass(frozen=True)
class KeepBest:
    """``keep_best``: keep the ``n`` checkpoints with the best ``metric`` (``mode`` says which
    end is best)."""

    metric: str
    mode: Literal["max", "min"]
    n: int = 1


def parse_keep_best(value: Any) -> KeepBest | None:
    """``keep_best`` as given (``(metric, mode)``, ``(metric, mode, n)`` or None), checked.

    >>> parse_keep_best(("episode_return_mean", "max"))
    KeepBest(metric='episode_return_mean', mode='max', n=1)
    """
    if value is None:
        return None
    n = value[2] if isinstance(value, tuple) and len(value) == 3 else 1
    if not (isinstance(value, tuple) and len(value) in (2, 3) and isinstance(value[0], str)
            and value[1] in ("max", "min") and type(n) is int and n >= 1):
        raise ConfigError(
            f"CheckpointManager: keep_best={value!r}; expected a tuple (metric, 'max' | 'min') or "
            "(metric, 'max' | 'min', n) with an int n >= 1, e.g. ('episode_return_mean', 'max', 3).")
    return KeepBest(value[0], value[1], n)


def best_checkpoints(checkpoints: Sequence[ManagedCheckpoint],
                     keep_best: KeepBest | None) -> list[ManagedCheckpoint]:
    """The ``keep_best.n`` checkpoints with the best metric, best first; among equal values the
    newest counts as better. Checkpoints without a metric never count."""
    if keep_best is None:
        return []
    sign = 1.0 if keep_best.mode == "max" else -1.0
    scored = [c for c in checkpoints if c.metric is not None]
    scored.sort(key=lambda c: (sign * c.metric, c.iteration), reverse=True)  # type: ignore[operator]
    return scored[:keep_best.n]


def retained(checkpoints: Sequence[ManagedCheckpoint], *, keep_last: int | None,
             keep_best: KeepBest | None, keep_every_iterations: int | None) -> set[int]:
    """The iterations to keep of ``checkpoints`` (oldest first): the ``keep_last`` newest (all
    with None), the ``keep_best`` best, and every iteration that is a multiple of
    ``keep_every_iterations``.

    >>> cps = [ManagedCheckpoint(i, f"c{i}", m) for i, m in [(1, 5.0), (2, 1.0), (3, 2.0), (4, 0.0)]]
    >>> sorted(retained(cps, keep_last=1, keep_best=KeepBest("r", "max", 2), keep_every_iterations=2))
    [1, 2, 3, 4]
    >>> sorted(retained(cps, keep_last=1, keep_best=KeepBest("r", "max", 1), keep_every_iterations=None))
    [1, 4]
    """
    keep = {c.iteration for c in (checkpoints[-keep_last:] if keep_last else checkpoints)}
    keep.update(c.iteration for c in best_checkpoints(checkpoints, keep_best))
    if keep_every_iterations:
        keep.update(c.iteration for c in checkpoints if c.iteration % keep_every_iterations == 0)
    return keep


def newest_whole(checkpoints: Sequence[ManagedCheckpoint],
                 is_whole: Callable[[ManagedCheckpoint], bool]) -> set[int]:
    """The iteration of the newest of ``checkpoints`` (oldest first) that ``is_whole`` (checked
    newest first, and only until one is); empty when none is. Retention keeps it whatever the
    rules say, so that a root never loses its last checkpoint that loads to a newer one whose
    files are gone.

    >>> cps = [ManagedCheckpoint(i, f"c{i}", None) for i in (1, 2, 3)]
    >>> newest_whole(cps, lambda c: c.iteration != 3)
    {2}
    """
    for checkpoint in reversed(checkpoints):
        if is_whole(checkpoint):
            return {checkpoint.iteration}
    return set()
