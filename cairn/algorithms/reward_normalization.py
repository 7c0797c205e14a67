"""Reward normalisation: rewards divided by a running std of the discounted return.

This is Stable-Baselines3's ``VecNormalize(norm_reward=True)`` (itself from OpenAI baselines):
each environment keeps a running discounted return ``G = gamma * G + r`` (reset to 0 after
the step that ends an episode), a running variance of ``G`` over everything seen is updated
each step with every environment's ``G``, and the reward the learner sees is
``clip(r / sqrt(var + epsilon), -clip, clip)``. Only the learner's copy of the rewards is
scaled: episode returns reported by the env runners stay raw.

cairn applies it in the learner, to each sampled batch before GAE, instead of in an env
wrapper: the statistics then live in one place (the algorithm, one normaliser per policy),
are updated only by training (never by ``evaluate()``), are the same with local or remote env
runners, and are saved in the algorithm state (``extra``) for exact resume.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping
from typing import Any

import numpy as np

from cairn.errors import EnvError

__all__ = ["RunningMeanStd", "RewardNormalizer"]


class RunningMeanStd:
    """Running mean and variance of scalars, merged batch by batch (Chan et al.).

    Starts as SB3's ``RunningMeanStd(epsilon=1e-4)``: mean 0, variance 1, a prior count of
    ``1e-4``, so that the first batch decides the statistics almost alone.
    """

    def __init__(self, *, prior_count: float = 1e-4) -> None:
        self.mean, self.var, self.count = 0.0, 1.0, float(prior_count)

    def update(self, values: np.ndarray) -> None:
        """Merge a batch of values (float64) into the statistics."""
        n = values.shape[0]
        if n == 0:
            return
        batch_mean, batch_var = float(values.mean()), float(values.var())
        delta = batch_mean - self.mean
        total = self.count + n
        m2 = self.var * self.count + batch_var * n + delta * delta * self.count * n / total
        self.mean = self.mean + delta * n / total
        self.var = m2 / total
        self.count = total

    def get_state(self, *, copy: bool = True) -> dict[str, Any]:
        """Mean, variance and count (plain floats: JSON keeps them exactly)."""
        return {"mean": self.mean, "var": self.var, "count": self.count}

    def set_state(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`get_state`: a finite ``mean``, a finite ``var`` >= 0 and a finite
        ``count`` > 0 (it starts at the prior count), else ValueError naming the entry, with
        nothing changed."""
        values = {key: _real(state, key) for key in ("mean", "var", "count")}
        if values["var"] < 0:
            raise ValueError(f"Reward normaliser state: 'var'={values['var']!r} must be >= 0.")
        if values["count"] <= 0:
            raise ValueError(f"Reward normaliser state: 'count'={values['count']!r} must be > 0.")
        self.mean, self.var, self.count = values["mean"], values["var"], values["count"]


def _real(state: Mapping[str, Any], key: str) -> float:
    """``state[key]`` as a finite float, else ValueError naming it (a NaN or infinite statistic
    would scale every later reward to NaN or 0 without an error)."""
    value = state.get(key)
    if isinstance(value, bool) or not isinstance(value, (numbers.Real, np.floating, np.integer)) \
            or not math.isfinite(float(value)):
        raise ValueError(f"Reward normaliser state: {key!r}={value!r:.100} must be a finite number.")
    return float(value)


