"""Creating environments from a config, and telling single- from multi-agent ones."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import gymnasium as gym
import numpy as np

from cairn.config.read_only import ReadOnlyDict, ReadOnlyList
from cairn.errors import EnvError
from cairn.registry import registered_envs

if TYPE_CHECKING:
    from cairn.config.algorithm_config import AlgorithmConfig

__all__ = ["make_env", "create_env", "is_multi_agent_env", "is_turn_based_env", "env_agents", "close_env"]


def make_env(config: AlgorithmConfig) -> Any:
    """Create one environment from ``config.env`` and ``config.env_config``.

    Multi-agent environments run through PettingZoo's ``ParallelEnv`` API, or its ``AECEnv``
    API for turn-based games. An ``AECEnv`` whose metadata says ``is_parallelizable`` (every
    agent acts once per cycle, as in the envs PettingZoo builds with ``parallel_to_aec``) is
    converted with ``pettingzoo.utils.conversions.aec_to_parallel``, which is exact for such
    envs. Any other AECEnv (turn-based games such as chess, connect four or tic-tac-toe) is
    returned unchanged: :func:`is_turn_based_env` is then True, and the env runner steps the
    agent whose turn it is (:mod:`cairn.env_runner.turn_based`, docs/multi-agent.md).
    """
    return create_env(config.env, config.env_config)


def _own_copy(value: Any) -> Any:
    """``value`` copied through its plain dicts, lists and tuples, with its numpy arrays copied
    (writeable, also where a built algorithm's config holds read-only ones), the creator's to
    change (other objects are shared: a user's object in ``env_config`` may not copy, a dict
    subclass keeps its type). A shallow copy let a creator that changes a nested value
    (``env_config["layout"].append(...)``, ``env_config["goal"][0] += 1`` on an array) change
    the config's own, so every env created after it, ``to_dict()`` and checkpoints saw the
    change."""
    if type(value) in (dict, ReadOnlyDict):  # a built algorithm's config holds read-only ones
        return {key: _own_copy(item) for key, item in value.items()}
    if type(value) in (list, ReadOnlyList):
        return [_own_copy(item) for item in value]
    if type(value) is tuple:
        return tuple(_own_copy(item) for item in value)
    if type(value) is np.ndarray:
        return value.copy()
    return value


def create_env(env: Any, env_config: dict[str, Any] | None) -> Any:
    """Create one environment from ``env`` (a Gymnasium ID, a name given to
    :func:`cairn.register_env`, or a creator ``creator(env_config) -> env``) and ``env_config``,
    as :func:`make_env` does for a config; the creator gets its own copy of ``env_config``, its
    nested dicts, lists and numpy arrays too. A Gymnasium ``VectorEnv`` is refused (EnvError): env runners
    vectorise environments themselves."""
    env_config = _own_copy(dict(env_config or {}))
    try:
        if callable(env):
            created = env(env_config)
        elif env in (creators := registered_envs()):
            created = creators[env](env_config)
        else:
            if "/" in env:  # a fresh process (a remote runner) may not have imported ale_py yet
                from cairn.envs.gym_namespaces import import_env_namespace

                import_env_namespace(env)
            created = gym.make(env, **env_config)
    except (gym.error.Error, TypeError) as exc:
        raise EnvError(f"Could not create environment {env!r} with env_config={env_config}: {exc}") from exc
    except Exception as exc:
        from cairn.envs.mujoco_gl import MujocoGLError, mujoco_gl_problem

        # A MuJoCo env whose `import mujoco` fails to load MUJOCO_GL's backend: name the
        # variable and the fix, not the AttributeError deep inside PyOpenGL.
        problem = mujoco_gl_problem(exc)
        if problem is None:
            raise
        raise MujocoGLError(f"Could not create environment {env!r}: {problem}") from exc
    if isinstance(created, gym.vector.VectorEnv):
        # Its batched spaces and autoreset steps are not one environment's: the algorithm
        # built on them, then sampling failed deep inside (numpy's "setting an array element
        # with a sequence"), even for num_envs=1.
        close_env(created)
        raise EnvError(
            f"Environment {env!r} created a Gymnasium VectorEnv ({type(created).__name__}, "
            f"num_envs={getattr(created, 'num_envs', '?')}); cairn vectorises environments itself. "
            "Fix: create one environment (gym.make, not gym.make_vec) and set "
            "config.env_runners(num_envs_per_env_runner=N, gym_env_vectorize_mode='sync' or "
            "'async') for N copies.")
    return _as_parallel_env(created)


def _as_parallel_env(env: Any) -> Any:
    """``env`` itself, or a parallelizable PettingZoo AECEnv converted to a ParallelEnv.

    A turn-based AECEnv (one that does not declare ``metadata["is_parallelizable"]``) is
    returned as it is: env runners step it agent by agent (:mod:`cairn.env_runner.turn_based`).
    """
    if isinstance(env, gym.Env):  # single-agent: no need to import pettingzoo (~0.1 s)
        return env
    from pettingzoo import AECEnv

    if not isinstance(env, AECEnv):
        return env
    metadata = getattr(env, "metadata", None) or {}
    if metadata.get("is_parallelizable", False):
        from pettingzoo.utils.conversions import aec_to_parallel

        return aec_to_parallel(env)
    return env


def is_turn_based_env(env: Any) -> bool:
    """True for a PettingZoo ``AECEnv`` that :func:`make_env` did not convert: agents take turns
    (``env.agent_selection`` moves next), and the env runner steps one agent at a time."""
    if isinstance(env, gym.Env) or not hasattr(env, "possible_agents"):
        return False
    from pettingzoo import AECEnv

    return isinstance(env, AECEnv)


def is_multi_agent_env(env: Any) -> bool:
    """True for PettingZoo environments, ParallelEnv-like (``possible_agents`` and per-agent
    spaces) or turn-based AECEnvs (:func:`is_turn_based_env`)."""
    return hasattr(env, "possible_agents") and callable(getattr(env, "observation_space", None))


def env_agents(env: Any, default_agent_id: Any) -> dict[Any, tuple[Any, Any]]:
    """``{agent_id: (observation_space, action_space)}`` of an environment; a single-agent one
    has one agent, ``default_agent_id``."""
    if is_multi_agent_env(env):
        return {a: (env.observation_space(a), env.action_space(a)) for a in env.possible_agents}
    return {default_agent_id: (env.observation_space, env.action_space)}


def close_env(env: Any) -> None:
    """Close ``env`` if it can be closed (None and objects without ``close()`` are left be)."""
    close = getattr(env, "close", None)
    if close is not None:
        close()
