"""export_model: files, signature, opsets, dynamic batch, and refusing what it cannot do."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch

import cairn
from cairn.errors import ExportError
from cairn.export import SUPPORTED_OPSETS, export_model, model_inputs
from cairn.export import onnx_model as onnx_model_module
from cairn.space_json import space_from_json

BOX_OBS = gym.spaces.Box(-2.0, 2.0, (4,))


@pytest.mark.parametrize("onnx", [None, 18])
def test_value_is_an_optional_output(onnx: int | None, tmp_path: Path, helpers: Any) -> None:
    """``value`` is left out unless asked for; asked for, it is the last output and faithful."""
    if onnx is not None:
        pytest.importorskip("onnxruntime")
    policy = helpers.make_policy(BOX_OBS, gym.spaces.Discrete(3), filtered=True)
    plain = export_model(policy, tmp_path / "plain", onnx=onnx)
    assert [o["name"] for o in plain["outputs"]] == ["action", "logits"]
    helpers.check_model_dir(policy, tmp_path / "plain")
    with_value = export_model(policy, tmp_path / "value", onnx=onnx, extra_outputs=["value"])
    assert [o["name"] for o in with_value["outputs"]] == ["action", "logits", "value"]
    helpers.check_model_dir(policy, tmp_path / "value")  # checks value against model.value


def test_unknown_extra_output_is_refused(tmp_path: Path, helpers: Any) -> None:
    policy = helpers.make_policy(BOX_OBS, gym.spaces.Discrete(3), filtered=False)
    with pytest.raises(ExportError,
                       match=r"\['q_values'\] are not optional outputs.*optional outputs are \['value'\]"):
        export_model(policy, tmp_path / "out", extra_outputs=["q_values"])
    assert not (tmp_path / "out").exists()
    dqn = helpers.make_dqn_policy(BOX_OBS, gym.spaces.Discrete(3), filtered=False, dueling=False)
    with pytest.raises(ExportError, match=r"optional outputs are \[\]"):
        dqn.export_model(tmp_path / "dqn", extra_outputs=["value"])


def test_torch_export_files_and_signature(tmp_path: Path, helpers: Any) -> None:
    policy = helpers.make_policy(BOX_OBS, gym.spaces.Box(-1.0, 1.0, (2,)), filtered=True)
    weights_before = {k: v.copy() for k, v in policy.get_weights().items()}
    policy.model.train()  # a mode the export must not change (policies rest in eval mode)
    signature = export_model(policy, tmp_path / "out")

    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [
        "model.pt2", "model.safetensors", "signature.json"]
    on_disk = json.loads((tmp_path / "out" / "signature.json").read_text())
    assert on_disk == signature
    assert signature["files"] == {"torch": "model.pt2", "torch_weights": "model.safetensors"}
    assert signature["opset"] is None
    assert signature["inputs"] == [{"name": "obs", "dtype": "float32", "shape": ["batch", 4],
                                    "description": signature["inputs"][0]["description"]}]
    assert [(o["name"], o["dtype"], o["shape"]) for o in signature["outputs"]] == [
        ("action", "float32", ["batch", 2]), ("mean", "float32", ["batch", 2]),
        ("log_std", "float32", ["batch", 2])]
    assert space_from_json(signature["observation_space"]) == policy.observation_space
    assert space_from_json(signature["action_space"]) == policy.action_space
    assert {"cairn", "torch", "numpy", "gymnasium", "python"} <= set(signature["versions"])

    # Exporting leaves the policy alone.
    for name, value in policy.get_weights().items():
        np.testing.assert_array_equal(value, weights_before[name])
    assert policy.model.training  # the mode it had

    # The weights file holds the program's state under the same names; loading it into the
    # program's module (here: after zeroing it) restores the outputs.
    from safetensors.torch import load_file

    program = torch.export.load(str(tmp_path / "out" / "model.pt2"))
    weights = load_file(str(tmp_path / "out" / "model.safetensors"))
    assert sorted(weights) == sorted(program.state_dict)
    for name, tensor in weights.items():
        torch.testing.assert_close(tensor, program.state_dict[name].detach(), rtol=0, atol=0)
    module = program.module()
    obs = torch.from_numpy(model_inputs(BOX_OBS, helpers.sample(BOX_OBS, 16, seed=0)))
    expected = module(obs)
    with torch.no_grad():
        for p in module.parameters():
            p.zero_()
    module.load_state_dict(weights)
    for got, want in zip(module(obs), expected, strict=True):
        torch.testing.assert_close(got, want)


def test_batch_dimension_is_dynamic(tmp_path: Path, helpers: Any) -> None:
    pytest.importorskip("onnxruntime")
    policy = helpers.make_policy(BOX_OBS, gym.spaces.Discrete(2), filtered=False)
    export_model(policy, tmp_path / "t")
    export_model(policy, tmp_path / "o", onnx=18)
    for batch in (1, 7, 1024):
        observations = helpers.sample(BOX_OBS, batch, seed=batch)
        obs = model_inputs(BOX_OBS, observations)
        for outputs in (helpers.program_outputs(tmp_path / "t" / "model.pt2", obs),
                        helpers.onnx_outputs(tmp_path / "o" / "model.onnx", obs)):
            assert outputs[0].shape == (batch,)
            np.testing.assert_array_equal(outputs[0], policy.compute_actions(observations, explore=False))


@pytest.mark.parametrize("opset", SUPPORTED_OPSETS)
def test_every_supported_opset_loads_and_matches(opset: int, tmp_path: Path, helpers: Any) -> None:
    """Each claimed opset: the file says so, onnxruntime loads it, and it acts like the policy
    (a Categorical graph, which at opset 17 onnxruntime rejected, and a Gaussian one)."""
    onnx = pytest.importorskip("onnx")
    for name, act_space in (("cat", gym.spaces.Discrete(4)), ("gauss", gym.spaces.Box(-1.0, 1.0, (2,)))):
        policy = helpers.make_policy(BOX_OBS, act_space, filtered=True)
        signature = export_model(policy, tmp_path / name, onnx=opset)
        assert signature["opset"] == opset
        proto = onnx.load(str(tmp_path / name / "model.onnx"))
        assert {o.domain: o.version for o in proto.opset_import}[""] == opset
        assert [o.name for o in proto.graph.output] == [o["name"] for o in signature["outputs"]]
        assert all(o.doc_string for o in proto.graph.output)
        observations = helpers.sample(BOX_OBS, 300, seed=opset)
        outputs = helpers.onnx_outputs(tmp_path / name / "model.onnx", model_inputs(BOX_OBS, observations))
        helpers.assert_parity(policy, outputs, observations, tmp_path / name)


def test_discrete_observations_take_raw_integers(tmp_path: Path, helpers: Any) -> None:
    pytest.importorskip("onnxruntime")
    obs_space = gym.spaces.Discrete(6, start=-2)
    policy = helpers.make_policy(obs_space, gym.spaces.Discrete(3), filtered=True)
    policy.export_model(tmp_path, onnx=18)  # the Policy method delegates to export_model
    signature = json.loads((tmp_path / "signature.json").read_text())
    assert signature["inputs"][0]["dtype"] == "int64" and signature["inputs"][0]["shape"] == ["batch"]
    observations = list(range(-2, 4)) * 5
    outputs = helpers.onnx_outputs(tmp_path / "model.onnx", np.array(observations, dtype=np.int64))
    helpers.assert_parity(policy, outputs, observations, tmp_path)


@pytest.mark.parametrize("opset", [17, 0, 24, "18", True, 18.0])
def test_unsupported_opsets_are_refused(opset: Any, tmp_path: Path, helpers: Any) -> None:
    policy = helpers.make_policy(BOX_OBS, gym.spaces.Discrete(2), filtered=False)
    with pytest.raises(ExportError, match="Valid opsets are"):
        export_model(policy, tmp_path, onnx=opset)
    assert not any(tmp_path.iterdir())


def test_missing_onnx_packages_are_named(
    tmp_path: Path, helpers: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(onnx_model_module, "ONNX_PACKAGES", ("onnx", "no_such_package_for_cairn"))
    policy = helpers.make_policy(BOX_OBS, gym.spaces.Discrete(2), filtered=False)
    with pytest.raises(ExportError, match=r"no_such_package_for_cairn.*pip install 'cairn-rl\[onnx\]'"):
        export_model(policy, tmp_path, onnx=18)
    assert not (tmp_path / "model.onnx").exists()


def test_export_dir_that_is_a_file_is_refused(tmp_path: Path, helpers: Any) -> None:
    target = tmp_path / "file"
    target.write_text("")
    policy = cairn.Policy(BOX_OBS, gym.spaces.Discrete(2), seed=0)
    with pytest.raises(ExportError, match="not a directory"):
        export_model(policy, target)
