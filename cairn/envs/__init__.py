"""Environments that ship with cairn, for tests and examples."""

from cairn.envs.multi_agent_cartpole import MultiAgentCartPole

__all__ = ["MultiAgentCartPole"]
