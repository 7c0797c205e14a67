"""Checking exported models against the policy they came from, before anyone relies on them.

An export that traces but computes something else (a model reading Python state, an opset
conversion gone wrong) is worse than a failed one, so every export runs the written model on
sampled observations and compares it with the policy's own acting path
(:meth:`cairn.Policy.compute_actions`, and the other outputs' reference from the policy's
export graph). A masked policy's model is checked on observations whose random masks leave
each row (each sub-action) at least one legal action, the only ones a policy acts on.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import gymnasium as gym
import numpy as np
import torch

from cairn.errors import ExportError
from cairn.export.conventions import model_feeds
from cairn.policy.action_masking import ACTION_MASK_KEY, action_sizes
from cairn.policy.export_hook import ExportGraph
from cairn.rng import check_inputs_rng

if TYPE_CHECKING:
    from cairn.policy.policy import Policy

__all__ = ["Runner", "sample_observations", "sample_policy_observations", "with_legal_masks",
           "check_against_policy", "program_runner", "onnx_runner"]

Runner = Callable[..., Sequence[np.ndarray]]
"""``run(obs, *more inputs) -> outputs``: the model's inputs positionally, in signature order."""
RTOL, ATOL = 1e-5, 1e-5
"""Float outputs agree when ``|got - expected| <= ATOL + RTOL * |expected|`` (docs/export.md):
float32 results of order 1000 differ between runtimes by more than 1e-5 in float rounding."""
TIE_MARGIN = 1e-4
"""A discrete action may legitimately differ where its score and the best are within
``TIE_MARGIN * (1 + max(|best|, |score|))`` (:func:`_within_tie_margin`): float rounding in another
runtime's matrix products can swap them. Relative like the tolerance of the float outputs (ten
times ``ATOL + RTOL * |expected|``), since scores near 1000 round by 1000 times more than near 1:
an absolute margin refused correct exports of large Q-values or logits."""


def _within_tie_margin(best: np.ndarray, score: np.ndarray) -> np.ndarray:
    """Whether each ``score`` is close enough to its ``best`` that rounding may swap them."""
    scale = 1.0 + np.maximum(np.abs(best), np.abs(score))
    return best - score < TIE_MARGIN * scale


def sample_observations(space: gym.Space[Any], n: int, *, seed: int = 0) -> list[Any]:
    """``n`` observations drawn from a seeded copy of ``space`` (the space is left alone)."""
    space = copy.deepcopy(space)
    space.seed(seed)
    return [space.sample() for _ in range(n)]


def with_legal_masks(observations: Sequence[Any], sizes: Sequence[int], *, seed: int = 0) -> list[Any]:
    """Copies of Dict ``observations`` whose ``"action_mask"`` allows at least one action of
    each (sub-)action: a mask segment with no entry above 0.5 gets one random entry set to 1."""
    rng = check_inputs_rng(seed)
    bounds = np.cumsum([0, *sizes])
    out = []
    for obs in observations:
        mask = np.array(obs[ACTION_MASK_KEY], copy=True)
        flat = mask.reshape(-1)
        for start, stop in zip(bounds[:-1], bounds[1:], strict=True):
            if not (flat[start:stop] > 0.5).any():
                flat[start + int(rng.integers(stop - start))] = 1
        fixed = dict(obs)
        fixed[ACTION_MASK_KEY] = flat.reshape(mask.shape)
        out.append(fixed)
    return out


def sample_policy_observations(policy: Policy, n: int, *, seed: int = 0) -> list[Any]:
    """:func:`sample_observations` of the policy's observation space; for a masked policy each
    mask then leaves a legal action (:func:`with_legal_masks`)."""
    observations = sample_observations(policy.observation_space, n, seed=seed)
    if not policy.action_mask_size:
        return observations
    return with_legal_masks(observations, action_sizes(policy.action_space), seed=seed)


def _near_ties(scores: np.ndarray, sizes: Sequence[int]) -> np.ndarray:
    """``[rows, len(sizes)]``: whether each row's two best scores of each (sub-)action are
    within the tie margin (where float rounding may swap that sub-action's choice, and only it)."""
    tied = np.zeros((scores.shape[0], len(sizes)), dtype=bool)
    offset = 0
    for k, size in enumerate(sizes):
        part = np.sort(scores[:, offset : offset + size], axis=1)
        offset += size
        if size > 1:
            tied[:, k] = _within_tie_margin(part[:, -1], part[:, -2])
    return tied


def _near_best(scores: np.ndarray, chosen: np.ndarray, sizes: Sequence[int]) -> np.ndarray:
    """``[rows, len(sizes)]``: whether each row's ``chosen`` index of each (sub-)action (``[rows,
    len(sizes)]``, 0-based) is one of its choices and scores within the tie margin of its best."""
    near = np.zeros(chosen.shape, dtype=bool)
    rows = np.arange(scores.shape[0])
    offset = 0
    for k, size in enumerate(sizes):
        part = scores[:, offset : offset + size]
        offset += size
        inside = (chosen[:, k] >= 0) & (chosen[:, k] < size)
        score = part[rows, np.clip(chosen[:, k], 0, size - 1)]
        near[:, k] = inside & _within_tie_margin(part.max(axis=1), score)
    return near


