"""Algorithms: the shared Algorithm base and PPO."""

from cairn.algorithms.algorithm import Algorithm
from cairn.algorithms.ppo import PPO, PPOConfig

__all__ = ["Algorithm", "PPO", "PPOConfig"]
