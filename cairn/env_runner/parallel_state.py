"""What a parallel env runner's state saves beside the observations: the scripted opponents'
next actions (:func:`plain_action`, :func:`restore_action`) and the rows that wait across a
fragment's end.

:class:`~cairn.env_runner.parallel.ParallelSampler` carries the row of an agent that acted and
has not observed again when a fragment ends into the next fragment
(:class:`~cairn.env_runner.trajectories.WaitingRow`): its next observation, and the rewards and
flags paid meanwhile, arrive there. A checkpoint saved between the two keeps them (key
``pending`` of each ``current_obs`` entry, format version 4), one object per agent, so that a
resumed run sends the rows the run without a stop sends. :func:`restore_pending` refuses what
does not fit the restored env and policies with a :class:`~cairn.errors.CheckpointFormatError`
naming the entry: restored as they were, such rows would fail the first ``train()`` far from
their cause, or teach a policy another agent's rows.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Container, Mapping
from typing import TYPE_CHECKING, Any

import gymnasium as gym
import numpy as np

from cairn.env_runner.agent_mapping import agent_ids_by_name
from cairn.env_runner.trajectories import WaitingRow
from cairn.errors import CheckpointFormatError
from cairn.policy.recurrent import is_recurrent

if TYPE_CHECKING:
    from cairn.policy.policy import Policy

__all__ = ["check_row", "pending_state", "plain_action", "refuse", "restore_action", "restore_pending"]

_KEYS = {"agent", "obs", "action", "reward", "terminated", "truncated", "first", "action_logp", "state_in"}


def pending_state(rows: Mapping[Any, WaitingRow], *, copy: bool = True) -> list[dict[str, Any]]:
    """One env's waiting rows as state data: ``[{agent (str), obs, action, reward, terminated,
    truncated, first, action_logp (a float or None), state_in (arrays or None)}]`` in their order
    (``copy=False``: the arrays as views)."""
    def arr(a: Any) -> np.ndarray:
        a = np.asarray(a)
        return a.copy() if copy else a

    return [{"agent": str(agent), "obs": arr(row.obs), "action": arr(row.action), "reward": float(row.reward),
             "terminated": bool(row.terminated), "truncated": bool(row.truncated), "first": bool(row.first),
             "action_logp": None if row.action_logp is None else float(row.action_logp),
             "state_in": None if row.state_in is None else [arr(s) for s in row.state_in]}
            for agent, row in rows.items()]


def refuse(where: str, message: str) -> CheckpointFormatError:
    """The error for a runner state's moves in flight that do not fit: ``where`` + ``message``."""
    return CheckpointFormatError(f"{where}{message} Restore from an unedited checkpoint.")


def restore_pending(env: Any, i: int, saved: Any, *, pids: Mapping[Any, str], acting: Container[Any],
                    policy_of: Callable[[str], Policy | None]) -> dict[Any, WaitingRow]:
    """Env ``i``'s saved waiting rows (``saved``: :func:`pending_state`'s list), keyed by
    ``env``'s agent IDs, checked against the restored env: each names a distinct agent that is
    alive (``env.agents``), mapped in its episode (``pids``) and not about to act (not in
    ``acting``: it has no observation to act on), whose policy (``policy_of(policy ID)``) made
    it (:func:`check_row`), with a finite reward, bool flags and a finite recurrent state of
    that policy's shapes exactly when it is recurrent."""
    where = f"The saved env runner state's current_obs[{i}]['pending']"
    if not isinstance(saved, list):
        raise refuse(where, f" is {type(saved).__name__}; expected a list of waiting rows.")
    ids = agent_ids_by_name(env)
    alive = set(env.agents)
    rows: dict[Any, WaitingRow] = {}
    for k, entry in enumerate(saved):
        at = f"{where}[{k}]"
        if not isinstance(entry, Mapping) or set(entry) != _KEYS:
            keys = sorted(entry) if isinstance(entry, Mapping) else type(entry).__name__
            raise refuse(at, f" has keys {keys!r:.200}; expected {sorted(_KEYS)}.")
        name = entry["agent"]
        agent = ids.get(name) if isinstance(name, str) else None
        if agent is None or agent not in alive or agent not in pids or agent in acting or agent in rows:
            raise refuse(at, f"['agent'] is {name!r:.60}: a waiting row belongs to a distinct live agent "
                             f"of env {i} (env.agents: {[str(a) for a in env.agents]!r:.200}) that acted in "
                             "its episode and has no observation to act on.")
        pid = pids[agent]
        policy = policy_of(pid)
        obs, action, logp = check_row(at, ("['obs']", "['action']", "['action_logp']"), policy,
                                      f"policy {pid!r:.60} (agent {name!r:.60})",
                                      entry["obs"], entry["action"], entry["action_logp"])
        reward = entry["reward"]
        if type(reward) not in (int, float) or not math.isfinite(reward):
            raise refuse(at, f"['reward'] is {reward!r:.60}; expected a finite number.")
        flags = [entry[key] for key in ("terminated", "truncated", "first")]
        if any(type(flag) is not bool for flag in flags):
            raise refuse(at, f"['terminated'], ['truncated'], ['first'] are {flags!r:.100}; expected bools.")
        assert policy is not None  # check_row refuses a scripted opponent's row
        rows[agent] = WaitingRow(pid, obs, action, float(reward), entry["terminated"], entry["truncated"],
                                 entry["first"], logp, _state_in(at, entry["state_in"], policy))
    return rows


