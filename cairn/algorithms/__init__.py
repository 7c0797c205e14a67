"""Algorithms: the shared Algorithm base, PPO, IMPALA, APPO, DQN, SAC and TD3."""

from cairn.algorithms.algorithm import Algorithm
from cairn.algorithms.dqn import DQN, DQNConfig
from cairn.algorithms.impala import APPO, IMPALA, APPOConfig, IMPALAConfig
from cairn.algorithms.ppo import PPO, PPOConfig
from cairn.algorithms.sac import SAC, SACConfig
from cairn.algorithms.td3 import TD3, TD3Config

__all__ = ["APPO", "APPOConfig", "Algorithm", "DQN", "DQNConfig", "IMPALA", "IMPALAConfig", "PPO",
           "PPOConfig", "SAC", "SACConfig", "TD3", "TD3Config"]