class RewardNormalizer:
    """Scales one policy's sampled rewards by the running std of their discounted return.

    Args:
        gamma: Discount of the running return (the algorithm's ``gamma``, as rl-zoo sets
            VecNormalize's).
        clip: Scaled rewards are clipped to ``[-clip, clip]``.
        epsilon: Added to the variance before the square root.

    >>> import numpy as np
    >>> norm = RewardNormalizer(gamma=0.99, clip=10.0)
    >>> rewards = np.full(8, -5.0, dtype=np.float32)
    >>> dones = np.zeros(8, dtype=bool)
    >>> streams = np.repeat([7, 9], 4)  # two envs, 4 steps each
    >>> scaled = norm.normalize(rewards, dones, streams)
    >>> bool(abs(scaled).max() < 5.0)
    True
    """

    def __init__(self, *, gamma: float, clip: float = 10.0, epsilon: float = 1e-8) -> None:
        self.gamma, self.clip, self.epsilon = float(gamma), float(clip), float(epsilon)
        self.stats = RunningMeanStd()
        #: The running discounted return of each trajectory (by stream ID) at the end of the
        #: last batch, for the trajectories that go on into the next one.
        self.returns: dict[int, float] = {}

    def _scale(self, rewards: np.ndarray) -> np.ndarray:
        scaled = rewards / np.sqrt(self.stats.var + self.epsilon)
        return np.clip(scaled, -self.clip, self.clip)

    def normalize(self, rewards: np.ndarray, dones: np.ndarray, streams: np.ndarray,
                  firsts: np.ndarray | None = None) -> np.ndarray:
        """The scaled rewards of one batch (float32); updates the statistics.

        ``dones`` marks the steps that end an episode (terminated or truncated); ``streams``
        names the trajectory of each row (the batch's ``streams`` column: the same ID from one
        batch to the next for one environment, or one agent in one environment), each
        trajectory's rows contiguous and in time order. A trajectory's running return carries
        over from the last batch that had rows of it; ``firsts`` (the batch's column, optional:
        the rows that are an episode's first step) starts it at 0, also where the episode before
        was cut without a done (its env reset after an error, a restarted runner, a restore that
        started the envs afresh), as VecNormalize's ``reset()`` zeroes it. When every trajectory
        of the batch has the same number of rows (single-agent sampling: one block per
        environment), the statistics are updated step by step with every environment's return,
        as VecNormalize does; otherwise (agents that acted unequally often) once with all of the
        batch's returns.

        A NaN or infinite reward is an :class:`~cairn.errors.EnvError`, raised before anything
        changes: merged, it would make the variance NaN, and so every later scaled reward.
        """
        finite = np.isfinite(rewards)
        if not finite.all():
            row = int(np.flatnonzero(~finite)[0])
            raise EnvError(
                f"Reward normalisation cannot scale a reward of {float(rewards[row])} (row {row} of "
                "the batch): one NaN or infinite reward would make its running variance NaN, and "
                "so every later reward of this policy. Fix: make the environment return finite "
                "rewards (clip or replace them in a reward wrapper).")
        starts_episode = (np.zeros(rewards.shape[0], dtype=bool) if firsts is None
                          else np.asarray(firsts, dtype=bool))
        n = rewards.shape[0]
        r = rewards.astype(np.float64)
        cuts = np.flatnonzero(streams[1:] != streams[:-1]) + 1
        starts = np.concatenate([[0], cuts]).astype(np.int64)
        lengths = np.diff(np.concatenate([starts, [n]]))
        ids = [int(streams[i]) for i in starts] if n else []
        g = np.array([self.returns.get(i, 0.0) for i in ids], dtype=np.float64)
        if n and (lengths == lengths[0]).all() and len(set(ids)) == len(ids):
            steps = int(lengths[0])
            r2, d2 = r.reshape(len(ids), steps), dones.reshape(len(ids), steps)
            f2 = starts_episode.reshape(len(ids), steps)
            out = np.empty_like(r2)
            for t in range(steps):
                g = np.where(f2[:, t], 0.0, g) * self.gamma + r2[:, t]
                self.stats.update(g)
                out[:, t] = self._scale(r2[:, t])
                g = np.where(d2[:, t], 0.0, g)
            self._carry(dict(zip(ids, g.tolist())))
            return out.reshape(n).astype(np.float32)
        running = np.empty(n, dtype=np.float64)
        ends: dict[int, float] = {}
        for k, (start, length) in enumerate(zip(starts.tolist(), lengths.tolist())):
            acc = float(g[k])
            for i in range(start, start + length):
                acc = (0.0 if starts_episode[i] else acc) * self.gamma + r[i]
                running[i] = acc
                if dones[i]:
                    acc = 0.0
            ends[ids[k]] = acc
        self._carry(ends)
        self.stats.update(running)
        return self._scale(r).astype(np.float32)

    def _carry(self, returns: dict[int, float]) -> None:
        """Keep ``returns``, the running returns of the batch's streams, and those of streams
        the batch had no row of whose episode is in flight (not 0): a turn-based player whose
        move was still pending, say, goes on in a later batch. Ended ones are dropped, so the
        dict holds no more than the trajectories in flight."""
        waiting = {k: v for k, v in self.returns.items() if v != 0.0 and k not in returns}
        self.returns = {**waiting, **returns}

    def get_state(self, *, copy: bool = True) -> dict[str, Any]:
        """Settings, statistics and the running returns by stream ID (as two arrays)."""
        return {"gamma": self.gamma, "clip": self.clip, "epsilon": self.epsilon,
                **self.stats.get_state(),
                "stream_ids": np.array(list(self.returns), dtype=np.int64),
                "returns": np.array(list(self.returns.values()), dtype=np.float64)}

    def set_state(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`get_state`; ``gamma`` and ``clip`` stay this normaliser's (the
        config's, which a restore may override)."""
        epsilon = _real(state, "epsilon")
        if epsilon <= 0:
            raise ValueError(f"Reward normaliser state: 'epsilon'={epsilon!r} must be > 0.")
        ids = np.asarray(state["stream_ids"], dtype=np.int64).reshape(-1)
        values = np.asarray(state["returns"], dtype=np.float64).reshape(-1)
        if ids.shape != values.shape or not np.isfinite(values).all():
            raise ValueError(
                f"Reward normaliser state: 'stream_ids' ({ids.size}) and 'returns' ({values.size}) "
                "must be as many, and the returns finite.")
        self.stats.set_state(state)  # checked before it changes anything
        self.epsilon = epsilon
        self.returns = dict(zip(ids.tolist(), values.tolist()))
