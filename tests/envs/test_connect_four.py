"""The shipped connect-four heuristic on hand-built boards (PettingZoo connect_four_v3's layout:
rows top to bottom, plane 0 the player to move) and on a board the real env produced."""

from __future__ import annotations

import numpy as np
import pytest
from pettingzoo.classic import connect_four_v3

from cairn.envs import connect_four_heuristic
from cairn.errors import ObservationSpaceError

SEEDS = range(200)


def empty() -> np.ndarray:
    return np.zeros((6, 7, 2), np.int8)


def choices(board: np.ndarray, mask: np.ndarray | None = None) -> set[int]:
    """Every column the heuristic picks over many seeds."""
    return {connect_four_heuristic(board, mask, np.random.default_rng(seed)) for seed in SEEDS}


def test_takes_a_horizontal_win_at_either_open_end():
    board = empty()
    board[5, 1:4, 0] = 1  # ours on the bottom row, columns 1-3
    board[5, 5, 1] = 1
    assert choices(board) == {0, 4}


def test_takes_vertical_and_diagonal_wins():
    board = empty()
    board[3:6, 2, 0] = 1  # three of ours stacked in column 2
    board[3:6, 4, 1] = 1  # theirs beside, no threat of a line across
    assert choices(board) == {2}
    diagonal = empty()
    for k in range(3):  # ours at (5,0), (4,1), (3,2); (2,3) completes, once column 3 is 3 deep
        diagonal[5 - k, k, 0] = 1
    diagonal[5, 1, 1] = diagonal[4:6, 2, 1] = 1  # supports below ours
    diagonal[3:6, 3, 1] = [1, 0, 1]
    diagonal[4, 3, 0] = 1
    assert choices(diagonal) == {3}


def test_blocks_the_opponent_s_immediate_win():
    board = empty()
    board[3:6, 6, 1] = 1  # theirs stacked in column 6
    board[5, 0, 0] = 1
    assert choices(board) == {6}


def test_prefers_its_own_win_over_a_block():
    board = empty()
    board[3:6, 6, 1] = 1  # theirs threaten column 6
    board[3:6, 0, 0] = 1  # ours win in column 0
    assert choices(board) == {0}


def test_a_line_whose_gap_a_piece_would_not_land_in_is_no_win():
    board = empty()
    board[5, 0:3, 1] = [1, 0, 1]  # bottom row: theirs, ours, theirs
    board[5, 1, 0] = 1
    board[4, 0:3, 0] = 1  # ours one row up in columns 0-2; a piece in column 3 lands at the bottom
    assert choices(board) == set(range(7))  # no win, nothing to block: every column


def test_random_only_among_legal_columns():
    board = empty()
    assert choices(board, np.array([0, 1, 0, 1, 1, 0, 0], np.int8)) == {1, 3, 4}
    full = empty()
    full[:, 2, 0] = [1, 0, 1, 0, 1, 0]
    full[:, 2, 1] = [0, 1, 0, 1, 0, 1]
    assert choices(full) == {0, 1, 3, 4, 5, 6}  # no mask: full column 2 is not legal


def test_a_winning_column_the_mask_forbids_is_not_played():
    board = empty()
    board[3:6, 2, 0] = 1
    assert choices(board, np.array([1, 1, 0, 1, 1, 1, 1], np.int8)) == {0, 1, 3, 4, 5, 6}


def test_refuses_an_observation_that_is_not_the_board():
    with pytest.raises(ObservationSpaceError, match=r"shape \(7,\).*\(6, 7, 2\)"):
        connect_four_heuristic(np.zeros(7), None, np.random.default_rng(0))
    full = np.ones((6, 7, 2), np.int8)
    with pytest.raises(ObservationSpaceError, match="no legal column"):
        connect_four_heuristic(full, None, np.random.default_rng(0))


def test_reads_the_real_env_s_planes_and_wins_it():
    env = connect_four_v3.env()
    env.reset(seed=0)
    for column in (0, 1, 0, 1, 0, 1):  # player_0 has three in column 0, player_1 three in column 1
        env.step(column)
    assert env.agent_selection == "player_0"
    obs, *_ = env.last()
    action = connect_four_heuristic(obs["observation"], obs["action_mask"], np.random.default_rng(0))
    assert action == 0
    env.step(action)
    assert env.rewards == {"player_0": 1, "player_1": -1}
    env.reset(seed=0)
    for column in (0, 1, 0, 1, 0):  # now player_1 to move must block column 0
        env.step(column)
    obs, *_ = env.last()
    assert connect_four_heuristic(obs["observation"], obs["action_mask"], np.random.default_rng(0)) == 0
