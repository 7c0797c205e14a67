"""Native model files inside checkpoints: ``policies/<id>/model/`` (or ``model/`` of a Policy
checkpoint), written when ``config.checkpointing(export_native_model_files=True)``.

An export failure never loses the checkpoint: it is written without ``model/``, its manifest
says why, and a warning is issued.
"""

from __future__ import annotations

import os
import shutil
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cairn.checkpoint.atomic import fsync_dir
from cairn.checkpoint.safetensors_io import file_entry
from cairn.errors import ExportError
from cairn.export.keras_files import KERAS_FILE, keras_onnx_bytes, save_keras_file
from cairn.export.model_export import trace_policy, write_onnx_file, write_torch_files
from cairn.export.onnx_model import DEFAULT_OPSET, ONNX_FILE, missing_onnx_packages
from cairn.export.signature import build_signature, write_signature
from cairn.policy.keras_config import uses_keras

if TYPE_CHECKING:
    from cairn.policy.policy import Policy

__all__ = ["MODEL_DIR", "write_native_model_files", "native_files_hold"]

MODEL_DIR = "model"
_CHUNK = 1 << 20
#: How a ``native_model`` record's ``skipped["onnx"]`` begins where the ONNX packages were missing.
_NOT_INSTALLED = "not installed: "


def _record(model_dir: Path, root: Path, files: dict[str, dict[str, Any]]) -> None:
    """fsync every file under ``model_dir`` and add its size and hash to ``files``."""
    for path in sorted(p for p in model_dir.rglob("*") if p.is_file()):
        with open(path, "rb") as f:
            entry = file_entry(iter(lambda: f.read(_CHUNK), b""))
            os.fsync(f.fileno())
        files[path.relative_to(root).as_posix()] = entry
    fsync_dir(model_dir)


def write_native_model_files(policy: Policy, root: Path, files: dict[str, dict[str, Any]], *,
                             full: bool = True) -> dict[str, Any]:
    """Export ``policy`` into ``root / "model"`` and record each file in ``files``.

    A Keras policy (``model.framework="keras"``) gets ``model.keras`` and, with ``full``,
    ``model.onnx`` from Keras' exporter (:mod:`cairn.export.keras_files`); its checkpoints call
    this with ``full=False`` (``model.keras`` alone) even without ``export_native_model_files``.

    Writes the torch program and weights, ``model.onnx`` (opset 18) when onnx, onnxscript and
    onnxruntime can be imported, and ``signature.json``.

    Returns:
        The manifest's ``native_model`` record: ``{"status": "ok", "formats": [...],
        "opset": 18 | None}`` (plus ``"skipped": {"onnx": reason}`` when ONNX was not
        written), or ``{"status": "failed", "reason": ...}`` when nothing could be exported.
    """
    model_dir = root / MODEL_DIR
    keras = uses_keras(policy.config)
    try:
        if keras:
            graph = policy.export_graph().with_outputs()  # the default outputs, as torch checkpoints
            written = save_keras_file(policy, graph, model_dir)
        else:
            traced = trace_policy(policy)
            graph, written = traced.graph, write_torch_files(traced, model_dir)
    except ExportError as exc:
        shutil.rmtree(model_dir, ignore_errors=True)
        without = KERAS_FILE if keras else "native model files"
        warnings.warn(f"The checkpoint of {policy!r} is written without {without}: {exc}", stacklevel=2)
        return {"status": "failed", "reason": str(exc)}
    record: dict[str, Any] = {"status": "ok", "formats": ["keras" if keras else "torch"], "opset": None}
    with_onnx = full or not keras  # full=False: a Keras policy's model.keras alone
    missing = missing_onnx_packages() if with_onnx else []
    if missing:
        record["skipped"] = {"onnx": f"{_NOT_INSTALLED}{', '.join(missing)}"}
    elif with_onnx:
        try:
            if keras:
                (model_dir / ONNX_FILE).write_bytes(keras_onnx_bytes(policy, graph, DEFAULT_OPSET))
                written["onnx"] = ONNX_FILE
            else:
                written.update(write_onnx_file(traced, model_dir, DEFAULT_OPSET))
            record["formats"].append("onnx")
            record["opset"] = DEFAULT_OPSET
        except ExportError as exc:
            record["skipped"] = {"onnx": str(exc)}
            warnings.warn(f"The checkpoint of {policy!r} has no model.onnx: {exc}", stacklevel=2)
    write_signature(model_dir, build_signature(policy, graph, written, opset=record["opset"]))
    _record(model_dir, root, files)
    return record


def native_files_hold(record: Mapping[str, Any], *, keras: bool, full: bool) -> bool:
    """Whether native files an earlier checkpoint of the same state recorded as ``record`` (its
    manifest's ``native_model``) are what :func:`write_native_model_files` would write here for a
    policy with ``keras`` (``uses_keras``) and ``full``, for an incremental save's reuse
    (``cairn.registry.NATIVE_MODEL_REUSES``).

    A failed record holds either way (nothing could be written: nothing was). A torch policy's
    files are the same with or without ``full``. A Keras policy's full record
    (``export_native_model_files``) names ``model.onnx`` in ``formats`` or says why it was
    ``skipped``; a record of ``model.keras`` alone does neither, so it holds only for the same
    ``full``. A record that skipped ONNX because the packages were missing holds only where one
    of them is missing here too (with them, this save writes ``model.onnx``); one that skipped it
    because the export failed for the model (an :class:`~cairn.errors.ExportError`) holds (the
    same model fails the same way), and so does every record that skipped nothing."""
    if record.get("status") != "ok":
        return True
    if keras and ("onnx" in record.get("formats", ()) or "skipped" in record) != full:
        return False
    skipped = record.get("skipped")
    reason = skipped.get("onnx") if isinstance(skipped, Mapping) else None
    if not isinstance(reason, str) or not reason.startswith(_NOT_INSTALLED):
        return True
    return bool(missing_onnx_packages())
