"""Run by :mod:`cairn.export.keras_saved_model` as a script in a subprocess, on Keras'
TensorFlow backend: load ``model.keras`` (safe mode), write it as a TensorFlow SavedModel, load
that SavedModel back with TensorFlow alone and run it on the given inputs.

It imports neither cairn nor torch: Keras picks its backend once per process, and cairn's own
process runs Keras on torch. Arguments: ``model.keras``, the SavedModel directory to write,
an ``.npz`` of the model inputs (``arr_0``, ... in the model's input order: ``obs``, and a
masked policy's ``action_mask``), the ``.npz`` to write the outputs into (``output_0``, ...).
"""

from __future__ import annotations

import os
import sys
from typing import Any


def main(argv: list[str]) -> None:
    keras_file, saved_model_dir, inputs_file, outputs_file = argv
    os.environ["KERAS_BACKEND"] = "tensorflow"
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import keras
    import numpy as np
    import tensorflow as tf

    if keras.backend.backend() != "tensorflow":
        raise SystemExit(f"Keras runs on {keras.backend.backend()!r} here, not TensorFlow")
    model = keras.saving.load_model(keras_file, compile=False, safe_mode=True)
    model.export(saved_model_dir, format="tf_saved_model", verbose=False)
    served = tf.saved_model.load(saved_model_dir)
    with np.load(inputs_file, allow_pickle=False) as data:
        inputs = [tf.constant(data[f"arr_{i}"]) for i in range(len(data.files))]
    outputs = served.serve(inputs[0] if len(inputs) == 1 else inputs)
    if not isinstance(outputs, (list, tuple)):
        outputs = [outputs]
    arrays: dict[str, Any] = {f"output_{i}": np.asarray(out) for i, out in enumerate(outputs)}
    np.savez(outputs_file, **arrays)


if __name__ == "__main__":
    main(sys.argv[1:])
