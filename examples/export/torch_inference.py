"""Act in CartPole-v1 with an exported cairn policy, using only plain PyTorch.

``model.pt2`` is a ``torch.export`` program: ``torch.export.load`` reads it without cairn and
without unpickling any cairn class.

    cairn export CHECKPOINT --format torch --out model_dir
    python examples/export/torch_inference.py model_dir --episodes 3
"""

from __future__ import annotations

import argparse
from pathlib import Path

import gymnasium as gym
import torch


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("model", type=Path, help="model.pt2 or the directory holding it")
    parser.add_argument("--env", default="CartPole-v1")
    parser.add_argument("--episodes", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    path = args.model / "model.pt2" if args.model.is_dir() else args.model
    policy = torch.export.load(str(path)).module()  # outputs: action, distribution inputs
    env = gym.make(args.env)
    for episode in range(args.episodes):
        obs, _ = env.reset(seed=args.seed + episode)
        episode_return, steps, done = 0.0, 0, False
        while not done:
            with torch.inference_mode():
                action = policy(torch.as_tensor(obs, dtype=torch.float32)[None])[0]
            obs, reward, terminated, truncated, _ = env.step(action[0].item())
            episode_return += float(reward)
            steps += 1
            done = terminated or truncated
        print(f"episode {episode}: return {episode_return:.1f} steps {steps}")
    env.close()


if __name__ == "__main__":
    main()
