"""Keras policies exported: ONNX through Keras' exporter, and a TensorFlow SavedModel."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import warnings
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

import cairn
from cairn.cli.checkpoint_verify import verify_checkpoint
from cairn.errors import ExportError
from cairn.export.verify import onnx_runner
from tests.conftest import ROOT
from tests.helpers import small_ppo


def _trained(tmp_path, **env_runners):
    algo = small_ppo().framework("keras").env_runners(**env_runners).build()
    algo.train()
    return algo, algo.save(tmp_path / "c")


@pytest.mark.parametrize("space, actions", [
    (gym.spaces.Box(-2, 2, (2, 3)), gym.spaces.Box(-1, 1, (2,))),
    (gym.spaces.Discrete(5, start=1), gym.spaces.MultiDiscrete([3, 2])),
])
def test_onnx_of_a_keras_policy_matches_the_policy(tmp_path, space, actions):
    policy = cairn.Policy(space, actions,
                          {"model": {"framework": "keras"}, "observation_filter": "MeanStdFilter"}, seed=0)
    # parity checked inside
    signature = cairn.export.export_model(policy, tmp_path / "m", onnx=18, extra_outputs=["value"])
    names = [o["name"] for o in signature["outputs"]]
    assert signature["files"] == {"onnx": "model.onnx"} and names[0] == "action" and names[-1] == "value"
    obs = [space.sample() for _ in range(8)]
    action, *_ = onnx_runner(str(tmp_path / "m/model.onnx"))(cairn.export.model_inputs(space, obs))
    np.testing.assert_allclose(action, policy.compute_actions(obs, explore=False), atol=1e-5)  # Box: float


def test_cairn_export_onnx_cli_on_a_keras_checkpoint(tmp_path):
    algo, path = _trained(tmp_path, observation_filter="MeanStdFilter")
    out = tmp_path / "onnx"
    subprocess.run([sys.executable, "-m", "cairn", "export", path, "--format", "onnx", "--out", str(out)],
                   check=True, cwd=ROOT, capture_output=True)
    obs = np.random.default_rng(0).normal(size=(32, 4)).astype(np.float32)
    action, logits = onnx_runner(str(out / "model.onnx"))(obs)
    policy = algo.get_policy()
    np.testing.assert_array_equal(action, policy.compute_actions(obs, explore=False))
    np.testing.assert_allclose(
        logits, policy.compute_action_inputs(policy.process_observations(obs, update=False)), atol=1e-5)


def test_saved_model_of_a_torch_policy_is_refused(tmp_path):
    from cairn.export.keras_saved_model import export_saved_model

    policy = cairn.Policy(gym.spaces.Box(-1, 1, (4,)), gym.spaces.Discrete(2), seed=0)
    with pytest.raises(ExportError, match="model.framework='keras'"):
        export_saved_model(policy, tmp_path / "sm")
    assert not (tmp_path / "sm").exists()


_REFUSED_THEN_KERAS = """
import os, tempfile
os.environ.pop("KERAS_BACKEND", None)
import gymnasium as gym
import cairn
from cairn.errors import ExportError
from cairn.export.keras_saved_model import export_saved_model
torch_policy = cairn.Policy(gym.spaces.Box(-1, 1, (4,)), gym.spaces.Discrete(2), seed=0)
try:
    export_saved_model(torch_policy, tempfile.mkdtemp())
except ExportError as exc:
    print("refused:", exc)
policy = cairn.Policy(gym.spaces.Box(-1, 1, (4,)), gym.spaces.Discrete(2), {"model": {"framework": "keras"}},
                      seed=0)
