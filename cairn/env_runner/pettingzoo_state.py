"""Exact state of PettingZoo's classic board games ``tictactoe_v3`` and ``connect_four_v3``.

These games keep no state of their own beyond the board and PettingZoo's AEC bookkeeping, so
cairn reads and writes it without changes to them (part of the environment state protocol in
:mod:`cairn.env_runner.env_state`): the raw env's board, ``agents``, ``agent_selection``, its
per-agent dicts and agent selector, and the state of the wrappers their ``env()`` adds. The
private parts of it, and the PettingZoo versions they are supported on, are named in
:mod:`cairn._compat.pettingzoo_internals`.

Other AEC envs take part in exact resume through the protocol (``env.unwrapped.get_state()`` /
``set_state()``); :func:`get_board_game_state` returns None for them.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

import numpy as np

from cairn._compat import pettingzoo_internals
from cairn.errors import CheckpointFormatError

__all__ = ["get_board_game_state", "set_board_game_state"]

_GAMES = ("pettingzoo.classic.tictactoe.tictactoe", "pettingzoo.classic.connect_four.connect_four")


def _layers(env: Any) -> tuple[list[Any], Any]:
    """The wrappers from the outside in, and the raw env (None when a layer is unknown)."""
    wrappers, layer = [], env
    while type(layer).__name__ in pettingzoo_internals.WRAPPER_STATE_ATTRS:
        wrappers.append(layer)
        layer = layer.env
    known = type(layer).__module__ in _GAMES and all(isinstance(a, str) for a in layer.possible_agents)
    return wrappers, layer if known else None


def _plain(value: Any) -> Any:
    """A JSON value or numpy array: numpy scalars become Python numbers, arrays are copied."""
    if isinstance(value, np.ndarray):
        return value.copy()
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def get_board_game_state(env: Any) -> dict[str, Any] | None:
    """The state of a tictactoe_v3 / connect_four_v3 env (raw or wrapped as PettingZoo's
    ``env()`` wraps it), or None for any other env or one not reset yet."""
    wrappers, raw = _layers(env)
    if raw is None or not pettingzoo_internals.has_aec_bookkeeping(raw):
        return None
    board = raw.board.squares if hasattr(raw.board, "squares") else raw.board
    selector = pettingzoo_internals.agent_selector(raw)
    return {
        "game": type(raw).__module__,
        "board": [int(x) for x in board],
        "agents": list(raw.agents),
        "agent_selection": raw.agent_selection,
        "skip_agent_selection": pettingzoo_internals.skip_agent_selection(raw),
        "agent_dicts": {name: _plain(d) for name, d in pettingzoo_internals.agent_dicts(raw).items()},
        "selector": {"agent_order": list(selector.agent_order),
                     "order_is_agents": selector.agent_order is raw.agents,
                     "current_agent": pettingzoo_internals.selector_position(selector),
                     "selected_agent": _plain(selector.selected_agent)},
        "wrappers": [{"class": type(w).__name__,
                      "attrs": {k: _plain(v) for k, v in pettingzoo_internals.wrapper_state(w).items()}}
                     for w in wrappers],
    }


def set_board_game_state(env: Any, state: dict[str, Any]) -> bool:
    """Restore :func:`get_board_game_state`; False when ``state`` is another game's or another
    wrapping's."""
    wrappers, raw = _layers(env)
    if raw is None or state.get("game") != type(raw).__module__:
        return False
    if [type(w).__name__ for w in wrappers] != [w["class"] for w in state["wrappers"]]:
        return False
    env.reset()  # builds the agent selector and brings the wrappers to their after-reset state
    _check_board_game_state(raw, state)
    board = [int(x) for x in state["board"]]
    if hasattr(raw.board, "squares"):
        raw.board.squares = board
    else:
        raw.board = board
    raw.agents = list(state["agents"])
    raw.agent_selection = state["agent_selection"]
    pettingzoo_internals.set_skip_agent_selection(raw, state["skip_agent_selection"])
    pettingzoo_internals.set_agent_dicts(raw, {name: copy.deepcopy(dict(state["agent_dicts"][name]))
                                               for name in pettingzoo_internals.AGENT_DICTS})
    saved, selector = state["selector"], pettingzoo_internals.agent_selector(raw)
    selector.agent_order = raw.agents if saved["order_is_agents"] else list(saved["agent_order"])
    pettingzoo_internals.set_selector_position(selector, int(saved["current_agent"]))
    selector.selected_agent = saved["selected_agent"]
    for wrapper, saved in zip(wrappers, state["wrappers"]):
        pettingzoo_internals.set_wrapper_state(wrapper, saved["attrs"])
    _check_observed(env, raw, wrappers)
    return True


