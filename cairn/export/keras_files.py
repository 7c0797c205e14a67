"""The native files of a Keras policy: ``model.keras`` (always) and ``model.onnx`` (Keras' export).

* ``model.keras``: Keras' own format (a zip of ``config.json``, ``metadata.json`` and
  ``model.weights.h5``: JSON and HDF5, no pickle), holding the serving model of
  :mod:`cairn.export.keras_serving` (raw observations -> ``action``, then the logits or
  mean/log-std, or Q-values). ``keras.saving.load_model(path)`` reads it in safe mode without
  cairn. Every checkpoint of a Keras policy holds it in ``model/`` (docs/keras.md).
* ``model.onnx``: the same model through ``keras_model.export(path, format="onnx")`` (Keras
  >= 3.8; on the torch backend it calls ``torch.onnx``), with cairn's input/output names.

Every file is read back and checked against the policy (``cairn.export.verify``) before it is
kept, as torch exports are. A masked policy's model takes ``[obs, action_mask]``.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cairn.errors import ExportError
from cairn.export.onnx_model import ONNX_FILE, quiet_exporter
from cairn.export.summary import short_reason
from cairn.export.verify import check_against_policy, onnx_runner
from cairn.policy.keras_backend import import_keras, import_tensorflow_quietly

if TYPE_CHECKING:
    from cairn.policy.export_hook import ExportGraph
    from cairn.policy.policy import Policy

__all__ = ["KERAS_FILE", "KERAS_ONNX_OPSETS", "save_keras_file", "keras_file_runner", "keras_onnx_bytes",
           "write_keras_export"]

KERAS_FILE = "model.keras"
#: Opsets Keras' exporter (torch's TorchScript-based ONNX exporter, used for a dynamic batch)
#: writes and onnxruntime loads, each tested.
KERAS_ONNX_OPSETS = (18, 19, 20)


def keras_file_runner(path: str | Path) -> Any:
    """Load ``path`` with ``keras.saving.load_model`` (safe mode) and return a numpy runner."""
    keras = import_keras("Reading model.keras")
    model = keras.saving.load_model(str(path), compile=False, safe_mode=True)

    def run(*inputs: Any) -> list[Any]:
        feed = inputs[0] if len(inputs) == 1 else list(inputs)  # a masked policy's [obs, action_mask]
        outputs = model(feed, training=False)
        if not isinstance(outputs, (list, tuple)):  # a model of one output (TD3's action) returns it alone
            outputs = [outputs]
        return [keras.ops.convert_to_numpy(out) for out in outputs]

    return run


def save_keras_file(policy: Policy, graph: ExportGraph, directory: Path) -> dict[str, str]:
    """Write ``directory / "model.keras"`` (the serving model of ``graph``), read it back in safe
    mode and check it against the policy; returns ``{"keras": "model.keras"}``. The file is
    written and checked in a staging folder and moved into place once the check passed: a
    failed export leaves an earlier ``model.keras`` in ``directory`` as it was."""
    from cairn.export.keras_serving import keras_network, serving_model

    # First: a torch policy is refused here, and Keras is imported on the torch backend before
    # TensorFlow is. TensorFlow imported first imports Keras on its own backend, on which no
    # Keras policy of this process could be built any more.
    keras_network(policy)
    directory.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".cairn-export-", dir=directory))
    path = staging / KERAS_FILE
    import_tensorflow_quietly()  # Keras' saving imports it, with lines on stderr
    try:
        try:
            # NHWC convolutions: TensorFlow serves this file (SavedModel) on CPUs without oneDNN too.
            serving_model(policy, graph, channels_last=True).save(str(path))
            check_against_policy(policy, keras_file_runner(path), f"saved {KERAS_FILE}", graph=graph)
        except (ExportError, OSError):
            raise
        except Exception as exc:  # Keras reports unserialisable models with many error types
            raise ExportError(
                f"Could not save or reload the Keras model as {KERAS_FILE}: {short_reason(exc)}. A "
                "user's Keras model must be serialisable by Keras (built-in layers, or classes "
                "registered with keras.saving.register_keras_serializable)."
            ) from exc
        os.replace(path, directory / KERAS_FILE)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return {"keras": KERAS_FILE}


def _rename_outputs(proto: Any, names: list[str]) -> None:
    """Give the graph's outputs cairn's names (Keras' exporter numbers them)."""
    for value, name in zip(proto.graph.output, names, strict=True):
        old = value.name
        if old == name:
            continue
        for node in proto.graph.node:
            node.output[:] = [name if o == old else o for o in node.output]
            node.input[:] = [name if i == old else i for i in node.input]
        value.name = name


def keras_onnx_bytes(policy: Policy, graph: ExportGraph, opset: int) -> bytes:
    """The serving model as ONNX at ``opset`` through Keras' own exporter, outputs named as in
    ``graph``, checked in onnxruntime against the policy."""
    import onnx

    from cairn.export.keras_serving import serving_model

    if opset not in KERAS_ONNX_OPSETS:
        raise ExportError(f"Keras policies export ONNX at opsets {list(KERAS_ONNX_OPSETS)}, not {opset} "
                          "(Keras' exporter uses torch's TorchScript-based converter for a dynamic batch).")
    model = serving_model(policy, graph, channels_last=False)  # NCHW, as ONNX's Conv and torch convolve
    tmp = Path(tempfile.mkdtemp(prefix="cairn-keras-onnx-"))
    try:
        examples = [example.numpy() for example in graph.examples]
        # Keras' exporter takes only models that have been called.
        model(examples[0] if len(examples) == 1 else examples)
        with quiet_exporter():
            model.export(str(tmp / ONNX_FILE), format="onnx", opset_version=opset, verbose=False)
        proto = onnx.load(str(tmp / ONNX_FILE))
    except Exception as exc:  # the exporter raises many error types; all mean "not exportable"
        raise ExportError(f"Keras' ONNX export failed at opset {opset}: {short_reason(exc)}.") from exc
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    _rename_outputs(proto, [spec.name for spec in graph.outputs])
    descriptions = {spec.name: spec.description for spec in [*graph.inputs, *graph.outputs]}
    for value in [*proto.graph.input, *proto.graph.output]:
        value.doc_string = descriptions.get(value.name, "")
    proto.doc_string = f"{policy!r} (Keras) exported by cairn; see signature.json beside this file."
    data = bytes(proto.SerializeToString())
    try:
        runner = onnx_runner(data)
    except Exception as exc:  # onnxruntime reports invalid graphs with its own error types
        raise ExportError(f"onnxruntime rejected Keras' ONNX model at opset {opset}: "
                          f"{short_reason(exc)}.") from exc
    check_against_policy(policy, runner, f"ONNX model of the Keras policy (opset {opset})", graph=graph)
    return data


def write_keras_export(policy: Policy, directory: Path, *, opset: int | None,
                       extra_outputs: Sequence[str] = ()) -> tuple[ExportGraph, dict[str, str]]:
    """``export_model`` for a Keras policy: ``model.keras`` without ``opset``, else
    ``model.onnx`` from Keras' exporter; returns the graph (outputs chosen) and the files."""
    graph = policy.export_graph().with_outputs(extra_outputs)
    if opset is None:
        return graph, save_keras_file(policy, graph, directory)
    data = keras_onnx_bytes(policy, graph, opset)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / ONNX_FILE).write_bytes(data)
    return graph, {"onnx": ONNX_FILE}
