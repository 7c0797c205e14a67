"""PettingZoo's internals that cairn relies on: the game state of its classic board games.

Touches, on the raw ``tictactoe_v3`` / ``connect_four_v3`` env:

* ``_cumulative_rewards``, the AEC rewards summed since each agent last acted (what ``last()``
  returns), kept beside the public ``rewards``, ``terminations``, ``truncations`` and ``infos``;
* ``_skip_agent_selection``, the agent to select again once dead agents have been stepped;
* ``_agent_selector``, the ``AgentSelector`` choosing who moves next, and its ``_current_agent``
  (its position in ``agent_order``);

and on the wrappers those games' ``env()`` adds: ``OrderEnforcingWrapper`` (``_has_reset``,
``_has_updated``) and ``TerminateIllegalWrapper`` (``_prev_obs``, ``_prev_info``, ``_terminated``:
the last observation, which decides whether a move is legal, and whether an illegal move ended
the game). ``AssertOutOfBoundsWrapper`` keeps no state.

Why: exact resume of these games (:mod:`cairn.env_runner.pettingzoo_state`) stores and restores
exactly this state; PettingZoo offers no public get/set for it.

Supported: ``pettingzoo>=1.24,<1.28`` (pyproject.toml). PettingZoo has changed these games'
internals between minor versions (the board became a class with ``squares``), so the range
ends after the version tested here; a new minor version is checked before it is widened.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

__all__ = ["AGENT_DICTS", "WRAPPER_STATE_ATTRS", "agent_dicts", "agent_selector", "has_aec_bookkeeping",
           "illegal_move_observation", "selector_position", "set_agent_dicts", "set_selector_position",
           "set_skip_agent_selection", "set_wrapper_state", "skip_agent_selection", "wrapper_state"]

#: The raw env's per-agent AEC dicts, one of them private.
AGENT_DICTS = ("rewards", "_cumulative_rewards", "terminations", "truncations", "infos")
#: The private attributes that are part of the state, by the class name of the wrapper holding them.
WRAPPER_STATE_ATTRS: dict[str, tuple[str, ...]] = {
    "OrderEnforcingWrapper": ("_has_reset", "_has_updated"),
    "TerminateIllegalWrapper": ("_prev_obs", "_prev_info", "_terminated"),
    "AssertOutOfBoundsWrapper": (),
}


def has_aec_bookkeeping(raw: Any) -> bool:
    """Whether ``raw`` has its AEC bookkeeping (a PettingZoo env has it once reset)."""
    return hasattr(raw, "_cumulative_rewards") and hasattr(raw, "_agent_selector")


def agent_dicts(raw: Any) -> dict[str, Any]:
    """``raw``'s :data:`AGENT_DICTS`, by name (the live dicts)."""
    return {name: getattr(raw, name) for name in AGENT_DICTS}


def set_agent_dicts(raw: Any, dicts: Mapping[str, Any]) -> None:
    """Give ``raw`` the :data:`AGENT_DICTS` in ``dicts``, in that order."""
    for name in AGENT_DICTS:
        setattr(raw, name, dicts[name])


def skip_agent_selection(raw: Any) -> Any:
    """``raw._skip_agent_selection``, or None while no dead agent is being stepped."""
    return getattr(raw, "_skip_agent_selection", None)


def set_skip_agent_selection(raw: Any, agent: Any) -> None:
    """Set ``raw._skip_agent_selection``."""
    raw._skip_agent_selection = agent


def agent_selector(raw: Any) -> Any:
    """``raw``'s ``AgentSelector`` (``raw._agent_selector``)."""
    return raw._agent_selector


def selector_position(selector: Any) -> int:
    """The position of the next agent in ``selector.agent_order`` (``_current_agent``)."""
    return int(selector._current_agent)


def set_selector_position(selector: Any, position: int) -> None:
    """Set ``selector._current_agent``."""
    selector._current_agent = position


def wrapper_state(wrapper: Any) -> dict[str, Any]:
    """The state attributes of ``wrapper`` (one of :data:`WRAPPER_STATE_ATTRS`), by name."""
    return {k: getattr(wrapper, k) for k in WRAPPER_STATE_ATTRS[type(wrapper).__name__]}


def set_wrapper_state(wrapper: Any, saved: Mapping[str, Any]) -> None:
    """Write copies of :func:`wrapper_state` output back to ``wrapper``; other keys are ignored."""
    for key, value in saved.items():
        if key in WRAPPER_STATE_ATTRS[type(wrapper).__name__]:
            setattr(wrapper, key, copy.deepcopy(value))


def illegal_move_observation(wrapper: Any) -> Any:
    """The last observation ``wrapper`` (a ``TerminateIllegalWrapper``) judges a move's legality
    by, or None for a wrapper that keeps none."""
    return getattr(wrapper, "_prev_obs", None)
