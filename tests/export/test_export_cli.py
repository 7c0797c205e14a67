"""`cairn export`: formats, policy selection and exit codes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from cairn.checkpoint.writer import save_policy
from cairn.cli import main


def test_export_each_policy_of_an_algorithm_checkpoint(
    multi_agent_checkpoint: Any, tmp_path: Path, helpers: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("onnxruntime")
    policies, checkpoint = multi_agent_checkpoint
    assert main(["export", str(checkpoint), "--policy-id", "p1", "--format", "onnx",
                 "--out", str(tmp_path / "onnx")]) == 0
    assert "exported onnx model" in capsys.readouterr().out
    assert main(["export", str(checkpoint), "--policy-id", "p0", "--format", "torch",
                 "--out", str(tmp_path / "torch")]) == 0
    assert sorted(p.name for p in (tmp_path / "onnx").iterdir()) == ["model.onnx", "signature.json"]
    helpers.check_model_dir(policies["p1"], tmp_path / "onnx")
    helpers.check_model_dir(policies["p0"], tmp_path / "torch")


def test_export_exit_codes(multi_agent_checkpoint: Any, tmp_path: Path,
                           capsys: pytest.CaptureFixture[str], helpers: Any) -> None:
    _, checkpoint = multi_agent_checkpoint
    out = str(tmp_path / "out")
    # Two policies and no --policy-id; an unknown policy ID: usage errors.
    assert main(["export", str(checkpoint), "--format", "torch", "--out", out]) == 2
    assert "--policy-id" in capsys.readouterr().err
    assert main(["export", str(checkpoint), "--policy-id", "p9", "--format", "torch", "--out", out]) == 2
    assert "'p9'" in capsys.readouterr().err
    # No checkpoint there, or an opset cairn does not export: cairn errors.
    assert main(["export", str(tmp_path / "missing"), "--format", "onnx", "--out", out]) == 1
    assert main(["export", str(checkpoint), "--policy-id", "p0", "--format", "onnx",
                 "--opset", "17", "--out", out]) == 1
    assert "Valid opsets are" in capsys.readouterr().err
    assert not Path(out).exists()
    # argparse rejects an unknown format.
    with pytest.raises(SystemExit) as exited:
        main(["export", str(checkpoint), "--format", "tflite", "--out", out])
    assert exited.value.code == 2


def test_export_policy_checkpoint_needs_no_policy_id(tmp_path: Path, helpers: Any) -> None:
    import gymnasium as gym

    policy = helpers.make_policy(gym.spaces.Box(-1.0, 1.0, (3,)), gym.spaces.Discrete(2), filtered=True)
    checkpoint = save_policy(policy, tmp_path / "ckpt")
    assert main(["export", checkpoint, "--format", "torch", "--out", str(tmp_path / "out")]) == 0
    helpers.check_model_dir(policy, tmp_path / "out")


def test_opset_with_torch_format_is_a_usage_error(tmp_path):
    from cairn.cli import main

    assert main(["export", str(tmp_path), "--format", "torch", "--opset", "18", "--out", str(tmp_path / "o")]) == 2


def test_policy_export_checkpoint_can_include_native_files(tmp_path):
    import gymnasium as gym

    import cairn

    policy = cairn.Policy(gym.spaces.Box(-1, 1, (3,)), gym.spaces.Discrete(2), seed=0)
    policy.export_checkpoint(tmp_path / "p", export_native_model_files=True)
    info = cairn.get_checkpoint_info(tmp_path / "p")
    assert info["native_model"]["status"] == "ok"
    assert "model/signature.json" in info["files"]
