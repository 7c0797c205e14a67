"""Algorithm configuration."""

from cairn.config.algorithm_config import AlgorithmConfig
from cairn.policy.spec import PolicySpec

__all__ = ["AlgorithmConfig", "PolicySpec"]
