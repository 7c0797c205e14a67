"""Batched policy inference in the env runners, with errors that name the agents at fault.

A policy sees a batch of processed observations; when one row's ``action_mask`` leaves no
legal action, the policy raises :class:`~cairn.errors.ActionMaskError` with the batch rows at
fault. Only the env runner knows which agent, environment and episode step each row is, so
every sampling path (single-agent, parallel multi-agent, turn-based) computes actions through
:func:`compute_raw_actions`, which re-raises the error with those named.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from cairn.errors import ActionMaskError

if TYPE_CHECKING:
    from cairn.policy.policy import Policy

__all__ = ["compute_raw_actions", "RowOrigin"]

#: ``(agent_id, env_index, episode_step)`` of one batch row: the agent that acts, the index of
#: its environment in the runner, and the number of env steps its episode has taken so far.
RowOrigin = tuple[Any, int, int]


def compute_raw_actions(
    policy: Policy, obs: np.ndarray, *, explore: bool, policy_id: str,
    origin: Callable[[int], RowOrigin], record: bool = False,
) -> tuple[np.ndarray, np.ndarray | None]:
    """``(raw actions, behaviour log-probabilities)`` of ``policy`` for processed ``obs``; the
    log-probabilities (the ``action_logp`` column) only when the rows are ``record``-ed for a
    policy that :attr:`~cairn.policy.policy.Policy.wants_action_logp`, else None. An
    :class:`ActionMaskError` is re-raised (chained) naming, for each row at fault,
    ``origin(row)``: its agent, env index and episode step. The new error keeps the rows (all
    rows when the policy named none)."""
    try:
        if record and policy.wants_action_logp:
            return policy.compute_raw_actions_and_logp(obs, explore=explore)
        return policy.compute_raw_actions(obs, explore=explore), None
    except ActionMaskError as exc:
        rows = exc.rows or tuple(range(len(obs)))
        where = "; ".join(_describe(origin(row)) for row in rows)
        raise ActionMaskError(
            f"{where} (policy {policy_id!r}): {str(exc).rstrip('.')}. Fix: the environment must "
            "leave at least one action legal (a 1 in the observation's 'action_mask') whenever "
            "it asks an agent to act; a turn-based game must not select an agent that has no "
            "legal move.",
            rows,
        ) from exc


def _describe(origin: RowOrigin) -> str:
    agent, env_index, step = origin
    return f"Agent {agent!r} in env {env_index}, at step {step} of its episode"
