"""Act in CartPole-v1 with an exported cairn policy, using only onnxruntime and numpy.

Nothing here imports cairn or torch: the model file and its signature.json are all it needs.

    cairn export CHECKPOINT --format onnx --out model_dir
    python examples/export/onnx_inference.py model_dir --episodes 3
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import gymnasium as gym
import numpy as np
import onnxruntime


def load(path: Path) -> tuple[onnxruntime.InferenceSession, dict]:
    """The session for ``model.onnx`` (given itself or its directory) and its signature."""
    model = path / "model.onnx" if path.is_dir() else path
    signature_file = model.with_name("signature.json")
    signature = json.loads(signature_file.read_text()) if signature_file.exists() else {}
    if signature and signature.get("files", {}).get("onnx") != model.name:
        # signature.json describes another export (a torch one): this model.onnx is not its model
        raise SystemExit(f"{signature_file} describes {signature.get('files')}, not {model.name}: "
                         "export the policy with --format onnx into that directory again.")
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = 1  # one observation at a time: threads only add overhead
    session = onnxruntime.InferenceSession(str(model), options, providers=["CPUExecutionProvider"])
    return session, signature


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("model", type=Path, help="model.onnx or the directory holding it")
    parser.add_argument("--env", default="CartPole-v1")
    parser.add_argument("--episodes", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    session, signature = load(args.model)
    input_name = session.get_inputs()[0].name  # "obs": float32 [batch, *obs_shape] for a Box
    input_dtype = np.dtype(signature["inputs"][0]["dtype"]) if signature else np.float32
    env = gym.make(args.env)
    for episode in range(args.episodes):
        obs, _ = env.reset(seed=args.seed + episode)
        episode_return, steps, done = 0.0, 0, False
        while not done:
            batch = np.asarray(obs, dtype=input_dtype)[None]  # a batch of one observation
            (action,) = session.run(["action"], {input_name: batch})
            obs, reward, terminated, truncated, _ = env.step(action[0].item())
            episode_return += float(reward)
            steps += 1
            done = terminated or truncated
        print(f"episode {episode}: return {episode_return:.1f} steps {steps}")
    env.close()


if __name__ == "__main__":
    main()
