"""A policy's acting path: raw observations -> network rows (:class:`ObservationInput`) -> the
action distribution's inputs -> raw actions -> the action one environment takes.

:class:`~cairn.policy.policy.Policy`'s acting methods (the ones subclasses override) call these
functions, which hold what does not depend on the policy class: the network's numpy fast path
or torch under ``inference_mode``, sampling or the deterministic action, and a Discrete action
as a Python int.
"""

from __future__ import annotations

import math
from typing import Any

import gymnasium as gym
import numpy as np
from torch import nn

from cairn.errors import PolicyOutputError
from cairn.numpy_acting import in_torch, reduce_sum
from cairn.policy.action_masking import MaskedObservationPreprocessor, filter_features
from cairn.policy.distributions import ActionDistribution
from cairn.policy.filters import MeanStdFilter, NoFilter
from cairn.spaces import ObservationPreprocessor

__all__ = ["ObservationInput", "action_inputs", "check_action_inputs", "check_action_logp",
           "check_loggable_inputs", "check_sampling_inputs", "raw_actions", "raw_actions_and_logp",
           "single_action"]

_FLOAT32 = np.dtype(np.float32)


class ObservationInput:
    """A policy's observation connector: raw observations -> float32 network rows, through its
    preprocessor (flatten, one-hot) and its observation filter; the one owner of both.

    A masked policy's rows are ``[features | mask]``, and the filter sees the features only.
    """

    def __init__(self, preprocessor: ObservationPreprocessor | MaskedObservationPreprocessor,
                 observation_filter: NoFilter | MeanStdFilter) -> None:
        self.preprocessor = preprocessor
        self.observation_filter = observation_filter

    def __call__(self, obs_batch: Any, *, update: bool) -> np.ndarray:
        """Rows for ``obs_batch``; ``update=True`` also feeds them to the filter's statistics."""
        processed = self.preprocessor(obs_batch)
        if self.preprocessor.mask_size:
            return filter_features(processed, self.observation_filter, self.preprocessor.size, update=update)
        if update:
            self.observation_filter.update(processed)
        return self.observation_filter.apply(processed)  # type: ignore[no-any-return]


def action_inputs(model: nn.Module, processed_obs: np.ndarray) -> np.ndarray:
    """The distribution inputs (logits, or mean and log-std) ``model`` (a policy's network) gives
    for processed observations: through its ``numpy_action_inputs`` where it has one, else through
    ``model.action_inputs`` under ``torch.inference_mode()``."""
    fast = getattr(model, "numpy_action_inputs", None)
    if fast is not None:
        return fast(processed_obs)  # type: ignore[no-any-return]
    # The network's own method (cairn.models.ActorCriticModel's contract), unseen on nn.Module.
    return in_torch(model.action_inputs, processed_obs, model)  # type: ignore[arg-type]


def check_action_inputs(dist: ActionDistribution, inputs: np.ndarray) -> None:
    """Raise :class:`~cairn.errors.PolicyOutputError` unless every row of ``inputs`` defines a
    distribution to act from (:meth:`ActionDistribution.usable_rows`). Acting on a NaN would give
    no error and a wrong action: a categorical draw or argmax over NaN logits is action 0 (or
    the NaN's index), a Gaussian one a NaN outside the Box."""
    # The sum is finite only when every input is (an inf or NaN anywhere makes it inf or NaN), and
    # a finite row is usable for every distribution: one scalar reduction on the usual path.
    if math.isfinite(reduce_sum(inputs, axis=None)):
        return
    usable = dist.usable_rows(inputs)  # the exact check: a logit of -inf is usable, a sum may overflow
    if np.logical_and.reduce(usable):
        return
    rows = tuple(int(i) for i in np.flatnonzero(~usable))
    raise PolicyOutputError(
        f"The policy's network gave action-distribution inputs (logits, or mean and log-std) that "
        f"are NaN or infinite for observation row(s) {list(rows)} (row {rows[0]}: "
        f"{np.array2string(inputs[rows[0]], threshold=8)}), so it cannot act there. Its weights "
        "have most likely diverged in training (look for NaN or infinite losses): lower the "
        "learning rate, clip gradients (grad_clip), normalise observations "
        "(observation_filter='MeanStdFilter') and rewards, check the environment for NaN or huge "
        "observations and rewards, and go on from a checkpoint saved before it diverged.", rows)


def check_sampling_inputs(dist: ActionDistribution, inputs: np.ndarray) -> None:
    """Raise :class:`~cairn.errors.PolicyOutputError` unless a sample can be drawn from every
    row of usable ``inputs`` (:meth:`ActionDistribution.sampleable_rows`): a Gaussian whose
    log-std is finite but so large (about 88.7 or more) that its std overflows float32 would
    draw an infinite or NaN action, clipped or squashed to a bound of the Box, with a
    log-probability of ``-inf``. Checked before anything is drawn."""
    _refuse_rows(
        dist.sampleable_rows(inputs), inputs,
        "a log-std so large that its standard deviation exp(log_std) overflows float32 (about 88.7 or more)",
        "so it cannot sample an action there: the draw would be infinite, clipped or squashed to a bound "
        "of the action space, with a log-probability of -inf. Its weights have most likely diverged in "
        "training (an entropy bonus that keeps raising the log-std, a learning rate too high): bound the "
        "log-std in the network (clamp it, as SAC's built-in actor does to [-20, 2]), lower the "
        "learning rate or entropy_coeff, clip gradients (grad_clip), and go on from a checkpoint "
        "saved before it diverged. Deterministic actions (explore=False) read the mean only.")


