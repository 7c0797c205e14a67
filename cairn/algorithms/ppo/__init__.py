"""PPO: Proximal Policy Optimization."""

from cairn.algorithms.ppo.loss import compute_gae, ppo_loss
from cairn.algorithms.ppo.ppo import PPO, PPOConfig

__all__ = ["PPO", "PPOConfig", "compute_gae", "ppo_loss"]
