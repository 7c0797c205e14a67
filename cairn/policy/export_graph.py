"""Export graphs: a policy's observation-to-output path as one traceable torch module.

:meth:`cairn.Policy.export_graph` is the export hook: a policy describes, in torch, what its
own acting path computes, and :mod:`cairn.export` traces that module into a ``torch.export``
program and ONNX, writes ``signature.json`` and checks the files against the policy. The
export layer knows nothing else about a policy; a policy with another network or action path
overrides the hook (``DQNPolicy`` does).

The model's input (see :func:`input_spec`) is the raw observation, flattened where the space
is not an array, so the graph repeats the policy's numpy preprocessing in torch with the same
constants: flatten / one-hot, then the observation filter's current mean, inverse std and
clip. Two builders cover cairn's policies:

* :func:`actor_critic_export_graph`: ``(action, logits | mean + log_std, value)`` through
  ``model.action_inputs`` and ``model.value`` and the distribution's deterministic action;
* :func:`q_value_export_graph`: ``(action, q_values)``, the greedy action of a Q-network.

Graphs are built for small single-observation latency in onnxruntime: no node that computes
nothing (a reshape of an already flat input, a cast to the dtype a tensor has, a ``+ 0``).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from cairn.errors import ExportError
from cairn.policy.distributions import Categorical, DiagGaussian, MultiCategorical
from cairn.policy.filters import MeanStdFilter

if TYPE_CHECKING:
    from cairn.policy.policy import Policy

__all__ = [
    "BATCH",
    "TensorSpec",
    "ExportGraph",
    "ObservationPath",
    "input_spec",
    "example_input",
    "filter_description",
    "actor_critic_export_graph",
    "q_value_export_graph",
    "ModelExporter",
    "register_model_exporter",
    "model_exporter",
]

BATCH = "batch"
"""Name of the dynamic first dimension of every input and output."""

Dim = int | str


@dataclass(frozen=True)
class TensorSpec:
    """Name, numpy dtype name, shape (``"batch"`` for the dynamic dimension) and meaning."""

    name: str
    dtype: str
    shape: tuple[Dim, ...]
    description: str

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "dtype": self.dtype,
            "shape": list(self.shape),
            "description": self.description,
        }


@dataclass(frozen=True)
class ExportGraph:
    """What a policy hands to the exporter.

    Attributes:
        module: ``forward(obs) -> tuple`` of the outputs, in :attr:`outputs` order; the
            environment-ready deterministic action first. A snapshot: exporting never changes
            the policy, and later training does not reach the module.
        input: The ``obs`` input (:func:`input_spec`).
        outputs: Name, dtype, shape and meaning of each output.
        example: A valid input to trace with (2 rows, so that the batch stays dynamic).
        reference: Raw observations -> what each output must be, computed by the policy's own
            acting path (``compute_actions(obs, explore=False)`` first).
        discrete_sizes: For discrete actions, the number of choices per action component;
            output 1 then holds their scores (logits, Q-values), and an exported action may
            differ from the reference only where the two best scores nearly tie. None for
            continuous actions (compared within a tolerance like every other output).
        network_name: The network's class name, for error messages.
        metadata: Extra ``signature.json`` entries (e.g. ``observation_filter``).
    """

    module: nn.Module
    input: TensorSpec
    outputs: tuple[TensorSpec, ...]
    example: torch.Tensor
    reference: Callable[[Sequence[Any]], list[np.ndarray]]
    discrete_sizes: tuple[int, ...] | None
    network_name: str
    metadata: Mapping[str, Any] = field(default_factory=dict)


#: ``exporter(policy, export_dir, *, onnx) -> signature``: ``cairn.export.export_model``.
ModelExporter = Callable[..., dict[str, Any]]
_MODEL_EXPORTER: list[ModelExporter] = []


def register_model_exporter(exporter: ModelExporter) -> None:
    """Install the function behind :meth:`cairn.Policy.export_model` (replacing any).

    ``cairn.export`` registers ``export_model`` when it is imported (``import cairn`` does),
    so that the policy layer, below export, offers the method without importing upward.
    """
    if not callable(exporter):
        raise TypeError(f"register_model_exporter needs a callable, got {type(exporter).__name__}.")
    _MODEL_EXPORTER[:] = [exporter]


def model_exporter() -> ModelExporter:
    """The function installed by :func:`register_model_exporter`; ExportError when none is."""
    if not _MODEL_EXPORTER:
        raise ExportError(
            "export_model: no model exporter is registered; cairn.export registers one when "
            "it is imported (`import cairn` does). Import cairn.export first."
        )
    return _MODEL_EXPORTER[0]


def input_spec(observation_space: gym.Space[Any]) -> TensorSpec:
    """The ``obs`` input for observations from ``observation_space``.

    * Box and MultiBinary: float32 ``[batch, *space.shape]``;
    * Discrete: int64 ``[batch]`` (the raw values, ``start`` included);
    * Dict, Tuple and MultiDiscrete: float32 ``[batch, flatdim]``, each row the
      :func:`gymnasium.spaces.flatten` of one observation.
    """
    if isinstance(observation_space, (gym.spaces.Box, gym.spaces.MultiBinary)):
        return TensorSpec(
            "obs", "float32", (BATCH, *observation_space.shape),
            "Raw observations cast to float32 (no normalisation: the model applies the "
            "policy's observation filter itself).",
        )
    if isinstance(observation_space, gym.spaces.Discrete):
        return TensorSpec(
            "obs", "int64", (BATCH,),
            f"Raw Discrete observations in [{observation_space.start}, "
            f"{observation_space.start + observation_space.n}); the model one-hot encodes them.",
        )
    return TensorSpec(
        "obs", "float32", (BATCH, int(gym.spaces.flatdim(observation_space))),
        "Observations flattened with gymnasium.spaces.flatten(observation_space, obs), as "
        "float32 (Discrete parts one-hot, in the space's key/index order).",
    )


def example_input(policy: Policy, batch: int = 2) -> torch.Tensor:
    """A valid ``obs`` input of ``batch`` rows (2+ rows keeps the batch dynamic when traced)."""
    space = policy.observation_space
    if isinstance(space, gym.spaces.Discrete):
        return torch.full((batch,), int(space.start), dtype=torch.int64)
    if isinstance(space, (gym.spaces.Box, gym.spaces.MultiBinary)):
        return torch.zeros((batch, *space.shape), dtype=torch.float32)
    return torch.zeros((batch, int(policy.preprocessor.size)), dtype=torch.float32)


def filter_description(policy: Policy) -> dict[str, Any]:
    """The observation filter as ``signature.json`` describes it."""
    obs_filter = policy.observation_filter
    if isinstance(obs_filter, MeanStdFilter):
        return {
            "name": obs_filter.name,
            "count": int(obs_filter.count),
            "clip": float(obs_filter.clip),
            "epsilon": float(obs_filter.epsilon),
            "note": "applied inside the model: clip((x - mean) / (std + epsilon), -clip, clip) "
                    "with the statistics at export time (obs_mean, obs_inv_std in the weights)",
        }
    return {"name": obs_filter.name}


def _torch_dtype(dtype: Any) -> torch.dtype:
    return torch.from_numpy(np.zeros(0, dtype=np.dtype(dtype))).dtype


class ObservationPath(nn.Module):
    """``forward(obs) -> float32 [batch, obs_size]``: :meth:`cairn.Policy.process_observations`
    in torch (flatten or one-hot, then the observation filter with its current constants)."""

    obs_mean: torch.Tensor
    obs_inv_std: torch.Tensor

    def __init__(self, policy: Policy) -> None:
        super().__init__()
        space = policy.observation_space
        self.obs_size = int(policy.preprocessor.size)
        self.obs_discrete = isinstance(space, gym.spaces.Discrete)
        self.obs_start = int(space.start) if isinstance(space, gym.spaces.Discrete) else 0
        # A [batch, obs_size] float32 input needs no reshape: leave that node out of the graph.
        shape = tuple(space.shape or ()) if isinstance(space, (gym.spaces.Box, gym.spaces.MultiBinary)) else None
        self.obs_flat = shape is None or shape == (self.obs_size,)
        obs_filter = policy.observation_filter
        self.filtered = isinstance(obs_filter, MeanStdFilter)
        self.clip = 0.0
        if isinstance(obs_filter, MeanStdFilter):
            # The very arrays MeanStdFilter.apply uses, so that the results agree bit for bit.
            mean, inv_std = obs_filter.constants()
            self.register_buffer("obs_mean", torch.from_numpy(mean.copy()))
            self.register_buffer("obs_inv_std", torch.from_numpy(inv_std.copy()))
            self.clip = float(obs_filter.clip)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        if self.obs_discrete:
            # Comparing with arange one-hot encodes without one_hot's data-dependent checks.
            categories = torch.arange(self.obs_size, dtype=obs.dtype, device=obs.device)
            shifted = obs - self.obs_start if self.obs_start else obs
            x = (shifted.unsqueeze(-1) == categories).to(torch.float32)
        else:
            x = obs if obs.dtype == torch.float32 else obs.to(torch.float32)
            if not self.obs_flat:
                x = x.flatten(1)
        if self.filtered:
            x = torch.clamp((x - self.obs_mean) * self.obs_inv_std, -self.clip, self.clip)
        return x


class _ActorCriticModule(nn.Module):
    """``forward(obs) -> (action, *distribution_inputs, value)`` for an actor-critic policy."""

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

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, ...]:
        x = self.observations(obs)
        inputs = self.model.action_inputs(x)
        value = self.model.value(x)
        action = self.to_env(self.dist.deterministic(inputs))
        if isinstance(self.dist, DiagGaussian):
            return action, inputs[:, : self.size], inputs[:, self.size :], value
        return action, inputs, value


def _actor_critic_outputs(action_space: gym.Space[Any]) -> tuple[TensorSpec, ...]:
    value = TensorSpec("value", "float32", (BATCH,), "The value function's estimate V(obs).")
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
    distribution's inputs (``logits``, or ``mean`` and ``log_std``) and ``value``. Raises
    ExportError when the model lacks ``action_inputs(obs)``/``value(obs)`` or the
    distribution is not Categorical, MultiCategorical or DiagGaussian.
    """
    model = policy.model
    if not (callable(getattr(model, "action_inputs", None)) and callable(getattr(model, "value", None))):
        raise ExportError(
            f"{type(policy).__name__}'s model {type(model).__name__} has no "
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
        input=input_spec(policy.observation_space),
        outputs=_actor_critic_outputs(policy.action_space),
        example=example_input(policy),
        reference=reference,
        discrete_sizes=sizes,
        network_name=type(model).__name__,
        metadata={"observation_filter": filter_description(policy)},
    )


