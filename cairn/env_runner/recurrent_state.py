"""The recurrent state of every trajectory an env runner has in flight.

A recurrent policy (:func:`cairn.policy.recurrent.is_recurrent`) acts with a state per
trajectory: one per env copy (single-agent) or per (env copy, agent). :class:`RecurrentStates`
keeps them between steps and ``sample()`` calls, hands each policy the stacked states of the rows
it acts for, records each row's state before its step (the ``state_in_<k>`` columns: the learner
starts each sequence from the recorded state of its first row), forgets an env's states when its
episode ends, and an agent's when its part of the episode ends (the next step starts from the
policy's initial state), and is part of the runner's
state, so that a run saved mid-episode resumes exactly.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from cairn.env_runner.inference import RowOrigin, compute_raw_actions
from cairn.errors import CheckpointFormatError, ConfigError
from cairn.policy.recurrent import is_recurrent

if TYPE_CHECKING:
    from cairn.policy.policy import Policy

__all__ = ["RecurrentStates", "refuse_recurrent_policies"]

#: ``(env_index, agent_id)``: one trajectory of a runner.
Key = tuple[int, Any]


def refuse_recurrent_policies(policies: Mapping[str, Policy]) -> None:
    """Raise :class:`~cairn.errors.ConfigError` when one of ``policies`` is recurrent: turn-based
    environments carry no recurrent state."""
    recurrent = sorted(pid for pid, policy in policies.items() if is_recurrent(policy))
    if recurrent:
        raise ConfigError(
            f"Recurrent policies {recurrent} (model.use_lstm, or a RecurrentActorCriticModel) are not "
            "supported with turn-based (PettingZoo AEC) environments; they are with single-agent "
            "Gymnasium environments and PettingZoo ParallelEnv ones. Drop use_lstm, or use a parallel "
            "environment.")


class RecurrentStates:
    """``{(env_index, agent): [component arrays]}`` of the trajectories in flight."""

    def __init__(self) -> None:
        self.states: dict[Key, list[np.ndarray]] = {}

    def act(self, policy: Policy, obs: np.ndarray, keys: Sequence[Key], *, explore: bool, policy_id: str,
            origin: Callable[[int], RowOrigin], record: bool = False,
            ) -> tuple[np.ndarray, np.ndarray | None, list[np.ndarray] | None]:
        """``(raw actions, logps, states_in)`` for ``obs`` (row ``r`` belongs to ``keys[r]``): the
        behaviour log-probabilities of rows to ``record`` for a policy that wants them
        (:func:`~cairn.env_runner.inference.compute_raw_actions`; else None) and, for a recurrent
        policy, the stacked states the rows acted from (``[B, *shape]`` per component; the
        states after the step are kept). A feed-forward policy acts as usual (states None)."""
        if not is_recurrent(policy):
            raw, logp = compute_raw_actions(policy, obs, explore=explore, policy_id=policy_id, origin=origin,
                                            record=record)
            return raw, logp, None
        # The initial state is asked of the policy each time a row needs it, never cached: a
        # model may compute it from its weights (a learned initial state, changed by set_weights),
        # and a cache keyed by the policy's id() served a freed policy's state to the next
        # policy given that id. Most steps continue every trajectory and ask nothing.
        stored = [self.states.get(key) for key in keys]
        init = policy.get_initial_state() if any(state is None for state in stored) else []
        rows = [init if state is None else state for state in stored]
        state_in = [np.stack([row[k] for row in rows]) for k in range(len(rows[0]))]
        acting = policy.recurrent_acting
        logp = None
        if record and policy.wants_action_logp:
            raw, logp, state_out = acting.raw_actions_and_logp(obs, state_in, policy.np_random,
                                                               explore=explore)
        else:
            raw, state_out = acting.raw_actions(obs, state_in, policy.np_random, explore=explore)
        for r, key in enumerate(keys):
            self.states[key] = [s[r] for s in state_out]
        return raw, logp, state_in

    def end_trajectory(self, key: Key) -> None:
        """Forget trajectory ``key``'s state (its agent's part of the episode ended: terminated,
        truncated or left): should the agent come back, it starts from the initial state."""
        self.states.pop(key, None)

    def end_episode(self, env_index: int) -> None:
        """Forget env ``env_index``'s states: its next episode starts from the initial state."""
        for key in [k for k in self.states if k[0] == env_index]:
            del self.states[key]

    def clear(self) -> None:
        """Forget every state (all envs restart)."""
        self.states.clear()

    def get_state(self, *, copy: bool = True) -> list[dict[str, Any]]:
        """The states in flight as data: ``[{"env", "agent" (str), "state": [arrays]}]``."""
        return [{"env": int(i), "agent": str(agent), "state": [s.copy() if copy else s for s in state]}
                for (i, agent), state in self.states.items()]

    def set_state(self, entries: Iterable[Mapping[str, Any]],
                  agent_ids: Callable[[int], Mapping[str, Any]],
                  policy_of: Callable[[int, Any], Policy], *, num_envs: int) -> None:
        """Restore :meth:`get_state`; ``agent_ids(env_index)`` maps an agent's name back to its
        ID, ``policy_of(env_index, agent)`` gives the policy it acts with, ``num_envs`` is the
        runner's number of env copies. Every entry is checked before anything changes: an env
        index outside ``[0, num_envs)``, an agent the env does not have, a trajectory stored
        twice, a state that does not fit that policy's (a checkpoint edited by hand, or of another
        model) or one holding NaN or infinity would be dropped, or poison the next update,
        silently; each is refused with :class:`~cairn.errors.CheckpointFormatError` naming the
        entry (``recurrent_states[k]``)."""
        restored: dict[Key, list[np.ndarray]] = {}
        for k, entry in enumerate(entries):
            where = f"The saved env runner state's recurrent_states[{k}]"
            i = entry["env"]
            if type(i) is not int or not 0 <= i < num_envs:
                raise CheckpointFormatError(
                    f"{where}['env'] is {i!r:.40}; this runner has env copies 0 to {num_envs - 1}. "
                    "Restore from an unedited checkpoint.")
            names = agent_ids(i)
            if entry["agent"] not in names:
                raise CheckpointFormatError(
                    f"{where}['agent'] is {entry['agent']!r:.60}, not an agent of env {i} (its agents: "
                    f"{sorted(names)!r:.200}). Restore from an unedited checkpoint.")
            agent = names[entry["agent"]]
            if (i, agent) in restored:
                raise CheckpointFormatError(
                    f"{where} holds a second state for agent {entry['agent']!r:.60} of env {i}. "
                    "Restore from an unedited checkpoint.")
            state = [np.asarray(s, dtype=np.float32).copy() for s in entry["state"]]
            try:
                policy = policy_of(i, agent)
            except (KeyError, IndexError, ConfigError):
                policy = None
            expected = None if policy is None or not is_recurrent(policy) else policy.get_initial_state()
            if expected is None or [s.shape for s in state] != [s.shape for s in expected]:
                shapes = "none (not a recurrent policy's agent)" if expected is None else \
                    [s.shape for s in expected]
                raise CheckpointFormatError(
                    f"{where}['state'] holds a recurrent state of shapes "
                    f"{[s.shape for s in state]} for agent {entry['agent']!r} of env {i}, whose policy "
                    f"expects {shapes}. The checkpoint's env runner state does not belong to its "
                    "policies; restore from an unedited checkpoint.")
            if not all(np.isfinite(s).all() for s in state):
                raise CheckpointFormatError(
                    f"{where}['state'] (agent {entry['agent']!r:.60} of env {i}) holds NaN or "
                    "infinity: acting from it would make the next update's loss, and then every "
                    "weight, NaN. Restore from an unedited checkpoint.")
            restored[(i, agent)] = state
        self.clear()
        self.states.update(restored)
