"""``gym_env_vectorize_mode="async"``: each environment of an env runner in its own child process.

Why an own worker per environment (:mod:`cairn.env_runner.env_worker`) rather than Gymnasium's
``AsyncVectorEnv``: the env runner resets an environment the moment its episode ends, with a
seed it draws itself, and keeps the final observation; ``AsyncVectorEnv`` autoresets on its
own schedule with its own seeds. With one small worker per environment the runner's loop is
the same in both modes, so ``"async"`` gives bit for bit the results of ``"sync"``.

**Start method.** Children start with ``"forkserver"`` where the platform has it (Linux,
macOS), else ``"spawn"``; never ``"fork"``: forking a process that runs torch (whose thread
pools and locks do not survive a fork) can deadlock. The fork server imports cairn once
(``set_forkserver_preload``), so that each child starts in milliseconds. The child receives
the environment's creator and ``env_config`` pickled with cloudpickle (a Gymnasium
dependency; Gymnasium's ``AsyncVectorEnv`` does the same): importable functions by reference,
lambdas, nested functions and functions of a notebook or ``python -c`` by value. A name given
to :func:`cairn.register_env` is resolved here, and its creator is sent. As with every
non-"fork" start method, the child imports the main module of a script: a script must build
and train under ``if __name__ == "__main__":`` (SB3's ``SubprocVecEnv`` asks the same).

**Errors.** Every request is answered on every pipe before anything raises: a command sent
to several children reads all their answers, then raises the first child's error (Gymnasium's
``AsyncVectorEnv`` does the same), so that no unread answer is taken for the answer to the
next request. A pipe whose reading was cut short anyway (an interrupt) is drained of its
stale answers before the next request is sent. The environment that raised is in an unknown
state: the env runner resets every environment before it steps them again
(docs/fault-tolerance.md).

**Lifetime.** :meth:`AsyncEnvs.close` (``EnvRunner.stop()``, ``Algorithm.stop()``) ends the
children. They are daemon processes (ended when the parent exits normally), and a child whose
parent died (its pipe closes) exits by itself.
"""

from __future__ import annotations

import itertools
import multiprocessing
import pickle
import weakref
from collections.abc import Iterable, Mapping, Sequence
from multiprocessing.connection import Connection
from typing import Any

from cairn.env_runner.env_worker import StepResult, run_env_worker
from cairn.errors import ConfigError, EnvError
from cairn.registry import registered_envs

__all__ = ["AsyncEnvs", "SubprocessEnv", "START_METHOD"]

#: The multiprocessing start method of the children (module docstring: why not "fork").
START_METHOD = "forkserver" if "forkserver" in multiprocessing.get_all_start_methods() else "spawn"
_JOIN_TIMEOUT_S = 5.0
_FIX = "or use gym_env_vectorize_mode='sync'"


def _context() -> Any:
    context = multiprocessing.get_context(START_METHOD)
    if START_METHOD == "forkserver":
        context.set_forkserver_preload(["cairn.env_runner.env_worker"])
    return context


def _pickled_env(env: Any, env_config: Any) -> bytes:
    """``(env, env_config)`` as the child receives them (a registered name becomes its creator)."""
    import cloudpickle

    if isinstance(env, str) and env in (creators := registered_envs()):
        env = creators[env]
    try:
        return cloudpickle.dumps((env, env_config))  # type: ignore[no-any-return]
    except Exception as exc:
        raise EnvError(
            f"gym_env_vectorize_mode='async' cannot send environment {env!r} with "
            f"env_config={env_config!r} to a child process (it is pickled with cloudpickle): "
            f"{type(exc).__name__}: {exc}. Make the creator and env_config picklable (a creator "
            f"should not hold locks, open files, sockets or live environments: create those "
            f"inside it), {_FIX}.") from exc


class SubprocessEnv:
    """One environment in a child process: its spaces, and requests sent to it.

    ``send`` then ``receive`` is one request; the runner sends to every child before it
    receives from any, so that the children work at the same time. The answers not yet read
    are counted: ``send`` first reads and drops any left over (a reader cut short), so that
    an answer always belongs to the request just sent.
    """

    def __init__(self, context: Any, env_name: str, payload: bytes, index: int,
                 process_seed: int | None = None) -> None:
        self.index = index
        self.env_name = env_name
        self._conn, child_conn = context.Pipe()
        self.process = context.Process(target=run_env_worker, args=(child_conn, payload, process_seed),
                                       name=f"cairn-env-{index}", daemon=True)
        self.process.start()
        child_conn.close()  # our copy: the pipe then closes when the child exits
        self.observation_space: Any = None
        self.action_space: Any = None
        self._unread = 1  # the child's "create" report

    def send(self, command: str, argument: Any = None) -> None:
        while self._unread:  # answers of an earlier request whose reading was cut short: dropped
            try:
                self._conn.recv_bytes()
            except (EOFError, OSError) as exc:
                raise self._died(command) from exc
            self._unread -= 1
        self._unread += 1
        try:
            self._conn.send_bytes(pickle.dumps((command, argument), pickle.HIGHEST_PROTOCOL))
        except (BrokenPipeError, OSError) as exc:
            raise self._died(command) from exc

    def receive(self, command: str) -> Any:
        try:
            message = self._conn.recv_bytes()
        except (EOFError, OSError) as exc:
            raise self._died(command) from exc
        self._unread -= 1
        status, value = pickle.loads(message)
        if status != "ok":
            raise EnvError(f"Environment {self.env_name!r} (env {self.index}, child process "
                           f"{self.process.pid}) failed in {command}():\n{value}")
        return value

    def _died(self, command: str) -> EnvError:
        self.process.join(_JOIN_TIMEOUT_S)  # its pipe closed: it is exiting; wait for the code
        hint = (" A script that builds the algorithm must do so under `if __name__ == "
                "\"__main__\":`: the child imports the main module (" + repr(START_METHOD)
                + " start method), see its traceback above." if command == "create" else "")
        return EnvError(f"The child process of environment {self.env_name!r} (env {self.index}, "
                        f"pid {self.process.pid}) exited with code {self.process.exitcode} during "
                        f"{command}().{hint} Run with gym_env_vectorize_mode='sync' to see the "
                        "environment's error in this process.")

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        """Gymnasium's ``step``, for code that uses one environment at a time."""
        self.send("step+info", action)
        return tuple(self.receive("step"))  # type: ignore[return-value]

    def reset(self, *, seed: int | None = None) -> tuple[Any, dict[str, Any]]:
        """Gymnasium's ``reset``."""
        self.send("reset+info", seed)
        return tuple(self.receive("reset"))  # type: ignore[return-value]

    def close(self) -> None:
        """Tell the child to close its environment; end it if it does not exit."""
        _end(self._conn, self.process)


