"""Action distributions: how a network's outputs become actions, log-probabilities and entropy.

Each distribution reads a flat ``inputs`` tensor of ``num_inputs`` columns produced by the
network, and works on *raw* actions (category indices, unclipped Gaussian samples). Turning raw
actions into what the environment accepts (adding a space's ``start``, clipping to a Box) is
``to_env``, a numpy function, so that exported models can repeat it exactly.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from torch.nn import functional as F

from cairn.numpy_acting import reduce_any, reduce_max, reduce_min, reduce_sum
from cairn.spaces import float32_bounds

__all__ = [
    "ActionDistribution",
    "Categorical",
    "MultiCategorical",
    "DiagGaussian",
    "distribution_for",
    "finite_std_rows",
    "float32_bounds",
]

_LOG_2PI_E = math.log(2 * math.pi * math.e)
_LOG_SQRT_2PI = 0.5 * math.log(2 * math.pi)
#: exp(88) = 1.65e38 is well inside float32 (max 3.40e38, reached at about 88.72) on any CPU.
_SURELY_FINITE_LOG_STD = 88.0
#: exp(-log_std) (a Gaussian's logp divides by the std) is as surely finite from -88.0 up.
_SURELY_FINITE_INVERSE_LOG_STD = -88.0


class ActionDistribution(ABC):
    """The stateless maths of one family of action distributions."""

    num_inputs: int
    raw_action_dtype: np.dtype[Any]
    raw_action_shape: tuple[int, ...]
    #: Whether every action drawn (:meth:`sample_numpy_and_logp`) or picked (:meth:`deterministic_numpy`,
    #: then :meth:`logp_numpy`) from float32 rows that passed :meth:`usable_rows` and
    #: :meth:`sampleable_rows` has a finite log-probability, proven for the distribution (the
    #: categoricals': docs/models.md): the acting path then checks neither :meth:`loggable_rows`
    #: nor the recorded logp (:func:`~cairn.policy.acting.check_action_logp`). False, the default,
    #: keeps both, the second after the draw (a Gaussian's sample itself may overflow).
    finite_logp: bool = False

    @abstractmethod
    def sample(self, inputs: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        """Draw one raw action per row of ``inputs``."""

    @abstractmethod
    def deterministic(self, inputs: torch.Tensor) -> torch.Tensor:
        """The greedy raw action per row: the mode (argmax, or the Gaussian mean)."""

    @abstractmethod
    def sample_numpy(self, inputs: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """:meth:`sample` in numpy, for the sampling loop (no tensor round trips)."""

    @abstractmethod
    def deterministic_numpy(self, inputs: np.ndarray) -> np.ndarray:
        """:meth:`deterministic` in numpy."""

    @abstractmethod
    def logp(self, inputs: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        """Log-probability of raw ``actions`` under ``inputs``, one value per row."""

    def logp_numpy(self, inputs: np.ndarray, actions: np.ndarray) -> np.ndarray:
        """:meth:`logp` for the sampling loop's numpy ``inputs`` and raw ``actions``: the
        behaviour log-probability stored with each sampled row (``action_logp``). Equal to
        :meth:`logp` up to float rounding (the built-in distributions do it in numpy, for speed;
        this default runs :meth:`logp` in torch)."""
        with torch.inference_mode():
            out = self.logp(torch.from_numpy(np.ascontiguousarray(inputs)),
                            torch.from_numpy(np.ascontiguousarray(actions)))
        return out.numpy().astype(np.float32, copy=False)

    def sample_numpy_and_logp(self, inputs: np.ndarray,
                              rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`sample_numpy` (the same draws from ``rng``, the same actions) and the samples'
        :meth:`logp_numpy`; the built-in distributions reuse the sampling's intermediate values,
        so that recording the behaviour logp costs the acting path a few numpy operations."""
        raw = self.sample_numpy(inputs, rng)
        return raw, self.logp_numpy(inputs, raw)

    @abstractmethod
    def entropy(self, inputs: torch.Tensor) -> torch.Tensor:
        """Entropy per row."""

    def usable_rows(self, inputs: np.ndarray) -> np.ndarray:
        """Per row of numpy ``inputs``, whether it defines a distribution to act from (bool
        ``[B]``): the acting path refuses the others rather than act on them
        (:class:`~cairn.errors.PolicyOutputError`). This default refuses rows holding a NaN."""
        return ~reduce_any(np.isnan(inputs), axis=-1)  # type: ignore[no-any-return]

    def sampleable_rows(self, inputs: np.ndarray) -> np.ndarray | None:
        """Per row of usable numpy ``inputs`` (:meth:`usable_rows`), whether a sample can be
        drawn from it in float32 (bool ``[B]``), or None when every row can (the usual case, and
        this default). The acting path refuses the others when it samples."""
        return None

    def loggable_rows(self, inputs: np.ndarray) -> np.ndarray | None:
        """Per row of usable numpy ``inputs`` (:meth:`usable_rows`), whether the actions it gives
        can have a finite log-probability in float32 (bool ``[B]``), or None when every row's can
        (the usual case, and this default): what can be decided before a draw. The acting path
        refuses the others where it records the logp, before anything is drawn."""
        return None

    @abstractmethod
    def to_env(self, raw_actions: np.ndarray) -> np.ndarray:
        """Raw actions (batch first) -> actions inside the environment's action space."""


