"""Running totals of the episode each environment is in, and the episodes an env runner has
completed since its metrics were last taken."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from cairn.callbacks.base import Callbacks, overrides
from cairn.env_runner.episode_history import EpisodeHistory, Indices
from cairn.errors import ConfigError

__all__ = ["EpisodeTotals", "EpisodeBook"]

_EPISODE_HOOKS = ("on_episode_start", "on_episode_step", "on_episode_end")
E = TypeVar("E")


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
        history: What the env emitted and received, read by :meth:`get_observations`,
            :meth:`get_actions`, :meth:`get_rewards`, :meth:`get_infos`; None when no episode
            hook is overridden (nothing is recorded then).
    """

    __slots__ = ("agent_returns", "custom_metrics", "env_index", "history", "length", "ret")

    def __init__(self, env_index: int = 0, history: EpisodeHistory | None = None) -> None:
        self.env_index = env_index
        self.ret = 0.0
        self.length = 0
        self.agent_returns: dict[Any, float] = defaultdict(float)
        self.custom_metrics: dict[str, Any] = {}
        self.history = history

    # RLlib's getters (SingleAgentEpisode / MultiAgentEpisode); docs/callbacks.md, "Episode data".
    def get_observations(self, indices: Indices = None, agent_ids: Any = None) -> Any:
        """The observations the env returned (raw: before any filter or preprocessing), the
        reset observation first: ``-1`` the latest, a slice or a list of indices a list, None
        all. Multi-agent: ``{agent_id: ...}`` of the agents (``agent_ids``: those) that have one
        there; indices count each agent's own observations."""
        return self._history("observations").get("observations", indices, agent_ids)

    def get_infos(self, indices: Indices = None, agent_ids: Any = None) -> Any:
        """The info dicts the env returned with each observation (indexed as they are)."""
        return self._history("infos").get("infos", indices, agent_ids)

    def get_actions(self, indices: Indices = None, agent_ids: Any = None) -> Any:
        """The actions the env received (one fewer than the observations)."""
        return self._history("actions").get("actions", indices, agent_ids)

    def get_rewards(self, indices: Indices = None, agent_ids: Any = None) -> Any:
        """The rewards the env returned, one per action (in turn-based games it arrives when
        the agent is next to move)."""
        return self._history("rewards").get("rewards", indices, agent_ids)

    def _history(self, column: str) -> EpisodeHistory:
        if self.history is None:
            raise AttributeError(f"episode.get_{column}() is available in episode callbacks only "
                                 "(on_episode_start, on_episode_step, on_episode_end).")
        return self.history

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
                   env_index: int = 0, history: EpisodeHistory | None = None) -> EpisodeTotals:
        """The totals of :meth:`to_state`; ``history`` (the data is not in the state) is the
        empty one of an episode restored mid-way."""
        ep = cls(env_index, history)
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
    from :meth:`start` (the sampler calls it once the reset observations are recorded),
    ``on_episode_step`` from :meth:`step` and ``on_episode_end`` before the episode is recorded,
    with ``runner`` as their ``env_runner``. When one of these hooks is overridden, each episode
    records its data (:attr:`recording`; the samplers feed ``episode.history``).
    """

    def __init__(self, num_envs: int, callbacks: Callbacks | None = None, runner: Any = None,
                 *, multi_agent: bool = False) -> None:
        self._callbacks = callbacks
        self._runner = runner
        self._start_hook = callbacks is not None and overrides(callbacks, "on_episode_start")
        self._end_hook = callbacks is not None and overrides(callbacks, "on_episode_end")
        #: Whether :meth:`step` calls a hook (sampling loops skip the call otherwise).
        self.has_step_hook = callbacks is not None and overrides(callbacks, "on_episode_step")
        #: Whether episodes record their data (an episode hook may read it); else no cost.
        self.recording = callbacks is not None and any(overrides(callbacks, h) for h in _EPISODE_HOOKS)
        self._multi_agent = multi_agent
        self._limit = _history_limit(callbacks) if self.recording else None
        self.current = [self.new_episode(i) for i in range(num_envs)]
        self.completed: list[dict[str, Any]] = []
        self.num_episodes = 0
        #: ``EnvRunner.run_episodes``: per env, the episodes it still owes (:meth:`finish` counts
        #: them down; the samplers step only the envs that owe some). None: every env plays on.
        self.owed: list[int] | None = None

    def playing(self, every: E) -> list[int] | E:
        """The envs to step: those that still owe episodes (:attr:`owed`), or ``every`` when every
        env plays (also when each owes some, so that the samplers take their usual path): the
        single-agent sampler passes None, the multi-agent ones every env's index."""
        owed = self.owed
        if owed is None or all(o > 0 for o in owed):
            return every
        return [i for i, o in enumerate(owed) if o > 0]

    def all_played(self) -> bool:
        """Whether every env played the episodes it owed (False while :attr:`owed` is None)."""
        return self.owed is not None and not any(o > 0 for o in self.owed)

    def new_episode(self, env_index: int, *, restored: bool = False) -> EpisodeTotals:
        """Fresh totals for env ``env_index`` (``restored``: of an episode restored mid-way)."""
        history = EpisodeHistory(multi_agent=self._multi_agent, limit=self._limit,
                                 restored=restored) if self.recording else None
        return EpisodeTotals(env_index, history)

    def restore(self, states: list[Mapping[str, Any]],
                agent_ids: Callable[[int], Mapping[str, Any]]) -> None:
        """The totals of the episodes in flight from a runner state (``agent_ids(i)``: env
        ``i``'s agents by name); their history starts empty, after the restore."""
        self.current = [EpisodeTotals.from_state(s, agent_ids(i), i,
                                                 self.new_episode(i, restored=True).history)
                        for i, s in enumerate(states)]

    def start(self, env_index: int) -> None:
        """The episode of env ``env_index`` began (its reset observations are recorded):
        ``on_episode_start``."""
        if self._start_hook:
            self._callbacks.on_episode_start(  # type: ignore[union-attr]
                episode=self.current[env_index], env_runner=self._runner)

    def restart_all(self) -> None:
        """Every environment starts a new episode (before a reset of them all; the sampler
        calls :meth:`start` for each once its reset is recorded)."""
        self.current = [self.new_episode(i) for i in range(len(self.current))]

    def step(self, env_index: int) -> None:
        """The episode of env ``env_index`` took a step: ``on_episode_step``."""
        if self.has_step_hook:
            self._callbacks.on_episode_step(  # type: ignore[union-attr]
                episode=self.current[env_index], env_runner=self._runner)

    def finish(self, env_index: int, policy_of: Callable[[Any], str]) -> None:
        """Record the episode of env ``env_index`` as completed and give the env new totals
        (the sampler records the reset, then calls :meth:`start`)."""
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
        if self.owed is not None:
            self.owed[env_index] -= 1
        self.current[env_index] = self.new_episode(env_index)

    def mark(self) -> tuple[int, int]:
        """Where the completed episodes stand now, for :meth:`forget_since`."""
        return len(self.completed), self.num_episodes

    def forget_since(self, mark: tuple[int, int]) -> None:
        """Forget the episodes completed since :meth:`mark` returned ``mark`` (a sample that
        raised is discarded whole: its episodes are neither reported nor counted)."""
        del self.completed[mark[0]:]
        self.num_episodes = mark[1]

    def take(self) -> list[dict[str, Any]]:
        """Return the completed episodes and forget them."""
        done, self.completed = self.completed, []
        return done


def _history_limit(callbacks: Any) -> int | None:
    """``callbacks.episode_history_steps``, checked (a positive int, or None: no limit)."""
    limit = getattr(callbacks, "episode_history_steps", None)
    if limit is None or (isinstance(limit, int) and not isinstance(limit, bool) and limit > 0):
        return limit
    raise ConfigError(f"{type(callbacks).__name__}.episode_history_steps={limit!r}: expected a "
                      "positive int (the steps of each episode kept for the episode getters) or None "
                      "(whole episodes).")
