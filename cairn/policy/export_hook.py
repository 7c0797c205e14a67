"""The export hook's data: what a policy hands to the exporter, and the exporter it hands it to.

:meth:`cairn.Policy.export_graph` returns an :class:`ExportGraph` (a torch module with named,
typed inputs and outputs, see :class:`TensorSpec`); :meth:`cairn.Policy.export_model` calls the
exporter that ``cairn.export`` registers in the registry
(:func:`cairn.registry.register_model_exporter`), so that the policy layer, below export,
offers the method without importing upward.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import nn

__all__ = [
    "BATCH",
    "TensorSpec",
    "ExportGraph",
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
