"""Native model export: a policy's observation-to-action path as files that load without cairn.

Each policy builds its own export graph (:meth:`cairn.Policy.export_graph`, the hook); this
package only drives it:

* :func:`export_model` writes a ``torch.export`` program (``model.pt2`` + ``model.safetensors``)
  or ``model.onnx``, with ``signature.json``;
* :func:`write_native_model_files` puts all of them into a checkpoint's ``model/`` directory
  (``config.checkpointing(export_native_model_files=True)``);
* :func:`model_inputs` turns raw observations into the model's ``obs`` input, and
  :func:`model_feeds` into all its inputs by name (``obs``, and a masked policy's
  ``action_mask``).

The conventions are documented in ``docs/export.md`` and :mod:`cairn.export.conventions`.
"""

from cairn.export.checkpoint_files import MODEL_DIR, write_native_model_files
from cairn.export.conventions import BATCH, TensorSpec, input_spec, model_feeds, model_inputs
from cairn.export.model_export import export_model
from cairn.export.onnx_model import DEFAULT_OPSET, ONNX_FILE, SUPPORTED_OPSETS
from cairn.export.signature import SIGNATURE_FILE
from cairn.export.torch_program import PROGRAM_FILE, WEIGHTS_FILE

__all__ = [
    "export_model",
    "write_native_model_files",
    "model_inputs",
    "model_feeds",
    "input_spec",
    "TensorSpec",
    "BATCH",
    "DEFAULT_OPSET",
    "SUPPORTED_OPSETS",
    "MODEL_DIR",
    "ONNX_FILE",
    "PROGRAM_FILE",
    "WEIGHTS_FILE",
    "SIGNATURE_FILE",
]
