"""Algorithms: the shared Algorithm base, PPO and DQN."""

from cairn.algorithms.algorithm import Algorithm
from cairn.algorithms.dqn import DQN, DQNConfig
from cairn.algorithms.ppo import PPO, PPOConfig

__all__ = ["Algorithm", "DQN", "DQNConfig", "PPO", "PPOConfig"]
