"""``signature.json``: what a consumer needs to call the exported model without cairn."""

from __future__ import annotations

import importlib.metadata
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cairn.checkpoint.manifest import library_versions
from cairn.policy.export_hook import ExportGraph
from cairn.space_json import space_to_json

if TYPE_CHECKING:
    from cairn.policy.policy import Policy

__all__ = ["SIGNATURE_FILE", "SIGNATURE_FORMAT", "SIGNATURE_VERSION", "build_signature",
           "write_signature"]

SIGNATURE_FILE = "signature.json"
SIGNATURE_FORMAT = "cairn-native-model"
SIGNATURE_VERSION = 1


def _versions(formats: list[str]) -> dict[str, str]:
    versions = library_versions()
    if "onnx" in formats:
        for name in ("onnx", "onnxscript", "onnxruntime"):
            try:
                versions[name] = importlib.metadata.version(name)
            except importlib.metadata.PackageNotFoundError:
                continue
    return versions


def build_signature(
    policy: Policy, graph: ExportGraph, files: dict[str, str], *, opset: int | None,
) -> dict[str, Any]:
    """The signature document for ``graph``, exported from ``policy``.

    ``files`` maps each written format (``"torch"``, ``"torch_weights"``, ``"onnx"``) to its
    file name; ``opset`` is the ONNX opset, or None without an ONNX file. ``inputs`` lists
    ``obs``, then a masked policy's ``action_mask``. The graph's
    ``metadata`` (e.g. ``observation_filter``) is added as it is.
    """
    signature: dict[str, Any] = {
        "format": SIGNATURE_FORMAT,
        "format_version": SIGNATURE_VERSION,
        "policy_class": policy.policy_class_reference,
        "files": dict(files),
        "inputs": [spec.to_json() for spec in graph.inputs],
        "outputs": [spec.to_json() for spec in graph.outputs],
        "observation_space": space_to_json(policy.observation_space),
        "action_space": space_to_json(policy.action_space),
    }
    signature.update(graph.metadata)
    signature["opset"] = opset
    signature["versions"] = _versions(list(files))
    return signature


def write_signature(directory: Path, signature: dict[str, Any]) -> str:
    """Write ``signature.json`` into ``directory``; return its name."""
    text = json.dumps(signature, indent=1, allow_nan=False)
    (directory / SIGNATURE_FILE).write_text(text + "\n", encoding="utf-8")
    return SIGNATURE_FILE
