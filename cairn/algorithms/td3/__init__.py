"""TD3: twin delayed deep deterministic policy gradient, with n-step returns and replay."""

from cairn.algorithms.td3.config import TD3Config
from cairn.algorithms.td3.td3 import TD3
from cairn.algorithms.td3.td3_policy import TD3Policy

__all__ = ["TD3", "TD3Config", "TD3Policy"]
