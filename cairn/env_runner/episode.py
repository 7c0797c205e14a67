"""Running totals of the episode each environment is in, and the episodes an env runner has
completed since its metrics were last taken."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Mapping
from typing import Any

from cairn.callbacks.base import Callbacks, overrides

__all__ = ["EpisodeTotals", "EpisodeBook"]


class EpisodeTotals:
    """Running totals of one environment's current episode: what episode callbacks see
    (``cairn.Callbacks``, docs/callbacks.md).

    Attributes:
        env_index: The environment (of its env runner) that plays the episode.
        length: Env steps so far (turn-based games: moves).
        ret: The return so far, all agents' rewards summed (also ``episode_return``).
        agent_returns: ``{agent_id: return so far}``.
        custom_metrics: ``{name: number}`` set by the user's episode hooks; reported with the
            episode when it ends (``result["custom_metrics"]``), saved with the runner state.
    """

    __slots__ = ("agent_returns", "custom_metrics", "env_index", "length", "ret")

    def __init__(self, env_index: int = 0) -> None:
        self.env_index = env_index
        self.ret = 0.0
        self.length = 0
        self.agent_returns: dict[Any, float] = defaultdict(float)
        self.custom_metrics: dict[str, Any] = {}

    @property
    def episode_return(self) -> float:
        """The return so far (all agents' rewards summed)."""
        return float(self.ret)

    def to_state(self) -> dict[str, Any]:
        # float(): rewards may be numpy scalars (Pendulum's), which JSON restores as floats.
        state: dict[str, Any] = {"return": float(self.ret), "length": self.length,
                                 "agent_returns": {str(k): float(v) for k, v in self.agent_returns.items()}}
        if self.custom_metrics:  # optional: runner states without it read as {}
            state["custom_metrics"] = dict(self.custom_metrics)
        return state

    @classmethod
    def from_state(cls, state: Mapping[str, Any], agent_ids: Mapping[str, Any],
                   env_index: int = 0) -> EpisodeTotals:
        ep = cls(env_index)
        ep.ret, ep.length = float(state["return"]), int(state["length"])
        for key, value in state["agent_returns"].items():
            ep.agent_returns[agent_ids.get(key, key)] = float(value)
        ep.custom_metrics = dict(state.get("custom_metrics") or {})
        return ep


class EpisodeBook:
    """Each environment's current episode, and the episodes completed since they were taken.

    A completed episode is reported as ``{"return", "length", "policy_returns"}`` (its agents'
    returns grouped by the policy each agent was mapped to), plus ``"custom_metrics"`` when
    the user's hooks set any. ``callbacks`` (a ``cairn.Callbacks``) get ``on_episode_start``
    when an episode begins, ``on_episode_step`` from :meth:`step` and ``on_episode_end``
    before it is recorded, with ``runner`` as their ``env_runner``.
    """

    def __init__(self, num_envs: int, callbacks: Callbacks | None = None, runner: Any = None) -> None:
        self._callbacks = callbacks
        self._runner = runner
        self._start_hook = callbacks is not None and overrides(callbacks, "on_episode_start")
        self._end_hook = callbacks is not None and overrides(callbacks, "on_episode_end")
        #: Whether :meth:`step` calls a hook (sampling loops skip the call otherwise).
        self.has_step_hook = callbacks is not None and overrides(callbacks, "on_episode_step")
        self.current = [EpisodeTotals(i) for i in range(num_envs)]
        self.completed: list[dict[str, Any]] = []
        self.num_episodes = 0

    def _start(self, env_index: int) -> EpisodeTotals:
        episode = EpisodeTotals(env_index)
        if self._start_hook:
            self._callbacks.on_episode_start(episode=episode, env_runner=self._runner)  # type: ignore[union-attr]
        return episode

    def restart_all(self) -> None:
        """Every environment starts a new episode (after a reset of them all)."""
        self.current = [self._start(i) for i in range(len(self.current))]

    def step(self, env_index: int) -> None:
        """The episode of env ``env_index`` took a step: ``on_episode_step``."""
        if self.has_step_hook:
            self._callbacks.on_episode_step(  # type: ignore[union-attr]
                episode=self.current[env_index], env_runner=self._runner)

    def finish(self, env_index: int, policy_of: Callable[[Any], str]) -> None:
        """Record the episode of env ``env_index`` as completed and start its next one."""
        ep = self.current[env_index]
        if self._end_hook:
            self._callbacks.on_episode_end(episode=ep, env_runner=self._runner)  # type: ignore[union-attr]
        policy_returns: dict[str, list[float]] = defaultdict(list)
        for agent, ret in ep.agent_returns.items():
            policy_returns[policy_of(agent)].append(ret)
        record: dict[str, Any] = {"return": ep.ret, "length": ep.length,
                                  "policy_returns": dict(policy_returns)}
        if ep.custom_metrics:
            record["custom_metrics"] = dict(ep.custom_metrics)
        self.completed.append(record)
        self.num_episodes += 1
        self.current[env_index] = self._start(env_index)

    def mark(self) -> tuple[int, int]:
        """Where the completed episodes stand now, for :meth:`forget_since`."""
        return len(self.completed), self.num_episodes

    def forget_since(self, mark: tuple[int, int]) -> None:
        """Forget the episodes completed since :meth:`mark` returned ``mark`` (a sample that
        raised is discarded whole: its episodes are neither reported nor counted)."""
        del self.completed[mark[0]:]
        self.num_episodes = mark[1]

    def take(self, limit: int | None = None) -> list[dict[str, Any]]:
        """Return the completed episodes (the first ``limit`` of them) and forget them all."""
        done = self.completed if limit is None else self.completed[:limit]
        self.completed = []
        return done
