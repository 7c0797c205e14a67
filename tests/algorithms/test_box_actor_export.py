"""SAC's and TD3's export (cairn/algorithms/box_actor_export.py): the deterministic action path
(SAC: tanh of the mean, with the mean and log-std as outputs; TD3: pi(s)), rescaled to the Box
bounds, as a torch program and ONNX, checked by cairn.export and here again on 1000
observations with plain torch / onnxruntime (no cairn in the loop)."""

from __future__ import annotations

import json

import gymnasium as gym
import numpy as np
import pytest
import torch
from safetensors.numpy import load_file

import cairn
from cairn.algorithms.sac import SACPolicy
from cairn.algorithms.td3 import TD3Policy
from cairn.export import model_inputs

OBS = gym.spaces.Box(-3.0, 3.0, (3,), np.float32)
ACT = gym.spaces.Box(np.array([0.0, -1.0], np.float32), np.array([10.0, 3.0], np.float32))
#: Each algorithm's policy class, the actor's output layer and the export's outputs.
ALGORITHMS = {"SAC": (SACPolicy, "mean_head", ["action", "mean", "log_std"]),
              "TD3": (TD3Policy, "action_head", ["action"])}


def box_policy(algorithm: str, *, filtered: bool) -> cairn.Policy:
    """A small policy whose actor's outputs reach the tanh's flat ends (and the bounds) often."""
    policy_class, head, _ = ALGORITHMS[algorithm]
    config = {"model": {"hidden": [32, 32]},
              "observation_filter": "MeanStdFilter" if filtered else "NoFilter"}
    policy = policy_class(OBS, ACT, config, seed=0)
    with torch.no_grad():
        getattr(policy.model.actor, head).weight.mul_(30.0)
    if filtered:
        space = gym.spaces.Box(-3.0, 3.0, (3,), np.float32)
        space.seed(1)
        policy.process_observations([space.sample() for _ in range(500)], update=True)
    return policy


def observations(n: int = 1000) -> list[np.ndarray]:
    space = gym.spaces.Box(-3.0, 3.0, (3,), np.float32)
    space.seed(2)
    return [space.sample() for _ in range(n)]


def run_exported(algorithm: str, model_dir, obs: np.ndarray) -> dict[str, list[np.ndarray]]:
    signature = json.loads((model_dir / "signature.json").read_text())
    files, outputs = signature["files"], {}
    assert [o["name"] for o in signature["outputs"]] == ALGORITHMS[algorithm][2]
    if "torch" in files:
        module = torch.export.load(str(model_dir / files["torch"])).module()
        with torch.inference_mode():
            result = module(torch.from_numpy(obs))
        outputs["torch"] = [t.numpy() for t in (result if isinstance(result, (tuple, list)) else [result])]
    if "onnx" in files:
        import onnxruntime

        session = onnxruntime.InferenceSession(str(model_dir / files["onnx"]),
                                               providers=["CPUExecutionProvider"])
        outputs["onnx"] = list(session.run(None, {"obs": obs}))
    return outputs


CASES = [("SAC", None, False), ("SAC", None, True), ("SAC", 18, False), ("SAC", 18, True),
         ("TD3", None, False), ("TD3", 18, True)]


@pytest.mark.parametrize(("algorithm", "onnx", "filtered"), CASES)
def test_exported_model_reproduces_the_deterministic_action(tmp_path, algorithm, onnx, filtered):
    policy = box_policy(algorithm, filtered=filtered)
    policy.export_model(tmp_path, onnx=onnx)
    batch = observations()
    expected = policy.compute_actions(batch, explore=False)
    inputs = policy.compute_action_inputs(policy.process_observations(batch, update=False))
    # The actions reach both bounds, so rescaling and clipping are both exercised.
    assert (expected[:, 0] > 9.99).any() and (expected[:, 0] < 0.01).any()
    runtimes = run_exported(algorithm, tmp_path, model_inputs(OBS, batch))
    assert set(runtimes) == ({"torch"} if onnx is None else {"onnx"})
    for runtime, (action, *extras) in runtimes.items():
        assert action.dtype == np.float32 and action.shape == (1000, 2), runtime
        np.testing.assert_allclose(action, expected, rtol=0, atol=1e-5, err_msg=runtime)
        if algorithm == "SAC":
            mean, log_std = extras
            np.testing.assert_allclose(mean, inputs[:, :2], rtol=1e-5, atol=1e-5, err_msg=runtime)
            np.testing.assert_allclose(log_std, inputs[:, 2:], rtol=1e-5, atol=1e-5, err_msg=runtime)
            low, high = ACT.low, ACT.high
            rescaled = np.clip(low + (np.tanh(mean) + 1) * (high - low) / 2, low, high)
            np.testing.assert_allclose(action, rescaled, rtol=0, atol=1e-5, err_msg=runtime)


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_exported_weights_hold_the_actor_only(tmp_path, algorithm):
    policy = box_policy(algorithm, filtered=False)
    policy.export_model(tmp_path)
    names = set(load_file(str(tmp_path / "model.safetensors")))
    assert names and all("critic" not in n and "target" not in n for n in names), sorted(names)
    assert any(ALGORITHMS[algorithm][1] in n for n in names)


@pytest.mark.parametrize("config_class", [cairn.SACConfig, cairn.TD3Config])
def test_algorithm_checkpoint_with_native_model_files(tmp_path, config_class):
    algo = (config_class().environment("Pendulum-v1")
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
        exported = run_exported(config_class.algo_class_name, model_dirs[0], np.stack(batch))
        for runtime, outputs in exported.items():
            np.testing.assert_allclose(outputs[0], expected, rtol=0, atol=1e-5, err_msg=runtime)
    finally:
        algo.stop()