def _refuse(key: str, found: Any, expected: str) -> CheckpointFormatError:
    return CheckpointFormatError(
        f"The saved board game state's {key} is {found!r:.200}; expected {expected}. Restore from an "
        "unedited checkpoint.")


def _check_board_game_state(raw: Any, state: Mapping[str, Any]) -> None:
    """Refuse a saved board or AEC bookkeeping that does not fit ``raw``'s game (freshly reset):
    a square out of the board's values, a board of another size, an agent the game does not
    have. Loaded as it is, each fails the first ``train()`` with a bare IndexError or KeyError."""
    fresh = raw.board.squares if hasattr(raw.board, "squares") else raw.board
    board, possible = state["board"], list(raw.possible_agents)
    if not isinstance(board, list) or len(board) != len(fresh) or any(
            type(x) is not int or not 0 <= x <= len(possible) for x in board):
        raise _refuse("'board'", board, f"{len(fresh)} ints from 0 to {len(possible)}")
    agents = state["agents"]
    if not isinstance(agents, list) or len(set(agents)) != len(agents) or any(
            a not in possible for a in agents):
        raise _refuse("'agents'", agents, f"distinct agents of {possible}")
    # A finished game has no agents left; its selection is the agent that moved last.
    selectable = agents or possible
    if state["agent_selection"] not in selectable:
        raise _refuse("'agent_selection'", state["agent_selection"], f"one of {selectable}")
    if state["skip_agent_selection"] is not None and state["skip_agent_selection"] not in possible:
        raise _refuse("'skip_agent_selection'", state["skip_agent_selection"], f"None or one of {possible}")
    for name in pettingzoo_internals.AGENT_DICTS:
        keys = state["agent_dicts"][name]
        if not isinstance(keys, Mapping) or not set(agents) <= set(keys) <= set(possible):
            raise _refuse(f"agent_dicts[{name!r}]", keys, f"a dict keyed by the agents {agents} (and "
                                                          f"others of {possible})")
    selector = state["selector"]
    order = agents if selector["order_is_agents"] else selector["agent_order"]
    if not isinstance(order, list) or any(a not in possible for a in order):
        raise _refuse("selector['agent_order']", order, f"agents of {possible}")
    current = selector["current_agent"]
    if type(current) is not int or not 0 <= current <= len(possible):  # past the order when it ended
        raise _refuse("selector['current_agent']", current, f"an int from 0 to {len(possible)}")
    if selector["selected_agent"] is not None and selector["selected_agent"] not in possible:
        raise _refuse("selector['selected_agent']", selector["selected_agent"], f"None or one of {possible}")


def _check_observed(env: Any, raw: Any, wrappers: list[Any]) -> None:
    """The illegal-move wrapper's last observation (what decides whether the next move is
    legal) must be the restored board's: a board edited under it let the next move onto an
    occupied square (PettingZoo's ``AssertionError: Location is not empty``). On a refusal the
    env is reset, so that it is in a state of its own again."""
    for wrapper in wrappers:
        saved = pettingzoo_internals.illegal_move_observation(wrapper)
        if not isinstance(saved, Mapping):
            continue
        now = raw.observe(raw.agent_selection)
        if set(saved) != set(now) or not all(
                np.array_equal(np.asarray(saved[k]), np.asarray(now[k])) for k in now):
            board = list(raw.board.squares if hasattr(raw.board, "squares") else raw.board)
            env.reset()
            raise _refuse("'board'", board, "the board the saved observation of the agent to move was "
                                            "made from (its action_mask and planes)")
