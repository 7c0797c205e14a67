"""SAC: soft actor-critic with twin Q critics, entropy tuning, n-step returns and replay."""

from cairn.algorithms.sac.config import SACConfig
from cairn.algorithms.sac.sac import SAC
from cairn.algorithms.sac.sac_policy import SACPolicy

__all__ = ["SAC", "SACConfig", "SACPolicy"]