def _action_starts(space: gym.Space[Any]) -> np.ndarray | None:
    """The first action of each (sub-)action of a Discrete or MultiDiscrete ``space``."""
    if isinstance(space, gym.spaces.Discrete):
        return np.array([int(space.start)], dtype=np.int64)
    if isinstance(space, gym.spaces.MultiDiscrete):
        return np.asarray(space.start, dtype=np.int64).reshape(-1)
    return None


def _excused(policy: Policy, action: np.ndarray, reference: np.ndarray, scores: np.ndarray,
             sizes: Sequence[int]) -> np.ndarray:
    """``[rows, len(sizes)]``: where a (sub-)action that differs from the policy's is excused:
    both it and the policy's score within the tie margin of the best (another runtime's rounding may
    swap them). A graph whose actions are not those of a Discrete or MultiDiscrete space (a
    policy's own export graph) is excused wherever its two best scores tie."""
    starts = _action_starts(policy.action_space)
    if starts is None or starts.shape != (len(sizes),):
        return _near_ties(scores, sizes)

    def index(actions: np.ndarray) -> np.ndarray:
        return actions.reshape(scores.shape[0], len(sizes)).astype(np.int64) - starts

    return _near_best(scores, index(action), sizes) & _near_best(scores, index(reference), sizes)


def check_against_policy(
    policy: Policy, run: Runner, what: str, *, graph: ExportGraph | None = None, n: int = 64,
    seed: int = 0,
) -> None:
    """Raise ExportError unless ``run`` reproduces the policy's outputs on ``n`` observations.

    The expected outputs are ``graph.reference`` (the policy's own acting path:
    ``compute_actions(obs, explore=False)``, then e.g. its action inputs and value, or its
    Q-values); ``graph`` defaults to ``policy.export_graph()``; a recurrent policy's model and
    reference also get the random states of ``graph.check_inputs``. Discrete actions must be equal,
    or another action scoring within the tie margin of the best (``TIE_MARGIN * (1 + |best|)``,
    per sub-action); everything else
    (Box actions included) within ``|got - expected| <= 1e-5 + 1e-5 * |expected|``
    (``numpy.allclose``).
    """
    graph = policy.export_graph() if graph is None else graph
    observations = sample_policy_observations(policy, n, seed=seed)
    more = graph.check_inputs(n, seed) if graph.check_inputs is not None else ()  # e.g. states
    expected = graph.reference(observations, *more)
    feeds = model_feeds(policy.observation_space, policy.action_space, observations)
    got = list(run(*feeds.values(), *more))
    if len(got) != len(expected):
        raise ExportError(f"The {what} returned {len(got)} outputs, expected {len(expected)}.")
    for index, (out, ref) in enumerate(zip(got, expected, strict=True)):
        out = np.asarray(out)
        if out.shape != ref.shape or out.dtype != ref.dtype:
            raise ExportError(
                f"The {what}'s output {index} has shape {out.shape} and dtype {out.dtype}, "
                f"but the policy gives {ref.shape} and {ref.dtype}."
            )
    action, ref_action = np.asarray(got[0]), expected[0]
    start = 0
    if graph.discrete_sizes is not None:
        # Per (sub-)action: a tie in one sub-action excuses that one, not the others.
        differs = (action != ref_action).reshape(len(observations), len(graph.discrete_sizes))
        wrong = (differs & ~_excused(policy, action, ref_action, expected[1],
                                      graph.discrete_sizes)).any(axis=1)
        if wrong.any():
            raise ExportError(
                f"The {what} chose different actions than the policy for {int(wrong.sum())} "
                f"of {n} sampled observations (e.g. {action[wrong][0]!r} instead of "
                f"{ref_action[wrong][0]!r}); the exported model is not faithful."
            )
        start = 1
    for index in range(start, len(expected)):
        if not np.allclose(got[index], expected[index], rtol=RTOL, atol=ATOL, equal_nan=True):
            error = float(np.nanmax(np.abs(np.asarray(got[index], np.float64) - expected[index])))
            raise ExportError(
                f"The {what}'s output {index} ({graph.outputs[index].name}) differs from the "
                f"policy's by up to {error:.3g} (tolerance: |got - expected| <= {ATOL} + {RTOL} * "
                "|expected|); the exported model is not faithful."
            )


def program_runner(program: torch.export.ExportedProgram) -> Runner:
    """Run an exported program on numpy inputs, returning numpy outputs."""
    module = program.module()

    def run(*inputs: np.ndarray) -> list[np.ndarray]:
        with torch.inference_mode():
            return [t.numpy() for t in module(*(torch.from_numpy(x) for x in inputs))]

    return run


def onnx_runner(model: bytes | str) -> Runner:
    """Run an ONNX model (bytes or path) in onnxruntime on numpy input."""
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = 1  # a check, not a benchmark: stay off the other cores
    session = onnxruntime.InferenceSession(model, options, providers=["CPUExecutionProvider"])
    names = [spec.name for spec in session.get_inputs()]

    def run(*inputs: np.ndarray) -> list[np.ndarray]:
        if len(inputs) != len(names):
            raise ExportError(f"The ONNX model takes {len(names)} inputs {names}, got {len(inputs)}.")
        return list(session.run(None, dict(zip(names, inputs, strict=True))))

    return run
