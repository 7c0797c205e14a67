"""Action masking: observations that say which discrete actions are legal.

An observation space that is a ``Dict`` with an ``"action_mask"`` key (PettingZoo's classic-game
convention, ``{"observation": ..., "action_mask": ...}``), for a ``Discrete`` or
``MultiDiscrete`` action space, makes a policy mask its actions without any flag
(docs/models.md, "Action masking"):

* the network reads the observation without the mask (:func:`network_observation_space`);
* each processed row is ``[network input | mask]``; the policy's model is the user's or the
  built-in network wrapped in :class:`MaskedActorCritic` / :class:`MaskedQModel`, which split
  the row and give every illegal action the score :data:`MASKED_SCORE` (``-inf`` in a row whose
  legal scores reach down to it, :func:`mask_scores`). Everything that calls
  the model (acting, PPO's loss, DQN's targets, exports) therefore sees masked logits or
  Q-values: a softmax gives illegal actions probability exactly 0, entropies and
  log-probabilities run over the legal actions, argmax and max pick legal actions; DQN's
  targets also read the next rows' masks (:func:`legal_action_table`), so that a next state
  with no legal action bootstraps nothing;
* :func:`check_masks` refuses a row with no legal action (:class:`~cairn.errors.ActionMaskError`)
  where the policy must act, :func:`legal_actions` guarantees sampled actions are legal, and
  :func:`random_legal_actions` draws DQN's epsilon-random actions among legal ones only.

With a ``Box`` action space the key is an ordinary part of the observation.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from cairn.errors import ActionMaskError, ConfigError, ObservationSpaceError, PolicyOutputError
from cairn.numpy_acting import in_torch, reduce_any, reduce_max, reduce_min, reduce_sum
from cairn.policy.filters import MeanStdFilter, NoFilter
from cairn.spaces import ObservationPreprocessor

__all__ = [
    "legal_argmax",
    "check_legal_scores",
    "ACTION_MASK_KEY",
    "MASKED_SCORE",
    "LOWEST_PLAIN_LEGAL_SCORE",
    "action_mask_size",
    "network_observation_space",
    "network_observations",
    "MaskedObservationPreprocessor",
    "make_preprocessor",
    "filter_features",
    "action_sizes",
    "checked_masks",
    "legal_action_table",
    "MaskedActorCritic",
    "MaskedQModel",
    "mask_scores",
    "check_masks",
    "legal_actions",
    "random_legal_actions",
]

ACTION_MASK_KEY = "action_mask"
#: The score (logit, Q-value) of an illegal action: finite, so that ``0 * log p`` stays 0 and
#: no NaN appears, and low enough that ``exp(MASKED_SCORE - max)`` is exactly 0 in float32.
#: A row with a legal score at or below :data:`LOWEST_PLAIN_LEGAL_SCORE` gives its illegal
#: actions ``-inf`` instead (:func:`mask_scores`).
MASKED_SCORE = -1e9
#: While every legal score of a row lies above this (``MASKED_SCORE + 1024``), ``MASKED_SCORE``
#: is more than 1024 below each of them and ``exp(MASKED_SCORE - s)`` is exactly 0 even in
#: float64: illegal actions get MASKED_SCORE. Below it, MASKED_SCORE could match or beat a legal
#: score (an illegal action would take the probability, and the greedy choice), so illegal
#: actions get ``-inf`` instead: probability 0 beside any finite legal score, as a user's
#: network's ``-inf`` logit (the entropy clamps it; log-probabilities are read at legal actions).
LOWEST_PLAIN_LEGAL_SCORE = MASKED_SCORE + 1024.0


def action_sizes(action_space: gym.Space[Any]) -> tuple[int, ...]:
    """The number of choices of each discrete (sub-)action, in mask order; ``()`` for a space
    that is not Discrete or MultiDiscrete (nothing to mask)."""
    if isinstance(action_space, gym.spaces.Discrete):
        return (int(action_space.n),)
    if isinstance(action_space, gym.spaces.MultiDiscrete):
        return tuple(int(n) for n in action_space.nvec.reshape(-1))
    return ()


def action_mask_size(observation_space: gym.Space[Any], action_space: gym.Space[Any]) -> int:
    """The number of mask entries a policy with these spaces reads (0: no masking).

    Raises ConfigError when the ``"action_mask"`` part does not fit the action space (a
    Box or MultiBinary of ``n`` entries for ``Discrete(n)``, ``sum(nvec)`` for MultiDiscrete).
    """
    if not (isinstance(observation_space, gym.spaces.Dict) and ACTION_MASK_KEY in observation_space.spaces):
        return 0
    sizes = action_sizes(action_space)
    if not sizes:
        return 0  # continuous actions: "action_mask" is an ordinary observation part
    mask_space = observation_space[ACTION_MASK_KEY]
    expected = sum(sizes)
    if not isinstance(mask_space, (gym.spaces.Box, gym.spaces.MultiBinary)) or \
            int(np.prod(mask_space.shape)) != expected:
        raise ConfigError(
            f"The observation space's {ACTION_MASK_KEY!r} part is {mask_space}, which does not fit "
            f"the action space {action_space}: expected a Box or MultiBinary of {expected} entries "
            "(one per action; for MultiDiscrete one per choice of every sub-action, concatenated). "
            "Fix the environment's observation space, or rename the key if it is not an action mask."
        )
    if len(observation_space.spaces) == 1:
        raise ConfigError(
            f"The observation space {observation_space} holds only {ACTION_MASK_KEY!r}: the "
            "network would have nothing to read. Add the observation itself (PettingZoo's "
            "convention: {'observation': ..., 'action_mask': ...})."
        )
    return expected


def network_observation_space(observation_space: gym.Space[Any]) -> gym.Space[Any]:
    """What the network of a masked policy reads: the Dict without ``"action_mask"``, or its
    ``"observation"`` part when that is all that is left (PettingZoo's classic games)."""
    assert isinstance(observation_space, gym.spaces.Dict)
    rest = {k: s for k, s in observation_space.spaces.items() if k != ACTION_MASK_KEY}
    if _reads_observation_part(observation_space):
        return rest["observation"]
    return gym.spaces.Dict(rest)


def _reads_observation_part(observation_space: gym.spaces.Dict) -> bool:
    """Whether the network reads the ``"observation"`` entry alone (the only key beside the mask)."""
    return [k for k in observation_space.spaces if k != ACTION_MASK_KEY] == ["observation"]


def network_observations(observation_space: gym.spaces.Dict, batch: Sequence[Any] | np.ndarray) -> list[Any]:
    """The part of each masked observation in ``batch`` that the network reads, an observation
    of :func:`network_observation_space`: its ``"observation"`` entry when that is the only
    key beside the mask (whatever its space, a Dict included), else the observation without the
    mask. Raises KeyError or TypeError for observations without those keys."""
    if _reads_observation_part(observation_space):
        return [o["observation"] for o in batch]
    keys = [k for k in observation_space.spaces if k != ACTION_MASK_KEY]
    return [{k: o[k] for k in keys} for o in batch]


class MaskedObservationPreprocessor:
    """Raw Dict observations -> float32 rows ``[network input (size) | mask (mask_size)]``.

    The network input is the :class:`~cairn.spaces.ObservationPreprocessor` row of
    :func:`network_observation_space`; the mask is the ``"action_mask"`` entry, flattened.
    """

    def __init__(self, space: gym.spaces.Dict, mask_size: int) -> None:
        self.space = space
        self.network_space = network_observation_space(space)
        self._inner = ObservationPreprocessor(self.network_space)
        self.kind = self._inner.kind
        self.size = self._inner.size
        self.mask_size = mask_size
        self.row_size = self.size + mask_size

    def __call__(self, batch: Sequence[Any] | np.ndarray) -> np.ndarray:
        """``batch`` of Dict observations -> ``float32 [len(batch), row_size]``."""
        try:
            parts = network_observations(self.space, batch)
            masks = [np.asarray(o[ACTION_MASK_KEY], dtype=np.float32).reshape(-1) for o in batch]
        except (KeyError, TypeError, IndexError) as exc:
            raise ObservationSpaceError(
                f"Observations for the observation space {self.space} must be dicts with its keys "
                f"{list(self.space.spaces)} ({type(exc).__name__}: {exc}). Fix: pass observations "
                "of this space (compute_single_action takes one, compute_actions a batch)."
            ) from exc
        features = self._inner(parts)
        if any(m.shape != (self.mask_size,) for m in masks):
            bad = next(m.shape for m in masks if m.shape != (self.mask_size,))
            raise ObservationSpaceError(
                f"An observation's {ACTION_MASK_KEY!r} has {bad[0]} entries; the observation "
                f"space {self.space} says {self.mask_size}. Fix the environment's masks."
            )
        out = np.empty((features.shape[0], self.row_size), dtype=np.float32)
        out[:, : self.size] = features
        if masks:
            out[:, self.size:] = np.stack(masks)
        return out


def make_preprocessor(observation_space: gym.Space[Any], action_space: gym.Space[Any],
                      ) -> ObservationPreprocessor | MaskedObservationPreprocessor:
    """The preprocessor of a policy with these spaces: masked when the observation has an
    action mask for this action space (then ``mask_size > 0``). Both kinds say ``size`` (the
    network's input), ``mask_size`` and ``network_space`` (what the network reads)."""
    mask_size = action_mask_size(observation_space, action_space)
    if mask_size:
        return MaskedObservationPreprocessor(observation_space, mask_size)  # type: ignore[arg-type]
    return ObservationPreprocessor(observation_space)


def filter_features(rows: np.ndarray, obs_filter: NoFilter | MeanStdFilter, size: int, *,
                    update: bool) -> np.ndarray:
    """Masked rows with ``obs_filter`` applied to (and, with ``update``, fed) their first
    ``size`` columns only; the mask is left as it is. Changes ``rows`` in place."""
    features = rows[:, :size]
    if update:
        obs_filter.update(features)
    if obs_filter.name != "NoFilter":
        rows[:, :size] = obs_filter.apply(features)
    return rows


def checked_masks(rows: np.ndarray, size: int, sizes: Sequence[int]) -> np.ndarray:
    """The masks of processed rows (their columns from ``size`` on), after :func:`check_masks`."""
    mask = rows[:, size:]
    check_masks(mask, sizes)
    return mask


def legal_action_table(rows: np.ndarray, size: int) -> np.ndarray:
    """Which actions the masks of processed rows (their columns from ``size`` on) allow,
    ``[B, mask_size]`` bool. Unlike :func:`checked_masks` it accepts a row with no legal action:
    for a state nobody acts on (a next state in a DQN target), that is data, not an error."""
    return rows[:, size:] > 0.5


def mask_scores(scores: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``scores`` where ``mask`` is set, an illegal score elsewhere (no gradient there): :data:`MASKED_SCORE`,
    or ``-inf`` in a row with a legal score at or below :data:`LOWEST_PLAIN_LEGAL_SCORE`
    (at ``-5e9`` MASKED_SCORE would outrank the legal actions: all the probability, the entropy
    of the illegal ones, a log-probability of ``-4e9`` for a legal action that is certain).
    Every comparison stays in tensors (no host sync, the same graph when exported)."""
    legal = mask > 0.5  # a NaN entry is illegal, as everywhere
    lowest_legal = torch.where(legal, scores, torch.inf).amin(dim=-1, keepdim=True)
    fill = torch.where(lowest_legal > LOWEST_PLAIN_LEGAL_SCORE, MASKED_SCORE, -torch.inf)
    return torch.where(legal, scores, fill.to(scores.dtype))


_MASKED_SCORE32 = np.float32(MASKED_SCORE)


def _mask_scores_numpy(scores: np.ndarray, mask: np.ndarray) -> np.ndarray:
    scores = scores.astype(np.float32, copy=False)
    legal = mask > 0.5
    if scores.size == 0 or reduce_min(scores, axis=None) > LOWEST_PLAIN_LEGAL_SCORE:  # the usual path
        return np.where(legal, scores, _MASKED_SCORE32)
    lowest_legal = reduce_min(np.where(legal, scores, np.float32(np.inf)), axis=-1, keepdims=True)
    fill = np.where(lowest_legal > LOWEST_PLAIN_LEGAL_SCORE, _MASKED_SCORE32, np.float32(-np.inf))
    return np.where(legal, scores, fill)


class _MaskedModel(nn.Module):
    """A network that reads the first ``feature_size`` columns of a row, whose outputs are
    masked by the rest. The network is ``net`` (its parameters are ``net.*``); a network
    whose class sets ``receives_action_mask = True`` also gets the mask as a second argument."""

    net: Any  # the user's or the built-in network, with its own methods

    def __init__(self, net: nn.Module, feature_size: int) -> None:
        super().__init__()
        self.net = net
        self.feature_size = int(feature_size)
        self.passes_mask = bool(getattr(net, "receives_action_mask", False))

    def split(self, rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(features, mask)`` of processed rows."""
        return rows[:, : self.feature_size].contiguous(), rows[:, self.feature_size:]

    def extra(self, mask: torch.Tensor) -> tuple[torch.Tensor, ...]:
        # A copy: the network may write into its mask (``mask.sub_(1).mul_(1e4)``, a penalty),
        # and ``mask`` is what its outputs are masked with after it.
        return (mask.clone(),) if self.passes_mask else ()

    def numpy_outputs(self, net: nn.Module, method: str, masked_torch: Callable[[torch.Tensor], torch.Tensor],
                      rows: np.ndarray) -> np.ndarray:
        """Masked outputs for ``rows``: ``net``'s numpy ``method``, else ``masked_torch`` in torch."""
        fast = getattr(net, method, None)
        if fast is None or self.passes_mask:
            return in_torch(masked_torch, rows, net)
        features = np.ascontiguousarray(rows[:, : self.feature_size])
        return _mask_scores_numpy(fast(features), rows[:, self.feature_size:])

    def reset_parameters(self, generator: torch.Generator) -> None:
        reset = getattr(self.net, "reset_parameters", None)
        if reset is not None:
            reset(generator)


class MaskedActorCritic(_MaskedModel):
    """``forward(rows) -> (masked action inputs, value)`` around an actor-critic network."""

    def forward(self, rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        features, mask = self.split(rows)
        inputs, value = self.net(features, *self.extra(mask))
        return mask_scores(inputs, mask), value

    def action_inputs(self, rows: torch.Tensor) -> torch.Tensor:
        features, mask = self.split(rows)
        return mask_scores(self.net.action_inputs(features, *self.extra(mask)), mask)

    def value(self, rows: torch.Tensor) -> torch.Tensor:
        features, mask = self.split(rows)
        return self.net.value(features, *self.extra(mask))  # type: ignore[no-any-return]

    def numpy_action_inputs(self, rows: np.ndarray) -> np.ndarray:
        return self.numpy_outputs(self.net, "numpy_action_inputs", self.action_inputs, rows)


class MaskedQModel(_MaskedModel):
    """``forward(rows) -> masked Q-values`` around a Q-network."""

    def forward(self, rows: torch.Tensor) -> torch.Tensor:
        features, mask = self.split(rows)
        return mask_scores(self.net(features, *self.extra(mask)), mask)

    def numpy_q_values(self, rows: np.ndarray) -> np.ndarray:
        return self.numpy_outputs(self.net, "numpy_q_values", self, rows)


def _segments(mask: np.ndarray, sizes: Sequence[int]) -> list[np.ndarray]:
    return np.split(mask, np.cumsum(sizes)[:-1], axis=1) if len(sizes) > 1 else [mask]


def check_masks(mask: np.ndarray, sizes: Sequence[int]) -> None:
    """Raise :class:`~cairn.errors.ActionMaskError` when a row of ``mask`` (``[B, sum(sizes)]``)
    leaves some (sub-)action without a legal choice."""
    segments = _segments(mask, sizes)
    legal = reduce_any(segments[0] > 0.5, axis=1)  # per row: whether each (sub-)action has a legal choice
    for segment in segments[1:]:
        legal &= reduce_any(segment > 0.5, axis=1)
    if not np.logical_and.reduce(legal):
        rows = tuple(int(i) for i in np.flatnonzero(~legal))
        raise ActionMaskError(
            f"The action_mask of observation row(s) {list(rows)} allows no action (all zeros"
            f"{' in a sub-action' if len(sizes) > 1 else ''}): a policy cannot act there. Fix the "
            "environment so that every observation an agent must act on has a legal action "
            "(a finished agent's final observation is never acted on).", rows)


def check_legal_scores(scores: np.ndarray, mask: np.ndarray, sizes: Sequence[int]) -> None:
    """Raise :class:`~cairn.errors.PolicyOutputError` when a row of masked ``scores`` (logits,
    Q-values) gives every legal choice of some (sub-)action a score of ``-inf``: no legal action
    has a probability there. Acted on, the illegal actions' finite MASKED_SCORE would take all
    the probability and the legal argmax over ``-inf`` would pick the first index, legal or not,
    with a log-probability of ``-inf``, silently. NaN and ``+inf`` are
    :func:`~cairn.policy.acting.check_action_inputs`' to refuse."""
    # Masked scores are finite unless the network's are: one scalar reduction on the usual path.
    if math.isfinite(reduce_sum(scores, axis=None)):
        return
    dead = np.zeros(scores.shape[0], dtype=bool)
    for segment, part in zip(_segments(mask, sizes), _segments(scores, sizes), strict=True):
        dead |= reduce_max(np.where(segment > 0.5, part, -np.inf), axis=1) == -np.inf
    if not reduce_any(dead):
        return
    rows = tuple(int(i) for i in np.flatnonzero(dead))
    raise PolicyOutputError(
        f"The policy's network gave every legal action of observation row(s) {list(rows)} a score "
        f"(logit or Q-value) of -inf (row {rows[0]}: {np.array2string(scores[rows[0]], threshold=8)}, "
        f"legal: {np.flatnonzero(mask[rows[0]] > 0.5).tolist()}), so no legal action has a "
        "probability and it cannot act there. A network that masks its own outputs (receives_action_mask) "
        "must leave the legal ones finite: add a large negative penalty to illegal actions, not "
        "log(mask) of a mask that may be all zeros where its policy still acts; cairn masks the "
        "outputs itself (illegal actions never get a probability). Otherwise the weights have "
        "most likely diverged in training: lower the learning rate, clip gradients (grad_clip), and "
        "go on from a checkpoint saved before it diverged.", rows)


def legal_actions(raw: np.ndarray, inputs: np.ndarray, mask: np.ndarray, sizes: Sequence[int]) -> np.ndarray:
    """``raw`` actions, with any illegal one (sampling never draws an action of probability 0,
    but an illegal action has a probability above 0, and the argmax picks it, when the legal
    scores are near or below MASKED_SCORE) replaced by the best legal action of ``inputs``
    (masked scores), chosen among the legal ones alone."""
    columns = raw.reshape(raw.shape[0], len(sizes))  # one column per (sub-)action, also for 0 rows
    rows = np.arange(columns.shape[0])
    fixed = None
    for k, (segment, scores) in enumerate(zip(_segments(mask, sizes), _segments(inputs, sizes))):
        illegal = segment[rows, columns[:, k]] <= 0.5
        if reduce_any(illegal):
            fixed = columns.copy() if fixed is None else fixed
            fixed[illegal, k] = legal_argmax(scores[illegal], segment[illegal])
    return raw if fixed is None else fixed.reshape(raw.shape)


def legal_argmax(scores: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """Per row, the index of the best score among the legal entries of ``mask`` (``> 0.5``):
    a legal score below MASKED_SCORE still beats every illegal one."""
    return np.where(mask > 0.5, scores, -np.inf).argmax(axis=1)  # type: ignore[no-any-return]


def random_legal_actions(mask: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """One uniformly random legal action per row of a Discrete ``mask`` (``[B, n]``)."""
    legal = mask > 0.5
    counts = legal.sum(axis=1)
    pick = np.minimum((rng.random(mask.shape[0]) * counts).astype(np.int64), counts - 1)
    return (np.cumsum(legal, axis=1) > pick[:, None]).argmax(axis=1).astype(np.int64)
