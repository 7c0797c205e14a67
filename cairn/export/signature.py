"""``signature.json``: what a consumer needs to call the exported model without cairn."""

from __future__ import annotations

import importlib.metadata
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cairn.checkpoint.manifest import library_versions
from cairn.export.conventions import TensorSpec, input_spec, output_specs
from cairn.policy.filters import MeanStdFilter
from cairn.spaces import space_to_json

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


def _filter_description(policy: Policy) -> dict[str, Any]:
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


def build_signature(
    policy: Policy, files: dict[str, str], *, opset: int | None,
) -> dict[str, Any]:
    """The signature document for a model exported from ``policy``.

    ``files`` maps each written format (``"torch"``, ``"torch_weights"``, ``"onnx"``) to its
    file name; ``opset`` is the ONNX opset, or None without an ONNX file.
    """
    inputs: list[TensorSpec] = [input_spec(policy.observation_space)]
    outputs = output_specs(policy.action_space)
    return {
        "format": SIGNATURE_FORMAT,
        "format_version": SIGNATURE_VERSION,
        "policy_class": policy.policy_class_reference,
        "files": dict(files),
        "inputs": [spec.to_json() for spec in inputs],
        "outputs": [spec.to_json() for spec in outputs],
        "observation_space": space_to_json(policy.observation_space),
        "action_space": space_to_json(policy.action_space),
        "observation_filter": _filter_description(policy),
        "opset": opset,
        "versions": _versions(list(files)),
    }


def write_signature(directory: Path, signature: dict[str, Any]) -> str:
    """Write ``signature.json`` into ``directory``; return its name."""
    text = json.dumps(signature, indent=1, allow_nan=False)
    (directory / SIGNATURE_FILE).write_text(text + "\n", encoding="utf-8")
    return SIGNATURE_FILE