print("keras policy:", type(policy.model).__name__)
"""


@pytest.mark.tf
def test_a_refused_saved_model_export_leaves_keras_usable_in_the_process(tmp_path):
    """A torch policy's SavedModel export is refused as not a Keras model, and the process still
    builds Keras policies. Before, the export imported TensorFlow before Keras, TensorFlow
    imported Keras on its own backend, and the refusal blamed that ("Keras is loaded in this
    process with the 'tensorflow' backend") while every later Keras policy of the process failed
    the same way."""
    done = subprocess.run([sys.executable, "-c", _REFUSED_THEN_KERAS], capture_output=True, text=True,
                          cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.splitlines()
    assert any(line.startswith("refused:") and "is not a Keras model" in line for line in lines), lines
    assert any(line.startswith("keras policy:") for line in lines), lines


_SERVE = """
import json, os, sys
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "2"
import numpy as np
import tensorflow as tf
served = tf.saved_model.load({path!r})
action, logits = served.serve(tf.constant(np.asarray({obs!r}, dtype=np.float32)))
print(json.dumps({{"cairn": any(m.startswith("cairn") for m in sys.modules),
                  "action": action.numpy().tolist(), "logits": logits.numpy().tolist()}}))
"""


@pytest.mark.tf
def test_saved_model_export_serves_the_policy_with_tensorflow(tmp_path):
    algo, path = _trained(tmp_path, observation_filter="MeanStdFilter")
    out = tmp_path / "tf"
    subprocess.run([sys.executable, "-m", "cairn", "export", path, "--format", "saved_model",
                    "--out", str(out)],
                   check=True, cwd=ROOT, capture_output=True)
    signature = json.loads((out / "signature.json").read_text())
    assert signature["files"] == {"saved_model": "saved_model", "keras": "model.keras"}
    obs = (np.random.default_rng(1).normal(size=(16, 4)) * 2).astype(np.float32)
    report = subprocess.run([sys.executable, "-c",
                             _SERVE.format(path=str(out / "saved_model"), obs=obs.tolist())],
                            check=True, capture_output=True, text=True, cwd=tmp_path).stdout
    served = json.loads(report.strip().splitlines()[-1])
    assert not served["cairn"]
    policy = algo.get_policy()
    assert served["action"] == policy.compute_actions(obs, explore=False).tolist()
    np.testing.assert_allclose(
        served["logits"], policy.compute_action_inputs(policy.process_observations(obs, update=False)),
        atol=1e-5)


class _UnfaithfulPolicy(cairn.Policy):
    """A policy whose export check fails: its graph's reference says other actions."""

    def export_graph(self):
        graph = super().export_graph()
        reference = graph.reference

        def other_actions(observations, *more):
            action, *rest = reference(observations, *more)
            return [1 - action, *rest]

        return dataclasses.replace(graph, reference=other_actions)


def test_a_failed_keras_export_keeps_the_earlier_model_keras(tmp_path):
    """A model.keras export that fails its check leaves the earlier model.keras and the
    signature.json that describes it as they were."""
    space, config = gym.spaces.Box(-1, 1, (3,)), {"model": {"framework": "keras"}}
    cairn.Policy(space, gym.spaces.Discrete(2), config, seed=0).export_model(tmp_path)
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    assert sorted(before) == ["model.keras", "signature.json"]
    with pytest.raises(ExportError, match="chose different actions"):
        _UnfaithfulPolicy(space, gym.spaces.Discrete(2), config, seed=1).export_model(tmp_path)
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before


def _model_files(checkpoint: str) -> list[str]:
    model = Path(checkpoint, "policies", "default_policy", "model")
    return sorted(p.name for p in model.iterdir())


@pytest.mark.parametrize("first, second", [(False, True), (True, False)], ids=["then-full", "then-keras"])
def test_an_incremental_save_writes_the_native_files_it_is_asked_for(tmp_path, first, second):
    """A Keras checkpoint always holds model.keras; model.onnx only with
    export_native_model_files. An incremental save of an unchanged policy takes its files from
    the earlier checkpoint only where that holds the same native files: else a save asking for
    model.onnx after one that did not got none (its manifest said so, the file was missing)."""
    algo = small_ppo().framework("keras").build()
    algo.config.export_native_model_files = first
    earlier = algo.save(tmp_path / "a")
    algo.config.export_native_model_files = second
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # no earlier file taken for damaged
        incremental = algo.save(tmp_path / "b", previous=earlier)
        again = algo.save(tmp_path / "c", previous=incremental)
    whole = algo.save(tmp_path / "d")  # what the incremental saves must hold
    assert _model_files(whole) == (["model.keras", "model.onnx", "signature.json"] if second
                                   else ["model.keras", "signature.json"])
    assert _model_files(incremental) == _model_files(again) == _model_files(whole)
    native = [json.loads(Path(c, "policies/default_policy/cairn_checkpoint.json").read_text())["native_model"]
              for c in (incremental, again, whole)]
    assert native[0] == native[1] == native[2]
    keras_file = "policies/default_policy/model/model.keras"
    assert (tmp_path / "b" / keras_file).stat().st_ino != (tmp_path / "a" / keras_file).stat().st_ino
    # The same native files: taken whole, as before.
    assert (tmp_path / "c" / keras_file).stat().st_ino == (tmp_path / "b" / keras_file).stat().st_ino
    assert verify_checkpoint(incremental)[0] == verify_checkpoint(again)[0] == []


@pytest.mark.tf
def test_saved_model_export_to_a_url_is_written_there(tmp_path, monkeypatch):
    """``cairn export --format saved_model --out URL`` writes under the URL, as the other formats
    do (export_model): the SavedModel export took the URL as a local path and wrote it into a
    directory named ``memory:`` (``s3:``, ``file:``) under the working directory, reporting
    success."""
    import fsspec

    from cairn.export.keras_saved_model import export_saved_model

    monkeypatch.chdir(tmp_path)
    policy = cairn.Policy(gym.spaces.Box(-1, 1, (4,)), gym.spaces.Discrete(2),
                          {"model": {"framework": "keras"}}, seed=0)
    url = f"memory://cairn-saved-model-{tmp_path.name}/tf"
    signature = export_saved_model(policy, url)
    fs = fsspec.filesystem("memory")
    root = url.removeprefix("memory://")
    assert json.loads(fs.cat(f"{root}/signature.json")) == signature
    assert fs.isfile(f"{root}/saved_model/saved_model.pb") and fs.isfile(f"{root}/model.keras")
    assert list(tmp_path.iterdir()) == []  # nothing written locally
    fs.rm(root, recursive=True)
