"""Checks of a turn-based runner's moves in flight, as a checkpoint restores them.

:class:`~cairn.env_runner.turn_based.TurnBasedSampler` saves, per env, the agent to move with
its processed observation and the moves waiting for their reward (``pending_*``). Restored
as they are, values that do not fit the env (restored first) or the policies loaded and then
failed the first ``train()`` with a bare ``KeyError`` or ``IndexError``, or learned from rows
of the wrong agent. :func:`check_moves_in_flight` refuses them first, with a
:class:`~cairn.errors.CheckpointFormatError` naming the key.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from cairn.env_runner.parallel_state import check_row, refuse

__all__ = ["check_moves_in_flight"]


def check_moves_in_flight(env: Any, i: int, state: Mapping[str, Any], to_move: tuple[Any, np.ndarray] | None,
                          policy_of: Callable[[str], Any]) -> list[tuple[np.ndarray, np.ndarray, Any]]:
    """Env ``i``'s pending moves (``state``, one entry of the sampler's state; ``to_move`` its
    agent to move and observation, ``policy_of(agent name)`` the policy an agent acts with) as
    :func:`~cairn.env_runner.parallel_state.check_row` returns them, once checked: an agent is to
    move, and it is ``env``'s ``agent_selection``; its observation has the shape the policy
    makes of ``env``'s observation now, and is finite; the pending agents are distinct, not the
    one to move, ``pending_action_logp`` (when saved; older states lack it) has one entry per
    pending agent, and each move passes ``check_row`` with rows of that shape (as a parallel
    env's waiting row does; a NaN logp would poison its policy's next update)."""
    where = f"The saved env runner state's current_obs[{i}]"
    selection = env.agent_selection
    if to_move is None or to_move[0] != selection:
        raise refuse(where, f"['to_move'] is {None if to_move is None else str(to_move[0])!r:.60} "
                            f"(the agent to move), but env {i}'s restored agent_selection is "
                            f"{str(selection)!r:.60}.")
    agent, row = to_move
    names = list(state["pending_agents"])
    # A scripted opponent (policy None) moves on env.observe(): its slot holds no row, and the
    # pending rows have the shape of the first pending agent's policy.
    shaper = next((a for a in [str(agent), *names] if policy_of(a) is not None), None)
    observed = agent if shaper == str(agent) else next((a for a in env.agents if str(a) == shaper), agent)
    shape = (0,) if shaper is None else np.shape(policy_of(shaper).process_observations(
        [env.observe(observed)], update=False))[1:]
    if policy_of(str(agent)) is None and row.shape != (0,):
        raise refuse(where, f"['to_move']['obs'] has shape {row.shape}; a scripted opponent's is "
                            "empty, (0,).")
    if policy_of(str(agent)) is not None and (row.shape != shape or not np.isfinite(row).all()):
        finite = bool(np.isfinite(row).all())
        raise refuse(where, f"['to_move']['obs'] has shape {row.shape} (finite: {finite}); "
                            f"the policy of {str(agent)!r:.60} makes finite rows of shape {shape}.")
    if len(set(names)) != len(names) or str(agent) in names:
        raise refuse(where, f"['pending_agents'] is {names!r:.100}: agents waiting for their "
                            f"reward are distinct and never the one to move ({str(agent)!r:.60}).")
    if not names:
        return []
    obs = np.asarray(state["pending_obs"], dtype=np.float32)
    actions = np.asarray(state["pending_actions"])
    if obs.ndim < 1 or actions.ndim < 1 or len(obs) != len(names) or len(actions) != len(names):
        raise refuse(where, f"['pending_obs'] / ['pending_actions'] have shapes {obs.shape} / "
                            f"{actions.shape} for the {len(names)} ['pending_agents'] {names!r:.100}.")
    saved = state.get("pending_action_logp")  # None: older states lack it
    logps = None if saved is None else np.asarray(saved, dtype=np.float32)
    if logps is not None and logps.shape != (len(names),):
        raise refuse(where, f"['pending_action_logp'] has shape {logps.shape}; expected ({len(names)},): "
                            f"one per ['pending_agents'] {names!r:.100}.")
    moves = []
    for k, name in enumerate(names):
        policy = policy_of(name)
        keys = (f"['pending_obs'][{k}]", f"['pending_actions'][{k}]",
                None if logps is None else f"['pending_action_logp'][{k}]")
        # NaN stands for none (a policy that does not want it): check_row takes None.
        logp = None if logps is None or policy is None or not policy.wants_action_logp else float(logps[k])
        moves.append(check_row(where, keys, policy, f"the policy of {name!r:.60}", obs[k], actions[k], logp,
                               shape=shape))
    return moves
