"""export_model: write a policy's observation-to-action path as a torch program or ONNX."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from cairn.checkpoint.storage import resolve_storage
from cairn.errors import ExportError
from cairn.export.keras_files import write_keras_export
from cairn.export.onnx_model import ONNX_FILE, check_opset, convert_to_onnx, require_onnx_packages
from cairn.export.signature import build_signature, write_signature
from cairn.export.summary import short_reason
from cairn.export.torch_program import (
    PROGRAM_FILE,
    WEIGHTS_FILE,
    load_program,
    program_output_dtypes,
    save_program,
    trace_program,
)
from cairn.export.verify import check_against_policy, onnx_runner, program_runner
from cairn.policy.export_hook import ExportGraph
from cairn.policy.keras_config import uses_keras

if TYPE_CHECKING:
    from cairn.policy.policy import Policy

__all__ = ["export_model", "Traced", "trace_policy", "write_torch_files", "write_onnx_file"]


@dataclass(frozen=True)
class Traced:
    """A policy's export graph traced once, from which each format is written."""

    policy: Policy
    graph: ExportGraph
    program: torch.export.ExportedProgram


def trace_policy(policy: Policy, extra_outputs: Sequence[str] = ()) -> Traced:
    """Trace the graph of ``policy``'s export hook (:meth:`~cairn.Policy.export_graph`), with
    the optional outputs named in ``extra_outputs``, with torch.export; raise ExportError if it
    cannot be."""
    graph = policy.export_graph().with_outputs(extra_outputs)
    program = trace_program(graph)
    # A network computing in another float dtype (float64) is cast to the declared outputs.
    cast = graph.with_output_dtypes(program_output_dtypes(program))
    return Traced(policy, graph, program) if cast is graph else Traced(policy, cast, trace_program(cast))


def _missing_dirs(directory: Path) -> list[Path]:
    """``directory`` and those of its parents that do not exist yet, deepest first."""
    missing = []
    for path in (directory, *directory.parents):
        if os.path.lexists(path):
            break
        missing.append(path)
    return missing


def _remove_if_empty(dirs: list[Path]) -> None:
    """Remove the directories an export created, deepest first, where nothing was left in them."""
    for path in dirs:
        try:
            path.rmdir()
        except OSError:  # not empty (or already gone): keep it and everything above it
            return


def write_torch_files(traced: Traced, directory: Path) -> dict[str, str]:
    """Write ``model.pt2`` and ``model.safetensors``, then check the program read back from
    disk against the policy; returns ``{"torch": ..., "torch_weights": ...}``.

    The files are written and checked in a staging folder inside ``directory`` and moved into
    place only once the check passed: an export that fails leaves an earlier export's files
    (the ones its ``signature.json`` describes) as they were."""
    directory.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".cairn-export-", dir=directory))
    try:
        try:
            save_program(traced.program, staging)
            loaded = load_program(staging)
            check_against_policy(traced.policy, program_runner(loaded), f"saved {PROGRAM_FILE}",
                                 graph=traced.graph)
        except (ExportError, OSError):
            raise
        except Exception as exc:  # serialisation of unusual graphs fails with many error types
            raise ExportError(f"Could not save or reload the torch program: {short_reason(exc)}.") from exc
        for name in (PROGRAM_FILE, WEIGHTS_FILE):
            os.replace(staging / name, directory / name)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return {"torch": PROGRAM_FILE, "torch_weights": WEIGHTS_FILE}


def write_onnx_file(traced: Traced, directory: Path, opset: int) -> dict[str, str]:
    """Convert to ONNX at ``opset``, check it in onnxruntime against the policy, then write
    ``model.onnx``; returns ``{"onnx": "model.onnx"}``."""
    policy, graph = traced.policy, traced.graph
    data = convert_to_onnx(
        traced.program, graph.examples, opset=opset, inputs=graph.inputs, outputs=graph.outputs,
        doc=f"{policy!r} exported by cairn; see signature.json beside this file.",
    )
    try:
        runner = onnx_runner(data)
    except Exception as exc:  # onnxruntime reports invalid graphs with its own error types
        raise ExportError(
            f"onnxruntime rejected the exported ONNX model at opset {opset}: {short_reason(exc)}."
        ) from exc
    check_against_policy(policy, runner, f"ONNX model (opset {opset})", graph=graph)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / ONNX_FILE).write_bytes(data)
    return {"onnx": ONNX_FILE}


def export_model(
    policy: Policy, export_dir: str | os.PathLike[str], *, onnx: int | None = None,
    extra_outputs: Sequence[str] = (), storage_options: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Write ``policy``'s observation-to-action path in a native format, with ``signature.json``.

    Without ``onnx``: ``model.pt2`` (load with ``torch.export.load``) and ``model.safetensors``;
    for a Keras policy (``model.framework="keras"``), ``model.keras`` (docs/keras.md).
    With ``onnx=<opset>`` (one of ``SUPPORTED_OPSETS``, default choice 18): ``model.onnx``.
    The model is the graph of the policy's export hook (:meth:`~cairn.Policy.export_graph`):
    it takes raw observations (see :mod:`cairn.export.conventions`) and returns the
    deterministic action first, then the policy's other outputs (an actor-critic policy's
    action-distribution inputs, a DQN policy's Q-values), and the optional outputs asked for
    (an actor-critic policy's ``value``); it is checked against the policy's own
    ``compute_actions`` (and the reference of each other output) before this returns.

    Args:
        policy: The policy to export; it is not changed.
        export_dir: Directory to write into (created if needed; same-named files replaced),
            or an object-store URL (``s3://...``; the files are written locally, checked, then
            uploaded under that prefix).
        onnx: ONNX opset to export, or None for the torch program.
        extra_outputs: Optional outputs to export as well, by name (``["value"]`` for an
            actor-critic policy). Left out by default: each output costs single-observation
            latency in onnxruntime (``bench/export_inference.py``).
        storage_options: Options of a URL's fsspec file system (docs/storage.md).

    Returns:
        The signature document written to ``signature.json``.

    Raises:
        ExportError: The model cannot be traced or converted, an ONNX package is missing, the
            opset is not supported, or the exported model disagrees with the policy.
    """
    opset = None if onnx is None else check_opset(onnx)
    if opset is not None:
        require_onnx_packages()  # before tracing: fail in a second, not after a minute
    # In place for a local directory; written locally, checked, then uploaded for a URL.
    with resolve_storage(export_dir, storage_options=storage_options).loose_files() as directory:
        return _export_into(policy, directory, opset=opset, extra_outputs=extra_outputs)


def _export_into(policy: Policy, directory: Path, *, opset: int | None,
                 extra_outputs: Sequence[str]) -> dict[str, Any]:
    """:func:`export_model` into the local ``directory``."""
    if directory.exists() and not directory.is_dir():
        raise ExportError(f"Export directory {directory} exists and is not a directory.")
    created = _missing_dirs(directory)
    try:
        if uses_keras(policy.config):  # model.keras, or Keras' own ONNX export (docs/keras.md)
            graph, files = write_keras_export(policy, directory, opset=opset, extra_outputs=extra_outputs)
        else:
            traced = trace_policy(policy, extra_outputs)
            directory.mkdir(parents=True, exist_ok=True)
            files = (write_torch_files(traced, directory) if opset is None
                     else write_onnx_file(traced, directory, opset))
            graph = traced.graph
        signature = build_signature(policy, graph, files, opset=opset)
        write_signature(directory, signature)
    except BaseException:
        _remove_if_empty(created)  # a failed export leaves no empty directory behind
        raise
    return signature
