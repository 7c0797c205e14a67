"""Run ``model.keras`` files with Keras alone, in a fresh process that never imports cairn."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np

_SCRIPT = """
import json, os, sys
os.environ.setdefault("KERAS_BACKEND", "torch")
import keras
import numpy as np
obs = np.load(sys.argv[1])
outputs = {}
for path in sys.argv[2:]:
    model = keras.saving.load_model(path)  # safe_mode=True is the default
    out = model(obs)
    out = out if isinstance(out, (list, tuple)) else [out]  # a model of one output returns it alone
    outputs[path] = [keras.ops.convert_to_numpy(o).tolist() for o in out]
print(json.dumps({"cairn": [m for m in sys.modules if m.startswith("cairn")], "outputs": outputs}))
"""


def plain_keras_outputs(
    paths: Sequence[str | Path], obs: np.ndarray, workdir: Path
) -> list[list[np.ndarray]]:
    """Each file's outputs for the float32 observations ``obs``, computed by
    ``keras.saving.load_model(path)(obs)`` in a subprocess; asserts that no cairn module was
    imported there."""
    np.save(workdir / "plain_keras_obs.npy", np.asarray(obs, dtype=np.float32))
    out = subprocess.run([sys.executable, "-c", _SCRIPT, str(workdir / "plain_keras_obs.npy"),
                          *map(str, paths)],
                         capture_output=True, text=True, check=True, cwd=workdir)
    report = json.loads(out.stdout.strip().splitlines()[-1])
    assert report["cairn"] == [], f"cairn modules imported: {report['cairn']}"
    return [[np.asarray(o) for o in report["outputs"][str(path)]] for path in paths]
