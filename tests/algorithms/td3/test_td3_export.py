"""TD3's export: the deterministic actor (pi(s) rescaled to the Box bounds) as a torch program
and ONNX, checked by cairn.export and here again on 1000 observations with plain torch /
onnxruntime (no cairn in the loop)."""

from __future__ import annotations

import json

import gymnasium as gym
import numpy as np
import pytest
import torch

import cairn
from cairn.algorithms.td3 import TD3Policy
from cairn.export import model_inputs

OBS = gym.spaces.Box(-3.0, 3.0, (3,), np.float32)
ACT = gym.spaces.Box(np.array([0.0, -1.0], np.float32), np.array([10.0, 3.0], np.float32))


def td3_policy(*, filtered: bool) -> TD3Policy:
    """A small TD3 policy whose actions reach the tanh's flat ends (and the bounds) often."""
    policy = TD3Policy(OBS, ACT, {"model": {"hidden": [32, 32]},
                                  "observation_filter": "MeanStdFilter" if filtered else "NoFilter"}, seed=0)
    with torch.no_grad():
        policy.model.actor.action_head.weight.mul_(30.0)
    if filtered:
        space = gym.spaces.Box(-3.0, 3.0, (3,), np.float32)
        space.seed(1)
        policy.process_observations([space.sample() for _ in range(500)], update=True)
    return policy


def observations(n: int = 1000) -> list[np.ndarray]:
    space = gym.spaces.Box(-3.0, 3.0, (3,), np.float32)
    space.seed(2)
    return [space.sample() for _ in range(n)]


def run_exported(model_dir, obs: np.ndarray) -> dict[str, np.ndarray]:
    signature = json.loads((model_dir / "signature.json").read_text())
    files, outputs = signature["files"], {}
    assert [o["name"] for o in signature["outputs"]] == ["action"]
    if "torch" in files:
        module = torch.export.load(str(model_dir / files["torch"])).module()
        with torch.inference_mode():
            result = module(torch.from_numpy(obs))
        outputs["torch"] = (result[0] if isinstance(result, (tuple, list)) else result).numpy()
    if "onnx" in files:
        import onnxruntime

        session = onnxruntime.InferenceSession(str(model_dir / files["onnx"]),
                                               providers=["CPUExecutionProvider"])
        outputs["onnx"] = session.run(None, {"obs": obs})[0]
    return outputs


@pytest.mark.parametrize(("onnx", "filtered"), [(None, False), (18, True)])
def test_exported_model_reproduces_the_deterministic_action(tmp_path, filtered, onnx):
    policy = td3_policy(filtered=filtered)
    policy.export_model(tmp_path, onnx=onnx)
    batch = observations()
    expected = policy.compute_actions(batch, explore=False)
    # The actions reach both bounds, so rescaling and clipping are both exercised.
    assert (expected[:, 0] > 9.99).any() and (expected[:, 0] < 0.01).any()
    runtimes = run_exported(tmp_path, model_inputs(OBS, batch))
    assert set(runtimes) == ({"torch"} if onnx is None else {"onnx"})
    for runtime, action in runtimes.items():
        assert action.dtype == np.float32 and action.shape == (1000, 2), runtime
        np.testing.assert_allclose(action, expected, rtol=0, atol=1e-5, err_msg=runtime)


def test_exported_weights_hold_the_actor_only(tmp_path):
    policy = td3_policy(filtered=False)
    policy.export_model(tmp_path)
    from safetensors.numpy import load_file

    names = set(load_file(str(tmp_path / "model.safetensors")))
    assert names and all("critic" not in n and "target" not in n for n in names), sorted(names)
    assert any("action_head" in n for n in names)


def test_algorithm_checkpoint_with_native_model_files(tmp_path):
    algo = (cairn.TD3Config().environment("Pendulum-v1")
            .training(train_batch_size=150, minibatch_size=32, model={"hidden": [16, 16]})
            .checkpointing(export_native_model_files=True).debugging(seed=0).build())
    try:
        algo.train()
        path = algo.save(tmp_path / "c")
        model_dirs = [p.parent for p in tmp_path.rglob("signature.json")]
        assert model_dirs, f"no model/ files in {path}"
        policy = algo.get_policy()
        batch = [np.array([np.cos(t), np.sin(t), 0.5 * t], np.float32) for t in np.linspace(-3, 3, 50)]
        expected = policy.compute_actions(batch, explore=False)
        for runtime, action in run_exported(model_dirs[0], np.stack(batch)).items():
            np.testing.assert_allclose(action, expected, rtol=0, atol=1e-5, err_msg=runtime)
    finally:
        algo.stop()
