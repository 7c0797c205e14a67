"""The export hook's data: what a policy hands to the exporter, and the exporter it hands it to.

:meth:`cairn.Policy.export_graph` returns an :class:`ExportGraph` (a torch module with named,
typed inputs and outputs, see :class:`TensorSpec`); :meth:`cairn.Policy.export_model` calls
``cairn.export``'s exporter, which :data:`cairn.registry.MODEL_EXPORTER` names (resolved at the
call; nothing is registered at import time), so that the policy layer, below export, offers
the method without importing upward.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from cairn.errors import ExportError
from cairn.policy.action_masking import MaskedObservationPreprocessor
from cairn.policy.distributions import ActionDistribution
from cairn.policy.filters import MeanStdFilter, NoFilter
from cairn.spaces import ObservationPreprocessor

__all__ = [
    "BATCH",
    "TensorSpec",
    "ExportGraph",
    "ExportedPolicy",
]

BATCH = "batch"
"""Name of the dynamic first dimension of every input and output."""

Dim = int | str


class ExportedPolicy(Protocol):
    """What the export graph reads of a policy: :class:`cairn.policy.policy.Policy` offers it,
    and the export modules, which it imports, name it here rather than import it back."""

    @property
    def model(self) -> nn.Module: ...
    @property
    def dist(self) -> ActionDistribution: ...
    @property
    def action_space(self) -> gym.Space[Any]: ...
    @property
    def network_observation_space(self) -> gym.Space[Any]: ...
    @property
    def action_mask_size(self) -> int: ...
    @property
    def preprocessor(self) -> ObservationPreprocessor | MaskedObservationPreprocessor: ...
    @property
    def observation_filter(self) -> NoFilter | MeanStdFilter: ...
    @property
    def recurrent(self) -> object | None: ...

    def compute_actions(self, obs_batch: Sequence[Any] | np.ndarray, *, explore: bool = True,
                        state: Sequence[Any] | None = None) -> Any: ...

    def process_observations(self, obs_batch: Sequence[Any] | np.ndarray, *,
                             update: bool) -> np.ndarray: ...

    def get_initial_state(self) -> list[np.ndarray]: ...


@dataclass(frozen=True)
class TensorSpec:
    """Name, numpy dtype name, shape (``"batch"`` for the dynamic dimension) and meaning.

    An ``optional`` output (an actor-critic policy's ``value``) is left out of an export unless
    it is asked for by name (``export_model(..., extra_outputs=["value"])``): every output
    costs latency in onnxruntime, and serving needs the action.
    """

    name: str
    dtype: str
    shape: tuple[Dim, ...]
    description: str
    optional: bool = False

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
        module: ``forward(obs, *extra inputs) -> tuple`` of the outputs, in :attr:`outputs`
            order; the environment-ready deterministic action first. The inputs come
            positionally, in :attr:`inputs` order. A snapshot: exporting never changes the
            policy, and later training does not reach the module.
        input: The ``obs`` input (:func:`input_spec`).
        outputs: Name, dtype, shape and meaning of each output.
        example: A valid ``obs`` input to trace with (2 rows, so that the batch stays dynamic).
        reference: Raw observations -> what each output must be, computed by the policy's own
            acting path (``compute_actions(obs, explore=False)`` first).
        discrete_sizes: For discrete actions, the number of choices per action component;
            output 1 then holds their scores (logits, Q-values), and an exported action (each
            component) may differ from the reference only by another action whose score nearly
            ties with the best, as the reference's does. None for
            continuous actions (compared within a tolerance like every other output).
        network_name: The network's class name, for error messages.
        metadata: Extra ``signature.json`` entries (e.g. ``observation_filter``).
        extra_inputs: The inputs after ``obs``: a masked policy's ``action_mask``
            (:mod:`cairn.policy.action_mask_input`); none for other policies.
        extra_examples: A valid value of each of :attr:`extra_inputs`, with the rows of
            :attr:`example`.
        check_inputs: ``(n, seed) -> arrays``: values of the extra inputs that the model files
            are checked with, ``n`` rows each, for inputs that are not part of the observation
            (a recurrent policy's state); ``reference`` then takes them after the observations.
            None: the extra inputs come from the observations (``cairn.export.model_feeds``).

    A module that defines ``select_outputs(keep) -> module`` drops unrequested optional
    outputs itself (keeping its own input names); others are wrapped.
    """

    module: nn.Module
    input: TensorSpec
    outputs: tuple[TensorSpec, ...]
    example: torch.Tensor
    reference: Callable[..., list[np.ndarray]]
    discrete_sizes: tuple[int, ...] | None
    network_name: str
    metadata: Mapping[str, Any] = field(default_factory=dict)
    extra_inputs: tuple[TensorSpec, ...] = ()
    extra_examples: tuple[torch.Tensor, ...] = ()
    check_inputs: Callable[[int, int], tuple[np.ndarray, ...]] | None = None

    def __post_init__(self) -> None:
        if len(self.extra_inputs) != len(self.extra_examples):
            raise ExportError(
                f"The {self.network_name} export graph has {len(self.extra_inputs)} extra inputs "
                f"({[s.name for s in self.extra_inputs]}) but {len(self.extra_examples)} extra "
                "examples: give one example tensor per input."
            )

    @property
    def inputs(self) -> tuple[TensorSpec, ...]:
        """Every input, in the order the module takes them: ``obs`` first."""
        return (self.input, *self.extra_inputs)

    @property
    def examples(self) -> tuple[torch.Tensor, ...]:
        """An example of each of :attr:`inputs`, in that order."""
        return (self.example, *self.extra_examples)

    def with_outputs(self, extra_outputs: Sequence[str] = ()) -> ExportGraph:
        """This graph with its required outputs plus the optional ones named in
        ``extra_outputs`` (in :attr:`outputs` order); raises ExportError for a name that is
        not an optional output of this graph."""
        optional = [spec.name for spec in self.outputs if spec.optional]
        unknown = [name for name in extra_outputs if name not in optional]
        if unknown:
            raise ExportError(
                f"extra_outputs={list(extra_outputs)!r}: {unknown} are not optional outputs of "
                f"this {self.network_name} export; its optional outputs are {optional} (the "
                f"others, {[s.name for s in self.outputs if not s.optional]}, are always exported)."
            )
        keep = [i for i, spec in enumerate(self.outputs) if not spec.optional or spec.name in extra_outputs]
        if len(keep) == len(self.outputs):
            return self
        reference = self.reference

        def selected_reference(observations: Sequence[Any], *more: np.ndarray) -> list[np.ndarray]:
            expected = reference(observations, *more)
            return [expected[i] for i in keep]

        select = getattr(self.module, "select_outputs", None)
        return replace(
            self, module=select(keep) if callable(select) else _SelectOutputs(self.module, keep),
            outputs=tuple(self.outputs[i] for i in keep), reference=selected_reference)


    def with_output_dtypes(self, dtypes: Sequence[torch.dtype]) -> ExportGraph:
        """This graph with its module's floating outputs cast to the dtypes :attr:`outputs`
        declare, given ``dtypes``, the ones the module gives (its traced program's): a user's
        network computing in float64 gave ``tensor(double)`` outputs under a ``signature.json``
        that says float32. The reference is cast the same way (numpy and torch both round to
        nearest even: the same values), so the export check compares what the files give.
        Itself when every output already has its declared dtype."""
        declared = [torch.from_numpy(np.zeros(0, spec.dtype)).dtype for spec in self.outputs]
        casts = {i: want for i, (want, dtype) in enumerate(zip(declared, dtypes, strict=True))
                 if want.is_floating_point and dtype.is_floating_point and dtype != want}
        if not casts:
            return self
        reference = self.reference

        def cast_reference(observations: Sequence[Any], *more: np.ndarray) -> list[np.ndarray]:
            expected = reference(observations, *more)
            return [np.asarray(out).astype(self.outputs[i].dtype) if i in casts else out
                    for i, out in enumerate(expected)]

        module = _SelectOutputs(self.module, range(len(self.outputs)), casts)
        return replace(self, module=module, reference=cast_reference)


class _SelectOutputs(nn.Module):
    """``forward(obs, action_mask=None, *more)``: the outputs of ``module`` at ``keep``, in order
    (tracing drops the computation of the others), those at the indices of ``casts`` (in
    ``keep``'s order) cast to its dtypes.

    ``module``'s parameters, buffers and submodules are registered here under their own names,
    so the exported weights keep the names they have in ``module`` (no wrapper prefix).
    """

    selected_from: nn.Module

    def __init__(self, module: nn.Module, keep: Sequence[int],
                 casts: Mapping[int, torch.dtype] | None = None) -> None:
        super().__init__()
        for name, child in module.named_children():
            self.add_module(name, child)
        for name, parameter in module.named_parameters(recurse=False):
            self.register_parameter(name, parameter)
        for name, buffer in module.named_buffers(recurse=False):
            self.register_buffer(name, buffer)
        object.__setattr__(self, "selected_from", module)  # not a submodule: no name prefix
        self.keep = tuple(keep)
        self.casts = dict(casts or {})

    def forward(self, obs: torch.Tensor, action_mask: torch.Tensor | None = None,
                *more: torch.Tensor) -> tuple[torch.Tensor, ...]:
        # Named parameters, not one *inputs: torch.export names a program's inputs after them.
        inputs = (obs,) if action_mask is None else (obs, action_mask, *more)
        outputs = self.selected_from(*inputs)
        kept = (outputs[i] for i in self.keep)
        return tuple(out.to(self.casts[k]) if k in self.casts else out for k, out in enumerate(kept))
