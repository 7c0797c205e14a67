"""What an episode's environment emitted and received, as episode callbacks read it: the
getters ``get_observations``, ``get_actions``, ``get_rewards`` and ``get_infos`` (RLlib's
names and indexing; docs/callbacks.md, "Episode data").

Per agent, four columns: the observations and the infos the env returned with them (the reset
observation first, then one per step: one more than the actions), the actions the env received
and the rewards it returned for them. Each column keeps its last ``limit`` steps (``limit + 1``
observations and infos; ``Callbacks.episode_history_steps``): a getter asked for an entry that
is no longer kept, or that happened before the env runner's state was restored (the history is
not checkpointed), raises :class:`~cairn.errors.EpisodeHistoryError` rather than return part of
what was asked.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from typing import Any

import numpy as np

from cairn.errors import EpisodeHistoryError

__all__ = ["EpisodeHistory", "COLUMNS"]

#: The columns, by getter name.
COLUMNS = ("observations", "infos", "actions", "rewards")

# Entries before the first kept one when they are not known (an episode restored mid-way): so
# many that any index from the start, and any from the end reaching past what is kept, falls
# before the kept entries and is refused as "not kept".
_UNKNOWN = 2**62

Indices = int | slice | list[int] | None


def _copied(value: Any) -> Any:
    """``value`` with its arrays copied: an env may write into an observation it returned, and
    a policy into the action array a row was taken from."""
    if isinstance(value, np.ndarray):
        return value.copy()
    if isinstance(value, dict):
        return {k: _copied(v) for k, v in value.items()}
    if isinstance(value, tuple):
        return tuple(_copied(v) for v in value)
    return value


class _Column:
    """The last entries of one column of one agent, and how many came before them."""

    __slots__ = ("before", "items")

    def __init__(self, maxlen: int | None, before: int) -> None:
        self.items: deque[Any] = deque(maxlen=maxlen)
        self.before = before  # entries not kept: dropped by the limit, or before a restore

    def append(self, value: Any) -> None:
        if len(self.items) == self.items.maxlen:
            self.before += 1
        self.items.append(value)

    def get(self, indices: Indices, what: str) -> Any:
        total = self.before + len(self.items)
        if isinstance(indices, (int, np.integer)):
            return self.items[self._position(int(indices), total, what)]
        if indices is None:
            indices = slice(None)
        if isinstance(indices, slice):
            steps = range(*indices.indices(total))
            if len(steps) and min(steps[0], steps[-1]) < self.before:
                raise self._not_kept(what, indices)
            return [self.items[i - self.before] for i in steps]
        if isinstance(indices, Iterable) and not isinstance(indices, (str, bytes)):
            return [self.items[self._position(int(i), total, what)] for i in indices]
        raise TypeError(f"episode.get_{what}({indices!r}): expected an int, a slice, a list of ints "
                        "or None (all).")

    def _position(self, index: int, total: int, what: str) -> int:
        absolute = index + total if index < 0 else index
        if absolute >= total or absolute < 0:
            raise IndexError(f"episode.get_{what}({index}): the episode has {total} {what} so far.")
        if absolute < self.before:
            raise self._not_kept(what, index)
        return absolute - self.before

    def _not_kept(self, what: str, indices: Any) -> EpisodeHistoryError:
        kept = len(self.items)
        if self.before >= _UNKNOWN:
            return EpisodeHistoryError(
                f"episode.get_{what}({indices!r}): this episode was in flight when the env runner's "
                f"state was restored; its history is not checkpointed and starts after the restore "
                f"({kept} {what} since). Index from the end (-1 .. -{kept}), or compute the metric "
                "from episodes that started after the restore.")
        return EpisodeHistoryError(
            f"episode.get_{what}({indices!r}): only the last {kept} {what} are kept "
            f"({self.before} dropped). Set `episode_history_steps` on your Callbacks class to a "
            "larger number, or None to keep whole episodes.")


class _AgentHistory:
    """The four columns of one agent."""

    __slots__ = COLUMNS

    def __init__(self, limit: int | None, restored: bool) -> None:
        before = _UNKNOWN if restored else 0
        per_obs = None if limit is None else limit + 1
        self.observations = _Column(per_obs, before)
        self.infos = _Column(per_obs, before)
        self.actions = _Column(limit, before)
        self.rewards = _Column(limit, before)


class EpisodeHistory:
    """The columns of every agent of one episode (single-agent envs: one agent).

    Args:
        multi_agent: Whether getters return ``{agent_id: value}`` (else the one agent's value).
        limit: Steps kept per agent (None: the whole episode).
        restored: The episode was in flight when its runner's state was restored: what came
            before is unknown, so only indices from the end into what followed are answered.
    """

    __slots__ = ("agents", "limit", "multi_agent", "restored")

    def __init__(self, *, multi_agent: bool, limit: int | None, restored: bool = False) -> None:
        self.multi_agent = multi_agent
        self.limit = limit
        self.restored = restored
        self.agents: dict[Any, _AgentHistory] = {}

    def _agent(self, agent: Any) -> _AgentHistory:
        history = self.agents.get(agent)
        if history is None:
            history = self.agents[agent] = _AgentHistory(self.limit, self.restored)
        return history

    def observe(self, agent: Any, observation: Any, info: Any) -> None:
        """``agent`` got ``observation`` with ``info`` (from a reset, or after its action)."""
        history = self._agent(agent)
        history.observations.append(_copied(observation))
        history.infos.append(info)

    def act(self, agent: Any, action: Any) -> None:
        """The env received ``action`` of ``agent``."""
        self._agent(agent).actions.append(_copied(action))

    def reward(self, agent: Any, reward: float) -> None:
        """The env returned ``reward`` for ``agent``'s last action."""
        self._agent(agent).rewards.append(reward)

    def step(self, agent: Any, action: Any, reward: float, observation: Any, info: Any) -> None:
        """One step of a single-agent env: action, reward, then the observation after it."""
        history = self._agent(agent)
        history.actions.append(_copied(action))  # a row of an action array the policy may reuse
        history.rewards.append(reward)
        history.observations.append(_copied(observation))
        history.infos.append(info)

    def get(self, column: str, indices: Indices, agent_ids: Any = None) -> Any:
        """``column`` at ``indices`` (RLlib's getters; docs/callbacks.md): one agent's value, or
        ``{agent_id: value}`` of every agent (or of ``agent_ids``) that has entries there."""
        if not self.multi_agent:
            if not self.agents:
                raise IndexError(f"episode.get_{column}({indices!r}): the episode has no {column} yet.")
            (history,) = self.agents.values()
            return getattr(history, column).get(indices, column)
        if agent_ids is None:
            wanted = list(self.agents)
        elif isinstance(agent_ids, (list, tuple, set, frozenset)):
            wanted = [a for a in agent_ids if a in self.agents]
        else:
            wanted = [agent_ids] if agent_ids in self.agents else []
        found: dict[Any, Any] = {}
        for agent in wanted:
            column_of = getattr(self.agents[agent], column)
            try:
                found[agent] = column_of.get(indices, column)
            except IndexError as error:
                # RLlib's rule: an agent without an entry at this index is left out; one whose
                # entry is no longer kept is an error, never a silent gap.
                if isinstance(error, EpisodeHistoryError):
                    raise
        return found
