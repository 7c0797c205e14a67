"""Creating environments from a config, and telling single- from multi-agent ones."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import gymnasium as gym

from cairn.errors import EnvError
from cairn.registry import registered_envs

if TYPE_CHECKING:
    from cairn.config.algorithm_config import AlgorithmConfig

__all__ = ["make_env", "is_multi_agent_env"]


def make_env(config: AlgorithmConfig) -> Any:
    """Create one environment from ``config.env`` and ``config.env_config``."""
    env, env_config = config.env, dict(config.env_config or {})
    try:
        if callable(env):
            return env(env_config)
        creators = registered_envs()
        if env in creators:
            return creators[env](env_config)
        return gym.make(env, **env_config)
    except (gym.error.Error, TypeError) as exc:
        raise EnvError(f"Could not create environment {env!r} with env_config={env_config}: {exc}") from exc


def is_multi_agent_env(env: Any) -> bool:
    """True for PettingZoo ParallelEnv-like environments (``possible_agents`` and dict spaces)."""
    return hasattr(env, "possible_agents") and callable(getattr(env, "observation_space", None))
