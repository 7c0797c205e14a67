"""Export graphs: a policy's observation-to-output path as one traceable torch module.

:meth:`cairn.Policy.export_graph` is the export hook: a policy describes, in torch, what its
own acting path computes, and :mod:`cairn.export` traces that module into a ``torch.export``
program and ONNX, writes ``signature.json`` and checks the files against the policy. The
export layer knows nothing else about a policy; a policy with another network or action path
overrides the hook (``DQNPolicy`` does).

The model's input (see :func:`input_spec`) is the raw observation, flattened where the space
is not an array, so the graph repeats the policy's numpy preprocessing in torch with the same
constants: flatten / one-hot, then the observation filter's current mean, inverse std and
clip (:mod:`cairn.policy.observation_path`). What a graph holds (:class:`ExportGraph`,
:class:`TensorSpec`) and the exporter registry are in :mod:`cairn.policy.export_hook`; this
module re-exports them. :func:`actor_critic_export_graph`, defined here, covers the
actor-critic policies: ``(action, logits | mean + log_std, value)`` through
``model.action_inputs`` and ``model.value`` and the distribution's deterministic action.
DQN's and SAC's own builders live with them (``cairn.algorithms.dqn.export``,
``cairn.algorithms.sac.export``).

Graphs are built for small single-observation latency in onnxruntime: no node that computes
nothing (a reshape of an already flat input, a cast to the dtype a tensor has, a ``+ 0``).
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from cairn.errors import ExportError
from cairn.policy.action_mask_input import action_mask_examples, action_mask_inputs, network_name
from cairn.policy.distributions import Categorical, DiagGaussian, MultiCategorical
from cairn.policy.export_hook import (
    BATCH,
    ExportGraph,
    TensorSpec,
)
from cairn.policy.observation_path import ObservationPath, example_input, filter_description, input_spec

if TYPE_CHECKING:
    from cairn.policy.policy import Policy

# The data types and the observation path live in their own modules (export_hook,
# observation_path); they are re-exported here, where the export hook's users look for them.
__all__ = [
    "BATCH",
    "TensorSpec",
    "ExportGraph",
    "ObservationPath",
    "input_spec",
    "example_input",
    "filter_description",
    "actor_critic_export_graph",
]


def _torch_dtype(dtype: Any) -> torch.dtype:
    return torch.from_numpy(np.zeros(0, dtype=np.dtype(dtype))).dtype


class _ActorCriticModule(nn.Module):
    """``forward(obs) -> (action, *distribution_inputs, value)`` for an actor-critic policy;
    ``forward(obs, action_mask)`` for a masked one (its model masks the logits)."""

    action_start: torch.Tensor
    action_low: torch.Tensor
    action_high: torch.Tensor

    def __init__(self, policy: Policy) -> None:
        super().__init__()
        self.observations = ObservationPath(policy)
        self.model = copy.deepcopy(policy.model).eval()
        self.dist = dist = policy.dist
        self.start = int(dist.start) if isinstance(dist, Categorical) else 0
        self.shape: tuple[int, ...] = tuple(getattr(dist, "shape", ()))
        if isinstance(dist, MultiCategorical):
            self.register_buffer("action_start", torch.from_numpy(dist.start.copy()))
        if isinstance(dist, DiagGaussian):
            self.size = int(dist.size)
            self.register_buffer("action_low", torch.from_numpy(dist.low.copy()))
            self.register_buffer("action_high", torch.from_numpy(dist.high.copy()))
        if isinstance(dist, (MultiCategorical, DiagGaussian)):
            self.action_dtype = _torch_dtype(dist.env_dtype)

    def to_env(self, raw: torch.Tensor) -> torch.Tensor:
        """Raw deterministic actions -> environment actions, as ``dist.to_env`` does."""
        if isinstance(self.dist, Categorical):
            return raw + self.start if self.start else raw
        if isinstance(self.dist, MultiCategorical):
            out = raw + self.action_start
        else:
            # np.clip(x, low, high) is minimum(maximum(x, low), high); ONNX's Clip wants scalars.
            out = torch.minimum(torch.maximum(raw, self.action_low), self.action_high)
        if tuple(out.shape[1:]) != self.shape:
            out = out.reshape(out.shape[0], *self.shape)
        return out if out.dtype == self.action_dtype else out.to(self.action_dtype)

    def forward(self, obs: torch.Tensor, action_mask: torch.Tensor | None = None) -> tuple[torch.Tensor, ...]:
        x = self.observations(obs, action_mask)
        inputs = self.model.action_inputs(x)
        value = self.model.value(x)
        action = self.to_env(self.dist.deterministic(inputs))
        if isinstance(self.dist, DiagGaussian):
            return action, inputs[:, : self.size], inputs[:, self.size :], value
        return action, inputs, value


def _actor_critic_outputs(action_space: gym.Space[Any]) -> tuple[TensorSpec, ...]:
    value = TensorSpec("value", "float32", (BATCH,), "The value function's estimate V(obs).",
                       optional=True)
    if isinstance(action_space, gym.spaces.Discrete):
        n, start = int(action_space.n), int(action_space.start)
        return (
            TensorSpec("action", "int64", (BATCH,),
                       f"Deterministic action: argmax(logits) + start ({start})."),
            TensorSpec("logits", "float32", (BATCH, n), "Unnormalised log-probabilities of "
                       "the categorical action distribution."),
            value,
        )
    if isinstance(action_space, gym.spaces.MultiDiscrete):
        nvec = [int(n) for n in action_space.nvec.reshape(-1)]
        return (
            TensorSpec("action", np.dtype(action_space.dtype).name, (BATCH, *action_space.shape),
                       "Deterministic action: per component argmax of its logits + start."),
            TensorSpec("logits", "float32", (BATCH, sum(nvec)),
                       f"Logits of independent categoricals, concatenated in component order "
                       f"(sizes {nvec})."),
            value,
        )
    shape = tuple(action_space.shape or ())
    size = int(np.prod(shape))
    return (
        TensorSpec("action", np.dtype(action_space.dtype).name, (BATCH, *shape),
                   "Deterministic action: the Gaussian mean clipped to the Box bounds."),
        TensorSpec("mean", "float32", (BATCH, size), "Mean of the diagonal Gaussian "
                   "(flattened, unclipped)."),
        TensorSpec("log_std", "float32", (BATCH, size), "Log standard deviation of the "
                   "diagonal Gaussian."),
        value,
    )


def actor_critic_export_graph(policy: Policy) -> ExportGraph:
    """The export graph of an actor-critic :class:`~cairn.Policy`.

    Outputs: ``action`` (as ``compute_actions(obs, explore=False)`` returns it), the action
    distribution's inputs (``logits``, or ``mean`` and ``log_std``) and ``value`` (optional:
    exported only when asked for, see :meth:`ExportGraph.with_outputs`). Inputs: ``obs``, and
    ``action_mask`` for a masked policy (whose ``logits`` are masked as the policy's). Raises
    ExportError when the model lacks ``action_inputs(obs)``/``value(obs)`` or the
    distribution is not Categorical, MultiCategorical or DiagGaussian.
    """
    model = policy.model
    if not (callable(getattr(model, "action_inputs", None)) and callable(getattr(model, "value", None))):
        raise ExportError(
            f"{type(policy).__name__}'s model {network_name(model)} has no "
            "action_inputs(obs) and value(obs) methods; exported models call both. Add "
            "them to the model returned by make_model(), or override export_graph()."
        )
    dist = policy.dist
    if not isinstance(dist, (Categorical, MultiCategorical, DiagGaussian)):
        raise ExportError(
            f"Cannot export action distribution {type(dist).__name__}: supported are "
            "Categorical, MultiCategorical and DiagGaussian; override export_graph()."
        )

    def reference(observations: Sequence[Any]) -> list[np.ndarray]:
        action = policy.compute_actions(observations, explore=False)
        x = torch.from_numpy(policy.process_observations(observations, update=False))
        with torch.inference_mode():
            inputs = model.action_inputs(x).numpy()
            value = model.value(x).numpy()
        if isinstance(dist, DiagGaussian):
            return [action, inputs[:, : dist.size], inputs[:, dist.size :], value]
        return [action, inputs, value]

    sizes: tuple[int, ...] | None = None
    if isinstance(dist, Categorical):
        sizes = (int(dist.num_inputs),)
    elif isinstance(dist, MultiCategorical):
        sizes = tuple(int(n) for n in dist.nvec)
    return ExportGraph(
        module=_ActorCriticModule(policy),
        input=input_spec(policy.network_observation_space),
        outputs=_actor_critic_outputs(policy.action_space),
        example=example_input(policy),
        reference=reference,
        discrete_sizes=sizes,
        network_name=network_name(model),
        metadata={"observation_filter": filter_description(policy)},
        extra_inputs=action_mask_inputs(policy),
        extra_examples=action_mask_examples(policy),
    )
