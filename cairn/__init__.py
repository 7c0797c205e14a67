"""cairn: reinforcement learning whose checkpoints survive.

>>> import cairn
>>> config = cairn.PPOConfig().environment("CartPole-v1").debugging(seed=0)
"""

import logging as _logging

from cairn._version import __version__
from cairn.algorithms import (
    APPO,
    DQN,
    IMPALA,
    PPO,
    SAC,
    TD3,
    Algorithm,
    APPOConfig,
    DQNConfig,
    IMPALAConfig,
    PPOConfig,
    SACConfig,
    TD3Config,
)
from cairn.callbacks import Callbacks
from cairn.checkpoint import get_checkpoint_info
from cairn.checkpoint.manager import CheckpointManager
from cairn.config import AlgorithmConfig
from cairn.models import register_model
from cairn.module_trust import trust_modules
from cairn.policy import Policy, PolicySpec
from cairn.policy_ids import validate_policy_id
from cairn.registry import register_env

# isort: split
# cairn.export is public as ``cairn.export`` (export_model, model_inputs, ...); importing it
# registers nothing (the policy layer reaches its writers through cairn.registry's names).
from cairn import export as _export  # noqa: F401

# The library logs to the "cairn" logger and prints nothing unless the application configures
# logging (the cairn command does: -v, --log-level); without this handler Python's last-resort
# handler would print its warnings.
_logging.getLogger("cairn").addHandler(_logging.NullHandler())

__all__ = [
    "__version__",
    "APPO",
    "APPOConfig",
    "Algorithm",
    "AlgorithmConfig",
    "Callbacks",
    "CheckpointManager",
    "DQN",
    "DQNConfig",
    "IMPALA",
    "IMPALAConfig",
    "PPO",
    "PPOConfig",
    "Policy",
    "PolicySpec",
    "SAC",
    "SACConfig",
    "TD3",
    "TD3Config",
    "get_checkpoint_info",
    "register_env",
    "register_model",
    "trust_modules",
    "validate_policy_id",
]