def _sample_categorical(logits: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    # Inverse-CDF sampling: one uniform per row, cheaper than torch.multinomial for small
    # batches and driven by the policy's own generator so that runs are reproducible.
    # Action k where cdf[k - 1] <= u < cdf[k], u below the CDF's last entry (as in the numpy
    # draw): an action of probability 0 (a logit of -inf) has no such u and is never drawn.
    cdf = torch.softmax(logits, dim=-1).cumsum(dim=-1)
    u = torch.rand((logits.shape[0], 1), generator=generator, dtype=logits.dtype) * cdf[:, -1:]
    return (cdf <= u).sum(dim=-1).clamp_(max=logits.shape[-1] - 1)



def _categorical_cdf(logits: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(max [B, 1], unnormalised CDF [B, n])`` of each row's softmax."""
    top = reduce_max(logits, axis=-1, keepdims=True)
    return top, np.cumsum(np.exp(logits - top), axis=-1)


def _draw_from_cdf(cdf: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    u = rng.random((cdf.shape[0], 1), dtype=np.float32) * cdf[:, -1:]
    # The count of CDF entries at or below the draw, taken as int64 at once (no cast after the
    # sum): action k where cdf[k - 1] <= u < cdf[k]. u is below the last entry, and an action of
    # probability 0 (a logit of -inf) has an empty interval, so it is never drawn, not even by
    # u = 0 (which "below the draw" gave action 0 whatever its probability).
    return np.minimum(reduce_sum(cdf <= u, axis=-1, dtype=np.int64), cdf.shape[-1] - 1)


def _sample_categorical_numpy(logits: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    return _draw_from_cdf(_categorical_cdf(logits)[1], rng)


def _sample_categorical_numpy_and_logp(logits: np.ndarray,
                                       rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    # The same draw as _sample_categorical_numpy; the CDF's last entry is the softmax's
    # normaliser, so the sample's log-probability costs a gather and a log more.
    top, cdf = _categorical_cdf(logits)
    raw = _draw_from_cdf(cdf, rng)
    logp = logits[np.arange(len(raw)), raw] - top[:, 0] - np.log(cdf[:, -1])
    return raw, logp.astype(np.float32, copy=False)


def _categorical_logp_numpy(logits: np.ndarray, actions: np.ndarray) -> np.ndarray:
    # log_softmax as torch computes it (x - max - log(sum(exp(x - max)))), in float32: a masked
    # action's score (MASKED_SCORE) underflows to exactly 0 probability, as in the loss.
    top = logits.max(axis=-1, keepdims=True)
    log_norm = np.log(np.exp(logits - top).sum(axis=-1))
    chosen = logits[np.arange(len(actions)), actions.astype(np.int64, copy=False)]
    return (chosen - top[:, 0] - log_norm).astype(np.float32, copy=False)


def _categorical_entropy(logits: torch.Tensor) -> torch.Tensor:
    # A logit of -inf (an impossible action in a user's network) would make 0 * log 0 a NaN, and
    # NaN the loss and every weight after its backward pass; at the lowest finite float it adds
    # 0 and gets no gradient, as in torch.distributions.Categorical. Finite logits are unchanged.
    logits = logits.clamp(min=torch.finfo(logits.dtype).min)
    logp = F.log_softmax(logits, dim=-1)
    return -(logp.exp() * logp).sum(dim=-1)


class Categorical(ActionDistribution):
    """One categorical over ``n`` choices, for a Discrete space."""

    # A drawn action has exp(logit - max) > 0 (an empty CDF interval is never drawn), so its
    # logit - max is finite (above about -104), and the argmax's is 0; the normaliser's log lies
    # in [0, log n]: docs/models.md, "Finite log-probabilities".
    finite_logp = True

    def __init__(self, space: gym.spaces.Discrete) -> None:
        self.num_inputs = int(space.n)
        self.start = int(space.start)
        self.raw_action_dtype = np.dtype(np.int64)
        self.raw_action_shape = ()

    def sample(self, inputs: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        return _sample_categorical(inputs, generator)

    def deterministic(self, inputs: torch.Tensor) -> torch.Tensor:
        return inputs.argmax(dim=-1)

    def sample_numpy(self, inputs: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        return _sample_categorical_numpy(inputs, rng)

    def deterministic_numpy(self, inputs: np.ndarray) -> np.ndarray:
        return inputs.argmax(axis=-1)

    def logp(self, inputs: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        return F.log_softmax(inputs, dim=-1).gather(-1, actions.long().unsqueeze(-1)).squeeze(-1)

    def logp_numpy(self, inputs: np.ndarray, actions: np.ndarray) -> np.ndarray:
        return _categorical_logp_numpy(inputs, actions)

    def sample_numpy_and_logp(self, inputs: np.ndarray,
                              rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        return _sample_categorical_numpy_and_logp(inputs, rng)

    def entropy(self, inputs: torch.Tensor) -> torch.Tensor:
        return _categorical_entropy(inputs)

    def usable_rows(self, inputs: np.ndarray) -> np.ndarray:
        # A row's maximum is NaN if it holds a NaN, +inf if it holds +inf (softmax: NaN) and
        # -inf if every logit is (no possible action); -inf beside finite logits is usable.
        return np.isfinite(reduce_max(inputs, axis=-1))  # type: ignore[no-any-return]

    def to_env(self, raw_actions: np.ndarray) -> np.ndarray:
        return raw_actions + self.start if self.start else raw_actions


class MultiCategorical(ActionDistribution):
    """Independent categoricals, one per MultiDiscrete component."""

    # Each part as Categorical's, above about -104 - log(n): their float32 sum cannot overflow.
    finite_logp = True

    def __init__(self, space: gym.spaces.MultiDiscrete) -> None:
        self.nvec = [int(n) for n in space.nvec.reshape(-1)]
        self.start = space.start.reshape(-1).astype(np.int64)
        self.shape = tuple(space.shape)
        self.env_dtype = space.dtype
        self.num_inputs = sum(self.nvec)
        self.raw_action_dtype = np.dtype(np.int64)
        self.raw_action_shape = (len(self.nvec),)
        self._starts = np.cumsum([0, *self.nvec[:-1]])  # each sub-action's first column

    def _split(self, inputs: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return torch.split(inputs, self.nvec, dim=-1)

    def sample(self, inputs: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        return torch.stack([_sample_categorical(x, generator) for x in self._split(inputs)], -1)

    def deterministic(self, inputs: torch.Tensor) -> torch.Tensor:
        return torch.stack([x.argmax(dim=-1) for x in self._split(inputs)], dim=-1)

    def _split_numpy(self, inputs: np.ndarray) -> list[np.ndarray]:
        return np.split(inputs, np.cumsum(self.nvec)[:-1], axis=-1)

    def sample_numpy(self, inputs: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        return np.stack([_sample_categorical_numpy(x, rng) for x in self._split_numpy(inputs)], -1)

    def deterministic_numpy(self, inputs: np.ndarray) -> np.ndarray:
        return np.stack([x.argmax(axis=-1) for x in self._split_numpy(inputs)], axis=-1)

    def logp(self, inputs: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        parts = [
            F.log_softmax(x, dim=-1).gather(-1, actions[:, i : i + 1].long()).squeeze(-1)
            for i, x in enumerate(self._split(inputs))
        ]
        return torch.stack(parts, dim=-1).sum(dim=-1)

    def logp_numpy(self, inputs: np.ndarray, actions: np.ndarray) -> np.ndarray:
        parts = [_categorical_logp_numpy(x, actions[:, i]) for i, x in enumerate(self._split_numpy(inputs))]
        return np.stack(parts, axis=-1).sum(axis=-1, dtype=np.float32)

    def sample_numpy_and_logp(self, inputs: np.ndarray,
                              rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        parts = [_sample_categorical_numpy_and_logp(x, rng) for x in self._split_numpy(inputs)]
        return (np.stack([raw for raw, _ in parts], -1),
                np.stack([lp for _, lp in parts], axis=-1).sum(axis=-1, dtype=np.float32))

    def entropy(self, inputs: torch.Tensor) -> torch.Tensor:
        return torch.stack([_categorical_entropy(x) for x in self._split(inputs)], -1).sum(-1)

    def usable_rows(self, inputs: np.ndarray) -> np.ndarray:
        # Categorical.usable_rows for each sub-action's logits (their maxima in one reduction).
        tops = np.maximum.reduceat(inputs, self._starts, axis=-1) if inputs.shape[0] else inputs[:, :0]
        return np.logical_and.reduce(np.isfinite(tops), axis=-1)  # type: ignore[no-any-return]

    def to_env(self, raw_actions: np.ndarray) -> np.ndarray:
        out = raw_actions + self.start
        return out.reshape((raw_actions.shape[0], *self.shape)).astype(self.env_dtype, copy=False)


class DiagGaussian(ActionDistribution):
    """A diagonal Gaussian for a Box space; inputs are ``[mean, log_std]`` concatenated.

    Samples are unbounded; ``to_env`` clips them to the Box, while log-probabilities are taken
    of the unclipped sample, as in Stable-Baselines3 and RLlib.
    """

    def __init__(self, space: gym.spaces.Box) -> None:
        self.size = int(np.prod(space.shape))
        self.shape = tuple(space.shape)
        self.low, self.high = float32_bounds(space)
        self.env_dtype = space.dtype
        self.num_inputs = 2 * self.size
        self.raw_action_dtype = np.dtype(np.float32)
        self.raw_action_shape = (self.size,)

    def sample(self, inputs: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        mean, log_std = inputs.chunk(2, dim=-1)
        noise = torch.randn(mean.shape, generator=generator, dtype=mean.dtype)
        return mean + log_std.exp() * noise

    def deterministic(self, inputs: torch.Tensor) -> torch.Tensor:
        return inputs[..., : self.size]

    def sample_numpy(self, inputs: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        mean, log_std = inputs[:, : self.size], inputs[:, self.size :]
        noise = rng.standard_normal(mean.shape, dtype=np.float32)
        return (mean + np.exp(log_std) * noise).astype(np.float32, copy=False)

    def deterministic_numpy(self, inputs: np.ndarray) -> np.ndarray:
        return np.ascontiguousarray(inputs[:, : self.size], dtype=np.float32)

    def logp(self, inputs: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        mean, log_std = inputs.chunk(2, dim=-1)
        z = (actions - mean) * torch.exp(-log_std)
        return (-0.5 * z.pow(2) - log_std - _LOG_SQRT_2PI).sum(dim=-1)

    def logp_numpy(self, inputs: np.ndarray, actions: np.ndarray) -> np.ndarray:
        mean, log_std = inputs[:, : self.size], inputs[:, self.size :]
        z = (actions - mean) * np.exp(-log_std)
        logp = (-0.5 * z * z - log_std - np.float32(_LOG_SQRT_2PI)).sum(axis=-1, dtype=np.float32)
        return logp  # type: ignore[no-any-return]

    # sample_numpy_and_logp: the base class's. The logp is taken of the stored float32 sample, as
    # the learner takes it; the noise itself differs from (raw - mean) / std by float32 rounding,
    # which a large std makes visible.

    def entropy(self, inputs: torch.Tensor) -> torch.Tensor:
        log_std = inputs[..., self.size :]
        return (log_std + 0.5 * _LOG_2PI_E).sum(dim=-1)

    def usable_rows(self, inputs: np.ndarray) -> np.ndarray:
        # An infinite mean or log-std makes the sample (or its logp) inf or NaN.
        return np.logical_and.reduce(np.isfinite(inputs), axis=-1)  # type: ignore[no-any-return]

    def sampleable_rows(self, inputs: np.ndarray) -> np.ndarray | None:
        return finite_std_rows(inputs[:, self.size:])

    def loggable_rows(self, inputs: np.ndarray) -> np.ndarray | None:
        # The logp multiplies by exp(-log_std): infinite from a log-std of about -88.7 down, where
        # every action's logp is NaN (the mean: 0 * inf) or -inf, whatever the draw.
        log_std = inputs[:, self.size:]
        if not log_std.size or reduce_min(log_std, axis=None) > _SURELY_FINITE_INVERSE_LOG_STD:
            return None
        with np.errstate(over="ignore"):  # the exact check, rare: exp itself decides
            return np.logical_and.reduce(np.isfinite(np.exp(-log_std)), axis=-1)  # type: ignore[no-any-return]

    def to_env(self, raw_actions: np.ndarray) -> np.ndarray:
        clipped = np.clip(raw_actions, self.low, self.high)
        return clipped.reshape((raw_actions.shape[0], *self.shape)).astype(self.env_dtype)


def finite_std_rows(log_std: np.ndarray) -> np.ndarray | None:
    """Per row of a Gaussian's finite ``log_std`` (``[B, k]``), whether every ``exp(log_std)``
    is finite in float32 (it is not from about 88.7 on), or None when all are: one scalar
    reduction on the usual path. An infinite std (a diverged network) draws infinite or NaN
    samples, clipped to a bound of the Box (or squashed to one), with a log-probability of
    ``-inf``: a sample from no distribution."""
    if not log_std.size or reduce_max(log_std, axis=None) < _SURELY_FINITE_LOG_STD:
        return None
    with np.errstate(over="ignore"):  # the exact check, rare: exp itself decides
        return np.logical_and.reduce(np.isfinite(np.exp(log_std)), axis=-1)  # type: ignore[no-any-return]


def distribution_for(space: gym.Space[Any]) -> ActionDistribution:
    """The distribution cairn uses for an action space."""
    if isinstance(space, gym.spaces.Discrete):
        return Categorical(space)
    if isinstance(space, gym.spaces.MultiDiscrete):
        return MultiCategorical(space)
    if isinstance(space, gym.spaces.Box):
        return DiagGaussian(space)
    raise ValueError(
        f"Unsupported action space {space!r}: use Discrete, MultiDiscrete or Box."
    )
