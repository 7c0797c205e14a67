"""Policies: networks, action distributions, observation filters and their specs."""

from cairn.policy.policy import Policy
from cairn.policy.spec import PolicySpec

__all__ = ["Policy", "PolicySpec"]
