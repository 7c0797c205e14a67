"""Exported files load and act in processes where cairn (and, for ONNX, torch) cannot be imported."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import gymnasium as gym
import pytest

from cairn.export import export_model

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "export"
EPISODES = 2


def _blocking_dir(root: Path, *packages: str) -> Path:
    """A directory that, first on PYTHONPATH, makes importing ``packages`` fail."""
    for name in packages:
        (root / name).mkdir(parents=True)
        (root / name / "__init__.py").write_text(
            f"raise ImportError('{name} must not be imported by an exported-model consumer')\n"
        )
    return root


def _run(args: list[str], blocked: Path) -> subprocess.CompletedProcess[str]:
    # cwd outside the repository: `python -c` puts the working directory first on sys.path.
    env = {**os.environ, "PYTHONPATH": str(blocked)}
    return subprocess.run([sys.executable, *args], env=env, cwd=blocked, capture_output=True,
                          text=True, timeout=120)


def _returns(stdout: str) -> list[float]:
    return [float(x) for x in re.findall(r"return ([0-9.]+)", stdout)]


def _cairn_returns(policy: Any) -> list[float]:
    env = gym.make("CartPole-v1")
    returns = []
    for episode in range(EPISODES):
        obs, _ = env.reset(seed=episode)
        total, done = 0.0, False
        while not done:
            obs, reward, terminated, truncated, _ = env.step(policy.compute_single_action(obs, explore=False))
            total += float(reward)
            done = terminated or truncated
        returns.append(total)
    return returns


@pytest.mark.parametrize("kind", ["ppo", "dqn"])
def test_examples_act_without_cairn(kind: str, tmp_path: Path, helpers: Any) -> None:
    pytest.importorskip("onnxruntime")
    env = gym.make("CartPole-v1")
    if kind == "dqn":
        policy = helpers.make_dqn_policy(env.observation_space, env.action_space, filtered=True,
                                         dueling=True)
    else:
        policy = helpers.make_policy(env.observation_space, env.action_space, filtered=True)
    export_model(policy, tmp_path / "torch_model")
    export_model(policy, tmp_path / "onnx_model", onnx=18)
    blocked = _blocking_dir(tmp_path / "blocked", "cairn", "torch")
    no_cairn = _blocking_dir(tmp_path / "no_cairn", "cairn")

    # The blocking directories really block.
    assert _run(["-c", "import cairn"], no_cairn).returncode != 0
    assert _run(["-c", "import torch"], blocked).returncode != 0

    onnx_run = _run([str(EXAMPLES / "onnx_inference.py"), str(tmp_path / "onnx_model"),
                     "--episodes", str(EPISODES)], blocked)
    assert onnx_run.returncode == 0, onnx_run.stderr
    torch_run = _run([str(EXAMPLES / "torch_inference.py"), str(tmp_path / "torch_model" / "model.pt2"),
                      "--episodes", str(EPISODES)], no_cairn)
    assert torch_run.returncode == 0, torch_run.stderr

    expected = _cairn_returns(policy)
    assert len(expected) == EPISODES
    assert _returns(onnx_run.stdout) == expected
    assert _returns(torch_run.stdout) == expected

    # A model.onnx beside a signature.json that describes another export is not run.
    shutil.copy(tmp_path / "onnx_model" / "model.onnx", tmp_path / "torch_model" / "model.onnx")
    stale = _run([str(EXAMPLES / "onnx_inference.py"), str(tmp_path / "torch_model"), "--episodes", "1"],
                 blocked)
    assert stale.returncode != 0 and "not model.onnx" in stale.stderr and "episode" not in stale.stdout
