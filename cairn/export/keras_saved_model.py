"""A Keras policy served by TensorFlow: ``cairn export --format saved_model``.

The policy's serving model (:mod:`cairn.export.keras_serving`: raw observations -> ``action``,
then the logits or mean/log-std, or Q-values) is saved as ``model.keras``, which a subprocess
(:mod:`cairn.export.keras_tf_worker`) loads on Keras' TensorFlow backend and writes as a
TensorFlow SavedModel (``saved_model/``; call ``tf.saved_model.load(dir).serve(obs)``, or
``serve([obs, action_mask])`` for a policy with an action mask). The
subprocess also runs the SavedModel, with TensorFlow alone, on 64 observations sampled from the
observation space; cairn checks those outputs against the policy as it checks every export.
Needs TensorFlow (``pip install 'cairn-rl[tf]'``) in the interpreter that runs cairn.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from cairn.checkpoint.storage import resolve_storage
from cairn.errors import ExportError
from cairn.export import keras_tf_worker
from cairn.export.conventions import model_feeds
from cairn.export.keras_files import KERAS_FILE, save_keras_file
from cairn.export.signature import build_signature, write_signature
from cairn.export.verify import check_against_policy, sample_policy_observations
from cairn.policy.recurrent import is_recurrent

if TYPE_CHECKING:
    from cairn.policy.policy import Policy

__all__ = ["SAVED_MODEL_DIR", "TF_INSTALL_HINT", "export_saved_model"]

SAVED_MODEL_DIR = "saved_model"
TF_INSTALL_HINT = "`pip install 'cairn-rl[tf]'` (in a cairn checkout: `pip install -e '.[tf]'`)"
#: TensorFlow's import and the SavedModel's tracing take seconds; a hung worker must not hang cairn.
WORKER_TIMEOUT_S = 600


def _worker_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "KERAS_BACKEND"}
    env["KERAS_BACKEND"] = "tensorflow"
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    return env


def export_saved_model(policy: Policy, export_dir: str | os.PathLike[str], *,
                       storage_options: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Write ``export_dir/saved_model/`` (a TensorFlow SavedModel of ``policy``'s whole
    observation-to-action path), ``model.keras`` beside it and ``signature.json``, after
    checking the SavedModel's outputs, computed by TensorFlow, against the policy.

    ``export_dir`` is a local directory or an object-store URL (``s3://...``: the files are
    written locally, checked, then uploaded under that prefix), as for
    :func:`cairn.export.export_model`; ``storage_options`` are the options of a URL's fsspec
    file system (docs/storage.md).

    A masked policy's SavedModel takes ``[obs, action_mask]`` (``serve([obs, action_mask])``).
    Raises ExportError for a torch policy, without TensorFlow, or when the SavedModel fails or
    disagrees with the policy; nothing is left in ``export_dir`` then.
    """
    if is_recurrent(policy):
        raise ExportError("A recurrent policy (use_lstm, or a RecurrentActorCriticModel) has no Keras "
                          "or SavedModel export: it is a torch network. Export it with --format onnx "
                          "or torch (docs/export.md, 'Recurrent policies').")
    if importlib.util.find_spec("tensorflow") is None:
        raise ExportError("--format saved_model needs TensorFlow, which is not installed; "
                          f"install it with {TF_INSTALL_HINT}.")
    # In place for a local directory; written locally, checked, then uploaded for a URL (a
    # URL read as a local path would be a directory named "s3:" under the working directory).
    with resolve_storage(export_dir, storage_options=storage_options).loose_files() as directory:
        return _export_saved_model_into(policy, directory)


def _export_saved_model_into(policy: Policy, directory: Path) -> dict[str, Any]:
    """:func:`export_saved_model` into the local ``directory``."""
    graph = policy.export_graph().with_outputs()
    with tempfile.TemporaryDirectory(prefix="cairn-saved-model-") as tmp_name:
        tmp = Path(tmp_name)
        save_keras_file(policy, graph, tmp)  # checked against the policy on Keras' torch backend
        observations = sample_policy_observations(policy, 64, seed=0)
        inputs = list(model_feeds(policy.observation_space, policy.action_space, observations).values())
        np.savez(tmp / "inputs.npz", *inputs)  # arr_0, arr_1: in the model's input order
        command = [sys.executable, keras_tf_worker.__file__,
                   str(tmp / KERAS_FILE), str(tmp / SAVED_MODEL_DIR),
                   str(tmp / "inputs.npz"), str(tmp / "outputs.npz")]
        try:
            done = subprocess.run(command, capture_output=True, text=True, env=_worker_env(),
                                  timeout=WORKER_TIMEOUT_S)
        except subprocess.TimeoutExpired as exc:
            raise ExportError("The TensorFlow SavedModel export did not finish "
                              f"within {WORKER_TIMEOUT_S} s.") from exc
        if done.returncode != 0:
            tail = " ".join(done.stderr.strip().splitlines()[-3:])
            raise ExportError("TensorFlow could not write or run the SavedModel "
                              f"(exit {done.returncode}): {tail}")
        with np.load(tmp / "outputs.npz", allow_pickle=False) as data:
            outputs = [data[f"output_{i}"] for i in range(len(data.files))]

        def served(*given: np.ndarray) -> list[np.ndarray]:
            if len(given) != len(inputs) or not all(  # the worker ran on exactly these inputs
                    np.array_equal(a, b) for a, b in zip(given, inputs, strict=True)):
                raise ExportError("internal: the SavedModel check was asked about other observations")
            return outputs

        check_against_policy(policy, served, "TensorFlow SavedModel", graph=graph, n=64, seed=0)
        directory.mkdir(parents=True, exist_ok=True)
        for name in (SAVED_MODEL_DIR, KERAS_FILE):
            target = directory / name
            if target.is_dir():
                shutil.rmtree(target)
            shutil.move(str(tmp / name), str(target))
    signature = build_signature(policy, graph, {"saved_model": SAVED_MODEL_DIR, "keras": KERAS_FILE},
                                opset=None)
    write_signature(directory, signature)
    return signature
