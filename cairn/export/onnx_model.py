"""The ONNX form: ``model.onnx``, converted from the traced program by torch's dynamo exporter.

The exporter needs ``onnx`` and ``onnxscript``; checking a model needs ``onnxruntime``
(``pip install cairn-rl[onnx]``). All three are imported here, inside the functions.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from typing import Any

import torch

from cairn.errors import ExportError
from cairn.export.conventions import BATCH, TensorSpec
from cairn.export.summary import short_reason

__all__ = [
    "ONNX_FILE",
    "DEFAULT_OPSET",
    "SUPPORTED_OPSETS",
    "ONNX_PACKAGES",
    "missing_onnx_packages",
    "check_opset",
    "convert_to_onnx",
]

ONNX_FILE = "model.onnx"
DEFAULT_OPSET = 18
# torch's exporter writes opset 18 natively and converts to others. Opset 17 Categorical graphs
# were rejected by onnxruntime (ReduceLogSumExp); every opset listed here is tested.
SUPPORTED_OPSETS = (18, 19, 20, 21, 22, 23)
ONNX_PACKAGES = ("onnx", "onnxscript", "onnxruntime")


def missing_onnx_packages() -> list[str]:
    """The packages ONNX export needs that cannot be imported here."""
    return [name for name in ONNX_PACKAGES if importlib.util.find_spec(name) is None]


def check_opset(opset: Any) -> int:
    """Return ``opset`` if cairn exports it, else raise ExportError naming the choices."""
    if isinstance(opset, bool) or not isinstance(opset, int) or opset not in SUPPORTED_OPSETS:
        raise ExportError(
            f"Got invalid onnx={opset!r}. Valid opsets are: {list(SUPPORTED_OPSETS)} "
            f"(default {DEFAULT_OPSET})."
        )
    return opset


def _name_batch_dims(proto: Any, names: set[str]) -> None:
    """Call the exporter's symbol for the batch dimension ``batch`` in inputs and outputs."""
    symbols = set()
    for value in proto.graph.input:
        dim = value.type.tensor_type.shape.dim[0]
        if dim.dim_param:
            symbols.add(dim.dim_param)
    for value in [*proto.graph.input, *proto.graph.output]:
        if value.name not in names or not value.type.tensor_type.shape.dim:
            continue
        dim = value.type.tensor_type.shape.dim[0]
        if dim.dim_param in symbols:
            dim.dim_param = BATCH


def convert_to_onnx(
    program: torch.export.ExportedProgram, example: torch.Tensor, *, opset: int,
    inputs: Sequence[TensorSpec], outputs: Sequence[TensorSpec], doc: str,
) -> bytes:
    """``program`` as a serialised ONNX model at ``opset``, inputs and outputs named and
    documented; raises ExportError when the exporter fails or packages are missing."""
    missing = missing_onnx_packages()
    if missing:
        raise ExportError(
            f"ONNX export needs {', '.join(missing)}, which cannot be imported; install them "
            "with `pip install cairn-rl[onnx]`."
        )
    try:
        onnx_program = torch.onnx.export(
            program, (example,), dynamo=True, opset_version=opset,
            input_names=[spec.name for spec in inputs],
            output_names=[spec.name for spec in outputs],
            verbose=False,
        )
        proto = onnx_program.model_proto  # type: ignore[union-attr]  # dynamo=True returns one
    except Exception as exc:  # the exporter raises many error types; all mean "not exportable"
        raise ExportError(
            f"torch.onnx.export could not convert the model to ONNX opset {opset}: "
            f"{short_reason(exc)}."
        ) from exc
    _name_batch_dims(proto, {spec.name for spec in [*inputs, *outputs]})
    descriptions = {spec.name: spec.description for spec in [*inputs, *outputs]}
    for value in [*proto.graph.input, *proto.graph.output]:
        value.doc_string = descriptions.get(value.name, "")
    proto.doc_string = doc
    proto.producer_name = "cairn"
    return bytes(proto.SerializeToString())