class _GreedyQModule(nn.Module):
    """``forward(obs) -> (argmax_a Q(obs, a) + start, Q(obs, .))``."""

    def __init__(self, policy: Policy, q_network: nn.Module, start: int) -> None:
        super().__init__()
        self.observations = ObservationPath(policy)
        self.model = copy.deepcopy(q_network).eval()
        self.start = start

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        q_values = self.model(self.observations(obs))
        action = q_values.argmax(dim=1)
        return (action + self.start if self.start else action), q_values


def q_value_export_graph(
    policy: Policy, q_network: nn.Module, q_values: Callable[[Sequence[Any]], np.ndarray],
) -> ExportGraph:
    """The export graph of a greedy Q-value policy with a Discrete action space.

    ``q_network`` maps processed observations to ``Q(obs, .)`` (``[batch, n]``);
    ``q_values`` is the policy's own raw-observations -> Q-values method, the reference for
    the ``q_values`` output, as ``compute_actions(obs, explore=False)`` is for ``action``.
    """
    space = policy.action_space
    if not isinstance(space, gym.spaces.Discrete):
        raise ExportError(f"A Q-value export graph needs a Discrete action space, got {space}.")
    n, start = int(space.n), int(space.start)

    def reference(observations: Sequence[Any]) -> list[np.ndarray]:
        return [policy.compute_actions(observations, explore=False), q_values(observations)]

    return ExportGraph(
        module=_GreedyQModule(policy, q_network, start),
        input=input_spec(policy.observation_space),
        outputs=(
            TensorSpec("action", "int64", (BATCH,),
                       f"Greedy action: argmax(q_values) + start ({start})."),
            TensorSpec("q_values", "float32", (BATCH, n), "Q(obs, a) for every action a."),
        ),
        example=example_input(policy),
        reference=reference,
        discrete_sizes=(n,),
        network_name=type(q_network).__name__,
        metadata={"observation_filter": filter_description(policy)},
    )
