"""`cairn export`: formats, opsets, policy selection (PPO and DQN checkpoints) and exit codes."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import gymnasium as gym
import pytest

from cairn.cli import main
from tests.conftest import ROOT
from tests.helpers import policy_checkpoint


def test_export_each_policy_of_an_algorithm_checkpoint(
    multi_agent_checkpoint: Any, tmp_path: Path, helpers: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("onnxruntime")
    policies, checkpoint = multi_agent_checkpoint
    assert main(["export", str(checkpoint), "--policy-id", "p1", "--format", "onnx",
                 "--out", str(tmp_path / "onnx")]) == 0
    assert capsys.readouterr().out == f"exported onnx model of policy 'p1' to {tmp_path / 'onnx'}\n"
    assert main(["export", str(checkpoint), "--policy-id", "p0", "--format", "torch",
                 "--out", str(tmp_path / "torch")]) == 0
    assert sorted(p.name for p in (tmp_path / "onnx").iterdir()) == ["model.onnx", "signature.json"]
    helpers.check_model_dir(policies["p1"], tmp_path / "onnx")
    helpers.check_model_dir(policies["p0"], tmp_path / "torch")


def test_export_exit_codes(multi_agent_checkpoint: Any, tmp_path: Path,
                           capsys: pytest.CaptureFixture[str], helpers: Any) -> None:
    _, checkpoint = multi_agent_checkpoint
    out = str(tmp_path / "out")
    # An unknown policy ID (alone or beside a known one): a usage error, nothing written.
    assert main(["export", str(checkpoint), "--policy-id", "p9", "--format", "torch", "--out", out]) == 2
    assert "'p9'" in capsys.readouterr().err
    assert main(["export", str(checkpoint), "--policy-id", "p0", "--policy-id", "p9", "--format",
                 "torch", "--out", out]) == 2
    assert "no policy 'p9'; the checkpoint has ['p0', 'p1']" in capsys.readouterr().err
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


def test_an_opset_cairn_does_not_export_is_named_as_the_flag(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    """`cairn export --opset 17` answered "Got invalid onnx=17", the Python keyword, which the
    command line has none of; the error names the flag as given (still exit status 1)."""
    out = str(tmp_path / "out")
    assert main(["export", str(tmp_path / "ckpt"), "--format", "onnx", "--opset", "17", "--out", out]) == 1
    err = capsys.readouterr().err
    assert "cairn: error: --opset 17: not an opset cairn exports. Valid opsets are: [18," in err, err
    assert "onnx=" not in err and not Path(out).exists()


def test_export_writes_all_policies_or_the_chosen_ones(
    multi_agent_checkpoint: Any, tmp_path: Path, helpers: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    policies, checkpoint = multi_agent_checkpoint
    # Default: every policy, each into --out/<policy_id>/.
    assert main(["export", str(checkpoint), "--format", "torch", "--out", str(tmp_path / "all")]) == 0
    assert sorted(p.name for p in (tmp_path / "all").iterdir()) == ["p0", "p1"]
    for pid, policy in policies.items():
        helpers.check_model_dir(policy, tmp_path / "all" / pid)
    lines = capsys.readouterr().out.splitlines()
    assert lines == [f"exported torch model of policy '{pid}' to {tmp_path / 'all' / pid}"
                     for pid in ("p0", "p1")]
    # --policy-id repeated: those policies, in subdirectories; a repeated ID is exported once.
    assert main(["export", str(checkpoint), "--policy-id", "p1", "--policy-id", "p0", "--policy-id",
                 "p1", "--format", "torch", "--out", str(tmp_path / "both")]) == 0
    assert sorted(p.name for p in (tmp_path / "both").iterdir()) == ["p0", "p1"]
    # One --policy-id: only that policy, into --out itself.
    assert main(["export", str(checkpoint), "--policy-id", "p0", "--format", "torch",
                 "--out", str(tmp_path / "one")]) == 0
    assert sorted(p.name for p in (tmp_path / "one").iterdir()) == [
        "model.pt2", "model.safetensors", "signature.json"]
    helpers.check_model_dir(policies["p0"], tmp_path / "one")


def test_export_reads_only_the_chosen_policies(multi_agent_checkpoint: Any, tmp_path: Path,
                                               monkeypatch: Any) -> None:
    import cairn

    _, checkpoint = multi_agent_checkpoint
    asked: list[Any] = []
    original = cairn.Policy.from_checkpoint

    def spy(path: Any, **kwargs: Any) -> Any:
        asked.append(kwargs.get("policy_ids"))
        return original(path, **kwargs)

    monkeypatch.setattr(cairn.Policy, "from_checkpoint", spy)
    assert main(["export", str(checkpoint), "--policy-id", "p1", "--format", "torch",
                 "--out", str(tmp_path / "o")]) == 0
    assert asked == [["p1"]]


def test_export_opset(multi_agent_checkpoint: Any, tmp_path: Path, helpers: Any) -> None:
    onnx = pytest.importorskip("onnx")
    pytest.importorskip("onnxruntime")
    policies, checkpoint = multi_agent_checkpoint
    assert main(["export", str(checkpoint), "--policy-id", "p0", "--format", "onnx", "--opset", "20",
                 "--out", str(tmp_path / "o")]) == 0
    proto = onnx.load(str(tmp_path / "o" / "model.onnx"))
    assert {o.domain: o.version for o in proto.opset_import}[""] == 20
    assert json.loads((tmp_path / "o" / "signature.json").read_text())["opset"] == 20
    helpers.check_model_dir(policies["p0"], tmp_path / "o")


def test_export_dqn_checkpoints(dqn_checkpoint: Any, multi_agent_dqn_checkpoint: Any, tmp_path: Path,
                                helpers: Any) -> None:
    pytest.importorskip("onnxruntime")
    (pid, policy), = dqn_checkpoint[0].items()
    assert main(["export", str(dqn_checkpoint[1]), "--format", "onnx", "--out", str(tmp_path / "sa")]) == 0
    signature = json.loads((tmp_path / "sa" / "signature.json").read_text())
    assert [o["name"] for o in signature["outputs"]] == ["action", "q_values"]
    helpers.check_model_dir(policy, tmp_path / "sa")
    policies, checkpoint = multi_agent_dqn_checkpoint
    assert main(["export", str(checkpoint), "--format", "torch", "--out", str(tmp_path / "ma")]) == 0
    for pid, policy in policies.items():
        helpers.check_model_dir(policy, tmp_path / "ma" / pid)


def test_policy_id_with_a_policy_checkpoint_is_a_usage_error(tmp_path: Path, helpers: Any,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    checkpoint = _policy_checkpoint(helpers, tmp_path / "ckpt")
    assert main(["export", checkpoint, "--policy-id", "p0", "--format", "torch",
                 "--out", str(tmp_path / "o")]) == 2
    assert "Policy checkpoint" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_export_policy_checkpoint_needs_no_policy_id(tmp_path: Path, helpers: Any) -> None:
    import gymnasium as gym

    policy = helpers.make_policy(gym.spaces.Box(-1.0, 1.0, (3,)), gym.spaces.Discrete(2), filtered=True)
    checkpoint = policy_checkpoint(policy, tmp_path / "ckpt")
    assert main(["export", checkpoint, "--format", "torch", "--out", str(tmp_path / "out")]) == 0
    helpers.check_model_dir(policy, tmp_path / "out")


def test_opset_with_torch_format_is_a_usage_error(tmp_path):
    from cairn.cli import main

    assert main(["export", str(tmp_path), "--format", "torch", "--opset", "18",
                 "--out", str(tmp_path / "o")]) == 2


def test_policy_export_checkpoint_can_include_native_files(tmp_path):
    import gymnasium as gym

    import cairn

    policy = cairn.Policy(gym.spaces.Box(-1, 1, (3,)), gym.spaces.Discrete(2), seed=0)
    policy.export_checkpoint(tmp_path / "p", export_native_model_files=True)
    info = cairn.get_checkpoint_info(tmp_path / "p")
    assert info["native_model"]["status"] == "ok"
    assert "model/signature.json" in info["files"]


def _policy_checkpoint(helpers: Any, path: Path) -> str:
    policy = helpers.make_policy(gym.spaces.Box(-1.0, 1.0, (4,)), gym.spaces.Discrete(2), filtered=True)
    return policy_checkpoint(policy, path)


def test_onnx_export_without_the_onnx_extra_says_how_to_install_it(tmp_path: Path, helpers: Any) -> None:
    checkpoint = _policy_checkpoint(helpers, tmp_path / "ckpt")
    out = tmp_path / "new" / "model"
    # As if the onnx extra were not installed: `import onnx` fails and find_spec finds nothing.
    script = ("import sys; sys.modules['onnx'] = None; from cairn.cli import main; "
              "sys.exit(main(sys.argv[1:]))")
    proc = subprocess.run(
        [sys.executable, "-c", script, "export", checkpoint, "--format", "onnx", "--out", str(out)],
        capture_output=True, text=True, cwd=ROOT,
    )
    assert proc.returncode == 1, proc.stderr
    assert "ONNX export needs onnx" in proc.stderr
    assert "pip install -e '.[onnx]'" in proc.stderr  # in a checkout
    assert "pip install 'cairn-rl[onnx]'" in proc.stderr  # everywhere else
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "new").exists()


def test_a_failed_export_leaves_no_empty_directory(tmp_path: Path, helpers: Any, monkeypatch: Any,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """The torch files are written, then found unfaithful and removed: nothing stays behind."""
    import cairn.export.model_export
    from cairn.errors import ExportError

    def unfaithful(*args: Any, **kwargs: Any) -> None:
        raise ExportError("The saved model.pt2 chose different actions (simulated).")

    checkpoint = _policy_checkpoint(helpers, tmp_path / "ckpt")
    monkeypatch.setattr(cairn.export.model_export, "check_against_policy", unfaithful)
    assert main(["export", checkpoint, "--format", "torch", "--out", str(tmp_path / "a" / "b")]) == 1
    assert "(simulated)" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt"]
    (tmp_path / "kept").mkdir()  # an existing directory is the user's: it stays
    assert main(["export", checkpoint, "--format", "torch", "--out", str(tmp_path / "kept")]) == 1
    assert (tmp_path / "kept").is_dir()


@pytest.mark.slow
def test_onnx_export_keeps_the_exporters_warnings_off_the_terminal(tmp_path: Path, helpers: Any) -> None:
    pytest.importorskip("onnxruntime")
    checkpoint = _policy_checkpoint(helpers, tmp_path / "ckpt")
    proc = subprocess.run(
        [sys.executable, "-m", "cairn", "export", checkpoint, "--format", "onnx", "--out",
         str(tmp_path / "onnx")], capture_output=True, text=True, cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""  # torch.onnx logs skipped torchvision operators, torch deprecations
    assert proc.stdout == f"exported onnx model to {tmp_path / 'onnx'}\n"


def test_exporter_failures_are_reported_and_its_noise_is_not(
    tmp_path: Path, helpers: Any, monkeypatch: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("onnxscript")
    import torch

    records: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = records.append  # type: ignore[method-assign]
    exporter_logger = logging.getLogger("torch.onnx")
    level = exporter_logger.level
    exporter_logger.addHandler(handler)

    def failing_export(*args: Any, **kwargs: Any) -> None:
        logging.getLogger("torch.onnx._internal.exporter._registration").warning("noise: skipping")
        warnings.warn("noise: deprecated", FutureWarning, stacklevel=1)
        raise RuntimeError("unsupported operator aten::frobnicate")

    checkpoint = _policy_checkpoint(helpers, tmp_path / "ckpt")
    monkeypatch.setattr(torch.onnx, "export", failing_export)
    try:
        with warnings.catch_warnings(record=True) as leaked:
            warnings.simplefilter("always")
            code = main(["export", checkpoint, "--format", "onnx", "--out", str(tmp_path / "onnx")])
    finally:
        exporter_logger.removeHandler(handler)
    assert code == 1
    err = capsys.readouterr().err
    assert "aten::frobnicate" in err and "noise" not in err
    assert [r.getMessage() for r in records] == [] and [str(w.message) for w in leaked] == []
    assert exporter_logger.level == level  # the exporter's logging is as it was
    assert not (tmp_path / "onnx").exists()


def test_export_extra_outputs(multi_agent_checkpoint: Any, tmp_path: Path,
                              capsys: pytest.CaptureFixture[str], helpers: Any) -> None:
    """`--extra-output value` adds the critic's value after the default outputs; a name the
    policy's graph does not offer is an error naming the ones it does, and nothing is written."""
    pytest.importorskip("onnxruntime")
    policies, checkpoint = multi_agent_checkpoint
    out = tmp_path / "value"
    assert main(["export", str(checkpoint), "--policy-id", "p0", "--format", "onnx",
                 "--extra-output", "value", "--out", str(out)]) == 0
    names = [spec["name"] for spec in json.loads((out / "signature.json").read_text())["outputs"]]
    assert names[-1] == "value" and names[0] == "action"
    helpers.check_model_dir(policies["p0"], out)
    bad = tmp_path / "bad"
    assert main(["export", str(checkpoint), "--policy-id", "p0", "--format", "torch",
                 "--extra-output", "q_value", "--out", str(bad)]) == 1
    err = capsys.readouterr().err
    assert "'q_value'" in err and "value" in err
    assert not bad.exists()