def check_loggable_inputs(dist: ActionDistribution, inputs: np.ndarray) -> None:
    """Raise :class:`~cairn.errors.PolicyOutputError` unless every row of usable ``inputs`` can
    give its action a finite log-probability (:meth:`ActionDistribution.loggable_rows`): a
    Gaussian whose log-std is so low (about -88.7 or less) that ``exp(-log_std)`` overflows
    float32 gives every action a NaN or ``-inf`` logp. Checked before anything is drawn, so a
    refused call leaves the policy's random generator as it was."""
    _refuse_rows(
        dist.loggable_rows(inputs), inputs,
        "a log-std so low that exp(-log_std) overflows float32 (about -88.7 or less)",
        "so the log-probability of any action there is NaN or -inf and cannot be recorded for learning "
        "(every later PPO or V-trace loss over the row would be NaN). Its weights have most likely "
        "diverged in training: bound the log-std in the network (clamp it), lower the learning rate, "
        "clip gradients (grad_clip), and go on from a checkpoint saved before it diverged.")


def _refuse_rows(ok: np.ndarray | None, inputs: np.ndarray, what: str, consequence: str) -> None:
    """Raise :class:`~cairn.errors.PolicyOutputError` naming the rows of Gaussian ``inputs``
    (``[mean, log_std]``) that ``ok`` (bool ``[B]``; None: all) leaves out: the network gave
    ``what`` there, ``consequence`` follows (with the fix)."""
    if ok is None or np.logical_and.reduce(ok):
        return
    rows = tuple(int(i) for i in np.flatnonzero(~ok))
    raise PolicyOutputError(
        f"The policy's network gave {what} for observation row(s) {list(rows)} (row {rows[0]}: "
        f"{np.array2string(inputs[rows[0]], threshold=8)}, [mean, log_std]), {consequence}", rows)


def raw_actions(
    dist: ActionDistribution, inputs: np.ndarray, rng: np.random.Generator, *, explore: bool
) -> np.ndarray:
    """Raw actions (category indices / unclipped samples) from distribution inputs: sampled
    with ``rng`` when ``explore``, else the deterministic ones. Raises
    :class:`~cairn.errors.PolicyOutputError` for inputs that define no distribution (NaN), or
    when sampling, none that can be sampled in float32 (:func:`check_sampling_inputs`)."""
    check_action_inputs(dist, inputs)
    if explore:
        check_sampling_inputs(dist, inputs)
        return dist.sample_numpy(inputs, rng)
    return dist.deterministic_numpy(inputs)


def raw_actions_and_logp(
    dist: ActionDistribution, inputs: np.ndarray, rng: np.random.Generator, *, explore: bool
) -> tuple[np.ndarray, np.ndarray]:
    """:func:`raw_actions` (the same draws, the same checks) and their log-probabilities under
    ``inputs``' distribution. Inputs whose logp cannot be finite are refused before the draw
    (:func:`check_loggable_inputs`); the logp itself is checked after it
    (:func:`check_action_logp`) unless the distribution proves it finite for float32 inputs
    (:attr:`ActionDistribution.finite_logp`: the categoricals)."""
    check_action_inputs(dist, inputs)
    if explore:
        check_sampling_inputs(dist, inputs)
    checked = not (dist.finite_logp and inputs.dtype is _FLOAT32)  # the proof is float32's
    if checked:
        check_loggable_inputs(dist, inputs)
    if explore:
        raw, logp = dist.sample_numpy_and_logp(inputs, rng)
    else:
        raw = dist.deterministic_numpy(inputs)
        logp = dist.logp_numpy(inputs, raw)
    if checked:
        check_action_logp(logp, inputs)
    return raw, logp


def check_action_logp(logp: np.ndarray, inputs: np.ndarray) -> None:
    """Raise :class:`~cairn.errors.PolicyOutputError` unless every action's log-probability
    ``logp`` (under the distribution ``inputs`` define) is finite. An action acted is never
    impossible, so ``-inf`` or NaN is a distribution float32 cannot hold: a Gaussian sample that
    overflowed float32 (a huge mean or std), or a user's distribution. Recorded, it would make
    every later PPO or V-trace loss over the row NaN (:class:`~cairn.errors.NonFiniteLossError`,
    which blames the environment). One scalar reduction on the usual path; checked after the
    draw, for what the draw decides: what the inputs alone decide is refused before it
    (:func:`check_loggable_inputs`).
    """
    if math.isfinite(reduce_sum(logp, axis=None)):
        return
    bad = ~np.isfinite(logp)
    if not np.logical_or.reduce(bad):  # finite, only their sum overflowed
        return
    rows = tuple(int(i) for i in np.flatnonzero(bad))
    raise PolicyOutputError(
        f"The log-probability of the action a policy chose is {float(logp[rows[0]])} (not finite) for "
        f"observation row(s) {list(rows)} (row {rows[0]}'s distribution inputs: "
        f"{np.array2string(inputs[rows[0]], threshold=8)}), so it cannot be recorded for learning: "
        "the distribution went beyond float32 (a Gaussian sample that overflowed, from a huge mean "
        "or log-std, or a user's distribution). Its weights have most likely diverged in training: "
        "bound the log-std in the network (clamp it), lower the learning rate, clip gradients "
        "(grad_clip), and go on from a checkpoint saved before it diverged.", rows)


def single_action(action_space: gym.Space[Any], action: Any) -> Any:
    """One environment's action as it takes it: an int for Discrete spaces."""
    if isinstance(action_space, gym.spaces.Discrete):
        return int(action)
    return action
