"""Algorithms: the shared Algorithm base, PPO, DQN, SAC and TD3."""

from cairn.algorithms.algorithm import Algorithm
from cairn.algorithms.dqn import DQN, DQNConfig
from cairn.algorithms.ppo import PPO, PPOConfig
from cairn.algorithms.sac import SAC, SACConfig
from cairn.algorithms.td3 import TD3, TD3Config

__all__ = ["Algorithm", "DQN", "DQNConfig", "PPO", "PPOConfig", "SAC", "SACConfig", "TD3", "TD3Config"]
