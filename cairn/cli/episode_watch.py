"""What ``cairn evaluate`` adds around each evaluation env: ``--max-episode-steps`` and one
progress line per finished episode (on stderr; ``-q`` hides them).

An evaluation can take long without a sign of life: a weak greedy Atari policy plays until
ALE's time limit (108,000 frames, 27,000 agent steps) in every episode. The evaluation runner
plays whole episodes and reports only at the end, so cairn evaluate wraps the envs it makes:
the wrapper ends an episode after ``max_steps`` steps (truncated, as a time limit does) and
calls back when an episode ends. Its return and length are the env's rewards and steps, the
same numbers the runner sums into the report.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any, TextIO

import gymnasium as gym
from pettingzoo.utils import BaseParallelWrapper, BaseWrapper

from cairn.env_runner.make_env import is_turn_based_env

__all__ = ["EpisodeWatch", "stderr_unless"]


class EpisodeWatch:
    """Counts the episodes an evaluation finishes and prints a line for each of the first
    ``total`` (the runner stops at the step that ends the ``total``-th, and no other episode ends:
    ``EnvRunner.run_episodes``; an extra one would get no line).

    Args:
        total: Episodes the evaluation reports.
        max_steps: Truncate each episode after this many steps (None: the env's own limit).
        stream: Where the lines go (None: nowhere, for ``-q``).
    """

    def __init__(self, *, total: int, max_steps: int | None, stream: TextIO | None) -> None:
        self.total, self.max_steps, self.stream = total, max_steps, stream
        self.finished = 0
        self._started = time.perf_counter()

    def creator(self, make: Callable[[], Any]) -> Callable[[dict[str, Any]], Any]:
        """An env creator (``creator(env_config) -> env``) that wraps what ``make()`` returns;
        ``make`` creates the evaluation's env as its config says (env_config included)."""

        def create(env_config: dict[str, Any]) -> Any:
            env = make()
            if isinstance(env, gym.Env):
                return _WatchedEnv(env, self)
            if is_turn_based_env(env):
                return _WatchedTurnBasedEnv(env, self)
            return _WatchedParallelEnv(env, self)

        return create

    def episode_ended(self, episode_return: float, length: int, *, cut: bool) -> None:
        """One episode ended with this return and length (``cut``: by ``max_steps``)."""
        self.finished += 1
        if self.stream is None or self.finished > self.total:
            return
        now = time.perf_counter()
        width = len(str(self.total))
        note = f" | truncated at --max-episode-steps {self.max_steps}" if cut else ""
        print(f"episode {self.finished:>{width}}/{self.total} | return {episode_return:10.2f} | "
              f"length {length:7d} | {now - self._started:.2f}s{note}", file=self.stream, flush=True)
        self._started = now


def stderr_unless(quiet: bool) -> TextIO | None:
    """Where progress goes: stderr, or nowhere with ``-q`` (stdout carries the report)."""
    return None if quiet else sys.stderr


class _WatchedEnv(gym.Wrapper):  # type: ignore[type-arg]
    """A Gymnasium env whose episodes end after ``watch.max_steps`` and are reported."""

    def __init__(self, env: gym.Env[Any, Any], watch: EpisodeWatch) -> None:
        super().__init__(env)
        self._watch, self._steps, self._return = watch, 0, 0.0

    def reset(self, **kwargs: Any) -> tuple[Any, dict[str, Any]]:
        self._steps, self._return = 0, 0.0
        return self.env.reset(**kwargs)

    def step(self, action: Any) -> tuple[Any, Any, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        self._steps += 1
        self._return += float(reward)
        limit = self._watch.max_steps
        cut = limit is not None and self._steps >= limit and not (terminated or truncated)
        if terminated or truncated or cut:
            self._watch.episode_ended(self._return, self._steps, cut=cut)
        return obs, reward, terminated, bool(truncated or cut), info


class _Tally:
    """One multi-agent episode as the watch reports it: moves, every agent's rewards summed (as
    the runner's return), and whether ``--max-episode-steps`` cut it."""

    def __init__(self, watch: EpisodeWatch) -> None:
        self.watch = watch
        self.restart()

    def restart(self) -> None:
        self.steps, self.ret, self.cut = 0, 0.0, False

    def record(self, rewards: dict[Any, Any], *, moved: bool, live_agents: list[Any]) -> bool:
        """Count one step; True when it reaches ``max_steps`` with agents still in the episode
        (the wrapper then ends it for them)."""
        self.steps += int(moved)
        self.ret += sum(float(r) for r in rewards.values())
        limit = self.watch.max_steps
        if limit is not None and self.steps >= limit and live_agents and not self.cut:
            self.cut = True
            return True
        return False

    def end(self) -> None:
        self.watch.episode_ended(self.ret, self.steps, cut=self.cut)


class _WatchedParallelEnv(BaseParallelWrapper):  # type: ignore[misc]
    """A PettingZoo ParallelEnv whose episodes end after ``watch.max_steps`` (every agent still
    in it truncated) and are reported."""

    def __init__(self, env: Any, watch: EpisodeWatch) -> None:
        super().__init__(env)
        self._tally = _Tally(watch)

    @property
    def agents(self) -> list[Any]:  # type: ignore[override]
        return [] if self._tally.cut else list(self.env.agents)

    def reset(self, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, Any]:
        self._tally.restart()
        return self.env.reset(seed=seed, options=options)

    def step(self, actions: dict[Any, Any]) -> tuple[Any, ...]:
        obs, rewards, terminated, truncated, infos = self.env.step(actions)
        if self._tally.record(rewards, moved=True, live_agents=list(self.env.agents)):
            truncated = {**truncated, **dict.fromkeys(self.env.agents, True)}
        if not self.agents:
            self._tally.end()
        return obs, rewards, terminated, truncated, infos


class _WatchedTurnBasedEnv(BaseWrapper):  # type: ignore[misc]
    """A PettingZoo AECEnv (agents take turns) whose episodes end after ``watch.max_steps``
    moves (the runner then sees no agent left, and truncates the moves in flight) and are
    reported."""

    def __init__(self, env: Any, watch: EpisodeWatch) -> None:
        super().__init__(env)
        self._tally = _Tally(watch)

    @property
    def agents(self) -> list[Any]:  # type: ignore[override]
        return [] if self._tally.cut else list(self.env.agents)

    def reset(self, seed: int | None = None, options: dict[str, Any] | None = None) -> None:
        self._tally.restart()
        self.env.reset(seed=seed, options=options)

    def step(self, action: Any) -> None:
        was_over = not self.agents
        self.env.step(action)
        self._tally.record(self.env.rewards, moved=action is not None, live_agents=list(self.env.agents))
        if not self.agents and not was_over:
            self._tally.end()