def _end(conn: Connection, process: Any) -> None:
    try:
        conn.send_bytes(pickle.dumps(("close", None)))
    except (BrokenPipeError, OSError, ValueError):
        pass
    process.join(_JOIN_TIMEOUT_S)
    if process.is_alive():
        process.terminate()
        process.join(_JOIN_TIMEOUT_S)
    if process.is_alive():  # an environment that ignores SIGTERM (a simulator's own handler)
        process.kill()
        process.join(_JOIN_TIMEOUT_S)
    conn.close()


def _request_all(proxies: Sequence[SubprocessEnv], command: str, arguments: Iterable[Any],
                 name: str) -> list[Any]:
    """Send every proxy ``command`` with its argument (``arguments``, in order), then read every
    answer, in order (``name``: the request in error messages); when some failed, the first
    failure is raised, after every answer was read (each pipe is then ready for the next
    request). Every child works on its request while the others are sent theirs."""
    for proxy, argument in zip(proxies, arguments):
        proxy.send(command, argument)
    answers: list[Any] = []
    first_error: EnvError | None = None
    for proxy in proxies:
        try:
            answers.append(proxy.receive(name))
        except EnvError as exc:
            first_error = first_error or exc
            answers.append(None)
    if first_error is not None:
        raise first_error
    return answers


def _end_all(envs: list[SubprocessEnv]) -> None:
    for env in envs:
        env.close()


class AsyncEnvs:
    """``num_envs`` single-agent environments, each in its own child process (``"async"``).

    Args:
        env: A Gymnasium ID, a name given to :func:`cairn.register_env`, or a creator
            ``creator(env_config) -> env`` (sent with cloudpickle).
        env_config: Passed to the creator (or ``gym.make``) in each child.
        num_envs: How many children.
        process_seeds: The seed of numpy's and torch's global generators in each child
            (:func:`cairn.rng.env_process_seed`); None, or a None entry: fresh OS entropy.

    Raises:
        EnvError: ``env`` cannot be pickled, or a child could not create it (the child's
            traceback is in the message).
        ConfigError: the environment is multi-agent (``"async"`` takes single-agent ones).
    """

    def __init__(self, env: Any, env_config: Any, num_envs: int,
                 process_seeds: Sequence[int | None] | None = None) -> None:
        payload = _pickled_env(env, env_config)
        env_name = str(getattr(env, "__qualname__", env))
        context = _context()
        self.envs: list[SubprocessEnv] = []
        # Ends the children when this object is collected without close() (and at exit).
        self._finalizer = weakref.finalize(self, _end_all, self.envs)
        try:
            for i in range(num_envs):
                seed = None if process_seeds is None else process_seeds[i]
                self.envs.append(SubprocessEnv(context, env_name, payload, i, seed))
            infos = [proxy.receive("create") for proxy in self.envs]
        except BaseException:
            self.close()
            raise
        for proxy, (_, observation_space, action_space) in zip(self.envs, infos):
            proxy.observation_space, proxy.action_space = observation_space, action_space
        #: Whether the children send their infos with each step and reset (VectorEnvs).
        self.keep_infos = False
        if any(multi_agent for multi_agent, _, _ in infos):
            self.close()
            raise ConfigError(
                f"gym_env_vectorize_mode='async' runs single-agent Gymnasium environments; "
                f"{env!r} is multi-agent (PettingZoo). Use gym_env_vectorize_mode='sync' for it.")

    def step(self, actions: Iterable[Any], indices: Sequence[int] | None = None) -> list[StepResult]:
        command = "step+info" if self.keep_infos else "step"
        proxies = self.envs if indices is None else [self.envs[i] for i in indices]
        return _request_all(proxies, command, actions, "step")

    def reset(self, seeds: Mapping[int, int | None]) -> dict[int, tuple[Any, Any]]:
        command = "reset+info" if self.keep_infos else "reset"
        return dict(zip(seeds, _request_all([self.envs[i] for i in seeds], command, seeds.values(), "reset")))

    def get_states(self) -> list[dict[str, Any] | None]:
        return _request_all(self.envs, "get_state", itertools.repeat(None), "get_state")

    def set_states(self, states: Sequence[dict[str, Any] | None]) -> bool:
        return all(_request_all(self.envs, "set_state", states, "set_state"))

    def close(self) -> None:
        self._finalizer()

    def processes(self) -> list[Any]:
        """The children's :class:`multiprocessing.Process` objects (e.g. to check they ended)."""
        return [proxy.process for proxy in self.envs]
