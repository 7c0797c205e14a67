"""The ONNX form: ``model.onnx``, converted from the traced program by torch's dynamo exporter.

The exporter needs ``onnx`` and ``onnxscript``; checking a model needs ``onnxruntime``
(``pip install 'cairn-rl[onnx]'``). All three are imported here, inside the functions.
"""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import warnings
from collections.abc import Iterator, Sequence
from typing import Any

import torch

from cairn.errors import ExportError
from cairn.export.conventions import BATCH, TensorSpec
from cairn.export.onnx_fold import fold_observation_filter
from cairn.export.summary import short_reason

__all__ = [
    "ONNX_FILE",
    "DEFAULT_OPSET",
    "SUPPORTED_OPSETS",
    "ONNX_PACKAGES",
    "ONNX_INSTALL_HINT",
    "missing_onnx_packages",
    "require_onnx_packages",
    "check_opset",
    "convert_to_onnx",
]

ONNX_FILE = "model.onnx"
DEFAULT_OPSET = 18
# torch's exporter writes opset 18 natively and converts to others. Opset 17 Categorical graphs
# were rejected by onnxruntime (ReduceLogSumExp); every opset listed here is tested.
SUPPORTED_OPSETS = (18, 19, 20, 21, 22, 23)
ONNX_PACKAGES = ("onnx", "onnxscript", "onnxruntime")
ONNX_INSTALL_HINT = "`pip install 'cairn-rl[onnx]'` (in a cairn checkout: `pip install -e '.[onnx]'`)"
"""The commands that install the ``onnx`` extra, for error messages."""
# torch.onnx and the libraries under it log dozens of lines per export (operators skipped
# because torchvision is absent, deprecations inside torch): not the user's business.
_EXPORTER_LOGGERS = ("torch.onnx", "onnxscript", "onnx_ir")
_log = logging.getLogger(__name__)


def _importable(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):  # a broken install, or sys.modules[name] without a spec
        return False


def missing_onnx_packages() -> list[str]:
    """The packages ONNX export needs that cannot be imported here."""
    return [name for name in ONNX_PACKAGES if not _importable(name)]


def require_onnx_packages() -> None:
    """Raise ExportError, saying how to install them, unless the ONNX packages are importable."""
    missing = missing_onnx_packages()
    if missing:
        raise ExportError(
            f"ONNX export needs {', '.join(missing)}, which cannot be imported; install them "
            f"with {ONNX_INSTALL_HINT}."
        )


@contextlib.contextmanager
def quiet_exporter() -> Iterator[None]:
    """Keep the ONNX exporter's warnings and log records below ERROR off the terminal.

    Failures still raise; the warnings go to this module's logger at DEBUG level, for whoever
    wants to see them (``logging.getLogger("cairn.export").setLevel(logging.DEBUG)``).
    """
    loggers = [logging.getLogger(name) for name in _EXPORTER_LOGGERS]
    levels = [logger.level for logger in loggers]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for logger in loggers:
            logger.setLevel(logging.ERROR)
        try:
            yield
        finally:
            for logger, level in zip(loggers, levels, strict=True):
                logger.setLevel(level)
    for warning in caught:
        _log.debug("during ONNX export: %s: %s", warning.category.__name__, warning.message)


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
    program: torch.export.ExportedProgram, examples: Sequence[torch.Tensor], *, opset: int,
    inputs: Sequence[TensorSpec], outputs: Sequence[TensorSpec], doc: str,
) -> bytes:
    """``program`` as a serialised ONNX model at ``opset``, inputs (one example tensor each,
    in order) and outputs named and documented; raises ExportError when the exporter fails or
    packages are missing."""
    require_onnx_packages()
    try:
        with quiet_exporter():
            onnx_program = torch.onnx.export(
                program, tuple(examples), dynamo=True, opset_version=opset,
                input_names=[spec.name for spec in inputs],
                output_names=[spec.name for spec in outputs],
                verbose=False,
            )
        proto = onnx_program.model_proto  # type: ignore[union-attr]  # dynamo=True returns one
    except ImportError as exc:  # found but broken: an install that did not finish, say
        raise ExportError(
            f"torch.onnx.export could not import what it needs: {short_reason(exc)}; reinstall "
            f"the ONNX packages with {ONNX_INSTALL_HINT}."
        ) from exc
    except Exception as exc:  # the exporter raises many error types; all mean "not exportable"
        raise ExportError(
            f"torch.onnx.export could not convert the model to ONNX opset {opset}: "
            f"{short_reason(exc)}."
        ) from exc
    fold_observation_filter(proto)
    _name_batch_dims(proto, {spec.name for spec in [*inputs, *outputs]})
    descriptions = {spec.name: spec.description for spec in [*inputs, *outputs]}
    for value in [*proto.graph.input, *proto.graph.output]:
        value.doc_string = descriptions.get(value.name, "")
    proto.doc_string = doc
    proto.producer_name = "cairn"
    return bytes(proto.SerializeToString())
