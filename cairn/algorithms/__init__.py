"""Algorithms: the shared Algorithm base, PPO, DQN and SAC."""

from cairn.algorithms.algorithm import Algorithm
from cairn.algorithms.dqn import DQN, DQNConfig
from cairn.algorithms.ppo import PPO, PPOConfig
from cairn.algorithms.sac import SAC, SACConfig

__all__ = ["Algorithm", "DQN", "DQNConfig", "PPO", "PPOConfig", "SAC", "SACConfig"]
