"""Restoring a policy to act loads no heavy module: torch._dynamo (which constructing any torch
optimizer imports), torch.onnx, onnx, onnxruntime or ray. The time it saves is measured in
bench/cold_start.py; here, what a fresh process has imported is checked."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np

import cairn
from tests.conftest import ROOT

HEAVY = ["torch._dynamo", "torch.onnx", "onnx", "onnxruntime", "ray"]

_SCRIPT = """
import json, sys
sys.path.insert(0, {root!r})
import cairn
policy = cairn.Policy.from_checkpoint({path!r})
action = policy.compute_single_action([0.0, 0.1, 0.0, -0.1], explore=False)
print(json.dumps({{"action": int(action), "loaded": [m for m in {heavy!r} if m in sys.modules]}}))
"""


def test_restore_and_act_in_a_fresh_process_loads_no_heavy_module(tmp_path):
    algo = (cairn.PPOConfig().environment("CartPole-v1")
            .training(train_batch_size=128, minibatch_size=64).build())
    algo.train()
    policy_dir = f"{algo.save(tmp_path / 'c')}/policies/default_policy"
    out = subprocess.run(
        [sys.executable, "-c", _SCRIPT.format(root=str(ROOT), path=policy_dir, heavy=HEAVY)],
        capture_output=True, text=True, check=True, cwd=ROOT,
    ).stdout
    report = json.loads(out)
    assert report["loaded"] == []
    assert report["action"] == algo.compute_single_action([0.0, 0.1, 0.0, -0.1])


def test_optimizer_built_on_first_use_holds_the_restored_state(tmp_path):
    algo = (cairn.PPOConfig().environment("CartPole-v1")
            .training(train_batch_size=128, minibatch_size=64).build())
    algo.train()
    original = algo.get_policy()
    restored = cairn.Policy.from_checkpoint(f"{algo.save(tmp_path / 'c')}/policies/default_policy")
    # Saving again before any use hands the restored optimizer state through unchanged.
    restored.export_checkpoint(tmp_path / "again")
    again = cairn.Policy.from_checkpoint(tmp_path / "again")
    for policy in (restored, again):
        own = {n: p for n, p in original.model.named_parameters()}
        names = {id(p): n for n, p in policy.model.named_parameters()}
        state = policy.optimizer.state
        assert len(state) == len(original.optimizer.state)
        for param, slots in state.items():
            expected = original.optimizer.state[own[names[id(param)]]]
            for slot, value in slots.items():
                np.testing.assert_array_equal(value.numpy(), expected[slot].numpy())
