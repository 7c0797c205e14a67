"""DQN: double/dueling deep Q-learning with uniform or prioritized replay."""

from cairn.algorithms.dqn.config import DQNConfig
from cairn.algorithms.dqn.dqn import DQN
from cairn.algorithms.dqn.dqn_policy import DQNPolicy

__all__ = ["DQN", "DQNConfig", "DQNPolicy"]
