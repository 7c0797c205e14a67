"""The environments of one env runner, stepped together: in the runner's process or in children.

``config.env_runners(gym_env_vectorize_mode=...)`` chooses (RLlib's name):

- ``"sync"`` (default): :class:`SyncEnvs`, the environments stepped one after another in the
  runner's own process.
- ``"async"``: :class:`~cairn.env_runner.subprocess_envs.AsyncEnvs`, each environment in its
  own child process, all stepped at the same time (for slow environments: the runner waits for
  the slowest one, not for their sum).

Both give the same results for the same seed: the runner draws every reset seed itself, in
the same order, and sends it with the reset. The env runner talks to them through
:class:`VectorEnvs` only, so the sampling loop is one and the same for both modes.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from cairn.config.base_fields import GYM_ENV_VECTORIZE_MODES
from cairn.env_runner.env_state import get_env_state, set_env_state
from cairn.env_runner.env_worker import StepResult
from cairn.env_runner.make_env import close_env, make_env
from cairn.env_runner.subprocess_envs import AsyncEnvs
from cairn.errors import ConfigError
from cairn.release import release_all
from cairn.rng import env_process_seed

if TYPE_CHECKING:
    from cairn.config.algorithm_config import AlgorithmConfig

__all__ = ["VectorEnvs", "SyncEnvs", "make_vector_envs"]



class VectorEnvs(Protocol):
    """The environments of one env runner (single-agent ones for ``"async"``)."""

    #: The environments (``"async"``: proxies with ``observation_space`` and ``action_space``).
    envs: list[Any]
    #: Whether ``step`` and ``reset`` return the envs' infos (else they may be None: an
    #: ``"async"`` child then does not send them).
    keep_infos: bool

    def step(self, actions: Iterable[Any], indices: Sequence[int] | None = None) -> list[StepResult]:
        """Step environment ``i`` with the ``i``-th action (a list, or an array whose first axis
        is the environment), every one of them: ``(obs, reward, terminated, truncated, info)``
        each (``info`` None unless :attr:`keep_infos`). With ``indices``, step only environment
        ``indices[j]``, with the ``j``-th action (the others wait), and return their results
        in that order."""
        ...

    def reset(self, seeds: Mapping[int, int | None]) -> dict[int, tuple[Any, Any]]:
        """Reset environment ``i`` with seed ``seeds[i]``; their first observations and infos
        (None unless :attr:`keep_infos`) by index."""
        ...

    def get_states(self) -> list[dict[str, Any] | None]:
        """:func:`~cairn.env_runner.env_state.get_env_state` of each environment."""
        ...

    def set_states(self, states: Sequence[dict[str, Any] | None]) -> bool:
        """Restore :meth:`get_states`; False unless every environment took its state."""
        ...

    def close(self) -> None:
        """Close the environments (and end their processes)."""
        ...


class SyncEnvs:
    """Environments stepped one after another in this process (``"sync"``)."""

    def __init__(self, envs: list[Any]) -> None:
        self.envs = envs
        self.keep_infos = False  # the infos are here anyway: returned either way

    def step(self, actions: Iterable[Any], indices: Sequence[int] | None = None) -> list[StepResult]:
        envs = self.envs if indices is None else [self.envs[i] for i in indices]
        return [env.step(action) for env, action in zip(envs, actions)]

    def reset(self, seeds: Mapping[int, int | None]) -> dict[int, tuple[Any, Any]]:
        return {i: self.envs[i].reset(seed=seed) for i, seed in seeds.items()}

    def get_states(self) -> list[dict[str, Any] | None]:
        return [get_env_state(env) for env in self.envs]

    def set_states(self, states: Sequence[dict[str, Any] | None]) -> bool:
        return all(set_env_state(env, s) for env, s in zip(self.envs, states))

    def close(self) -> None:
        release_all(*(lambda env=env: close_env(env) for env in self.envs))


def make_vector_envs(config: AlgorithmConfig, num_envs: int, first_env: Any = None, *,
                     worker_index: int = 0, seed_offset: int = 0) -> VectorEnvs:
    """``num_envs`` environments of ``config`` in ``config.gym_env_vectorize_mode``.

    ``first_env``, an already created environment, becomes the first one in ``"sync"`` mode;
    ``"async"`` closes it (an environment object does not move to another process) and creates
    every environment in its child, whose numpy and torch global generators are seeded from
    ``config.seed``, ``worker_index``, ``seed_offset`` (the runner's) and the env's index
    (:func:`cairn.rng.env_process_seed`).
    """
    mode = config.gym_env_vectorize_mode
    if mode == "sync":
        envs = [first_env] if first_env is not None else []
        return SyncEnvs(envs + [make_env(config) for _ in range(num_envs - len(envs))])
    if mode == "async":
        close_env(first_env)
        seeds = [env_process_seed(config.seed, worker_index, seed_offset, i) for i in range(num_envs)]
        return AsyncEnvs(config.env, config.env_config, num_envs, seeds)
    raise ConfigError(f"Config 'gym_env_vectorize_mode'={mode!r} is invalid: expected one of "
                      f"{list(GYM_ENV_VECTORIZE_MODES)}.")
