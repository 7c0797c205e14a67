"""Environments that ship with cairn, for tests and examples."""

from cairn.envs.multi_agent_cartpole import MultiAgentCartPole, make_multi_agent_cartpole

__all__ = ["MultiAgentCartPole", "make_multi_agent_cartpole"]
