"""A heuristic connect-four player, to measure trained policies against.

PettingZoo's ``connect_four_v3`` observes ``{"observation": 6x7x2 int8, "action_mask": 7}``:
rows top (0) to bottom (5), columns 0-6 (the action), plane 0 the pieces of the player to move,
plane 1 the opponent's; a piece dropped into column ``c`` lands in its lowest empty row.
"""

from __future__ import annotations

import numpy as np

from cairn.errors import ObservationSpaceError

__all__ = ["connect_four_heuristic", "BOARD_SHAPE"]

#: (rows, columns, planes) of connect_four_v3's board observation.
BOARD_SHAPE = (6, 7, 2)
#: Directions a line of four can run in: along a row, a column and both diagonals.
_DIRECTIONS = ((0, 1), (1, 0), (1, 1), (1, -1))


def connect_four_heuristic(observation: np.ndarray, action_mask: np.ndarray | None,
                           rng: np.random.Generator) -> int:
    """Win now if a column does it, else block the opponent's immediate win, else a uniformly
    random legal column; among several winning (or blocking) columns, one at random.

    A :class:`cairn.core.ScriptedOpponent` (``"cairn.envs.connect_four:connect_four_heuristic"``
    in a league config or ``cairn evaluate --opponent``). ``observation`` is the 6x7x2 board as
    the player to move sees it; without ``action_mask``, the legal columns are those whose top
    cell is empty.

    >>> board = np.zeros((6, 7, 2), np.int8)
    >>> board[5, 0:3, 0] = 1  # three of ours on the bottom row: column 3 wins
    >>> connect_four_heuristic(board, None, np.random.default_rng(0))
    3
    """
    board = np.asarray(observation)
    if board.shape != BOARD_SHAPE:
        raise ObservationSpaceError(f"connect_four_heuristic got an observation of shape {board.shape}; "
                                    f"expected connect_four_v3's board {BOARD_SHAPE} (the dict "
                                    "observation's 'observation' entry).")
    mine, theirs = board[..., 0] != 0, board[..., 1] != 0
    occupied = mine | theirs
    if action_mask is None:
        legal = np.flatnonzero(~occupied[0])
    else:
        legal = np.flatnonzero(np.asarray(action_mask))
    if legal.size == 0:
        raise ObservationSpaceError("connect_four_heuristic was asked to move on a board with no legal "
                                    "column.")
    landing = {int(c): int(np.flatnonzero(~occupied[:, c])[-1]) for c in legal if not occupied[0, c]}
    for pieces in (mine, theirs):  # our win first, then the opponent's to block
        columns = [c for c, row in landing.items() if _completes_four(pieces, row, c)]
        if columns:
            return int(rng.choice(columns))
    return int(rng.choice(legal))


def _completes_four(pieces: np.ndarray, row: int, column: int) -> bool:
    """Whether a piece at (row, column) joins ``pieces`` (a 6x7 bool board) into four in a line."""
    rows, columns = pieces.shape
    for dr, dc in _DIRECTIONS:
        count = 1
        for sign in (1, -1):
            r, c = row + sign * dr, column + sign * dc
            while 0 <= r < rows and 0 <= c < columns and pieces[r, c]:
                count += 1
                r, c = r + sign * dr, c + sign * dc
        if count >= 4:
            return True
    return False