def check_row(at: str, keys: tuple[str, str, str | None], policy: Policy | None, owner: str, obs: Any,
              action: Any, logp: Any, *, shape: tuple[int, ...] | None = None) -> tuple[
                  np.ndarray, np.ndarray, np.float32 | None]:
    """One saved row in flight (a parallel env's waiting row, a turn-based pending move) as
    (float32 observation, raw action of its policy's dtype, float32 logp or None), copied, if
    it fits the ``policy`` that made it (named ``owner``; None: a scripted opponent, which
    leaves no rows): ``obs`` a finite row of ``shape`` (None: the shape of the policy's processed
    rows, ``(size + mask_size,)``: flattened, with a masked policy's mask), ``action`` finite, of
    the policy's raw shape and dtype (not 1.5 for an int), ``logp`` finite exactly when the policy
    wants behaviour log-probabilities, else None (unchecked when ``keys[2]`` is None: older
    states lack it). Else a CheckpointFormatError naming the key."""
    obs_key, action_key, logp_key = keys
    if policy is None:
        raise refuse(at, f"{obs_key} is a row of {owner}, a scripted opponent: it leaves no rows.")
    row = np.asarray(obs, dtype=np.float32)
    if shape is None:  # a processed row, not an observation: a (1, 2) Box, a Dict give flat rows
        shape = (int(policy.preprocessor.size) + int(policy.preprocessor.mask_size),)
    if row.shape != shape or not np.isfinite(row).all():
        raise refuse(at, f"{obs_key} has shape {row.shape} (finite: {bool(np.isfinite(row).all())}); "
                         f"{owner} makes finite rows of shape {shape}.")
    dtype, raw_shape = policy.dist.raw_action_dtype, tuple(policy.dist.raw_action_shape)
    raw = _raw_action(action, dtype, raw_shape)
    if raw is None:
        raise refuse(at, f"{action_key} is {action!r:.60}; the raw actions of {owner} are finite {dtype} "
                         f"of shape {raw_shape}.")
    wants = policy.wants_action_logp
    if logp_key is not None and ((logp is None) == wants or (
            logp is not None and (type(logp) not in (int, float) or not math.isfinite(logp)))):
        wanted = "wants a finite behaviour log-probability" if wants else "keeps none (None)"
        raise refuse(at, f"{logp_key} is {logp!r:.60}; {owner} {wanted}.")
    return row.copy(), raw, None if logp is None else np.float32(logp)


def _raw_action(value: Any, dtype: np.dtype[Any], shape: tuple[int, ...]) -> np.ndarray | None:
    """``value`` as a raw action of ``dtype`` and ``shape``, or None when it is not one (another
    shape, not finite, or a value the dtype changes, such as 1.5 for an int action)."""
    try:
        given = np.asarray(value)
        if given.dtype.kind not in "biuf" or given.shape != shape:
            return None
        action = given.astype(dtype)
    except (TypeError, ValueError):
        return None
    if not np.isfinite(given.astype(np.float64)).all() or not np.array_equal(action, given):
        return None
    return action.copy()


def _state_in(at: str, saved: Any, policy: Policy) -> list[np.ndarray] | None:
    """The saved recurrent state a row acted from: one finite array per component of the
    policy's state, of its shapes; None for a feed-forward policy (which must have none)."""
    expected = policy.get_initial_state() if is_recurrent(policy) else None
    if saved is None and expected is None:
        return None
    states = [np.asarray(s, dtype=np.float32) for s in saved] if isinstance(saved, list) else None
    if (expected is None or states is None or [s.shape for s in states] != [s.shape for s in expected]
            or not all(np.isfinite(s).all() for s in states)):
        found = None if states is None else [s.shape for s in states]
        wanted = ("none (None)" if expected is None
                  else f"finite arrays of shapes {[s.shape for s in expected]}")
        raise refuse(at, f"['state_in'] has shapes {found}; the policy's recurrent state is {wanted}.")
    return [s.copy() for s in states]


def plain_action(action: Any) -> Any:
    """A scripted opponent's action as state data: a numpy scalar as a Python number, an array
    copied, anything else as it is."""
    if isinstance(action, np.generic):
        return action.item()
    return np.array(action) if isinstance(action, np.ndarray) else action


def restore_action(space: Any, value: Any) -> Any:
    """``value`` (a saved :func:`plain_action`) as an action of ``space``: an int for a
    Discrete space, else an array of its dtype; None when it is not one of its actions."""
    if isinstance(space, gym.spaces.Discrete):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
            return None
        action: Any = int(value)
    else:
        try:
            action = np.asarray(value, dtype=space.dtype)
        except (TypeError, ValueError):
            return None
    return action if space.contains(action) else None
