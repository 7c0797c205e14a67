"""What runs in the child process of one environment under ``gym_env_vectorize_mode="async"``.

The child creates its environment, reports its spaces, then answers the parent's commands over
a :class:`multiprocessing.connection.Connection` until it is told to close or the parent is
gone (its end of the pipe closes: the child then exits by itself, so none is left behind when
the parent dies). Every answer is ``("ok", value)`` or ``("error", traceback_text)``.

Commands (``(name, argument)`` tuples):

- ``("step", action)``: ``(obs, reward, terminated, truncated, None)``; ``("step+info",
  action)``: the same with the env's info dict in place of None (sent only when the env
  runner keeps infos for episode callbacks: an info can be large).
- ``("reset", seed)`` / ``("reset+info", seed)``: ``(obs, None)`` / ``(obs, info)``.
- ``("get_state", None)`` / ``("set_state", state)``: :func:`~cairn.env_runner.env_state.get_env_state`
  and :func:`~cairn.env_runner.env_state.set_env_state`, run here, next to the environment.
- ``("close", None)``: close the environment and exit.
"""

from __future__ import annotations

import pickle
import signal
import traceback
from multiprocessing.connection import Connection
from typing import Any

from cairn.env_runner.env_state import get_env_state, set_env_state
from cairn.env_runner.make_env import close_env, create_env, is_multi_agent_env
from cairn.rng import seed_process_generators

__all__ = ["run_env_worker", "StepResult"]

#: ``(obs, reward, terminated, truncated, info)`` of one environment's step (``info`` None when
#: it is not asked for).
StepResult = tuple[Any, float, bool, bool, Any]


def _send(conn: Connection, message: tuple[str, Any]) -> None:
    # Plain pickle over send_bytes: multiprocessing's send() builds a ForkingPickler per message.
    conn.send_bytes(pickle.dumps(message, pickle.HIGHEST_PROTOCOL))


def _answer(env: Any, command: str, argument: Any) -> Any:
    """The value that answers ``command``."""
    if command == "step":
        obs, reward, terminated, truncated, _ = env.step(argument)
        return obs, reward, terminated, truncated, None
    if command == "step+info":
        return env.step(argument)
    if command == "reset":
        return env.reset(seed=argument)[0], None
    if command == "reset+info":
        return env.reset(seed=argument)
    if command == "get_state":
        return get_env_state(env)
    if command == "set_state":
        return set_env_state(env, argument)
    raise ValueError(f"unknown env worker command {command!r}")


def run_env_worker(conn: Connection, payload: bytes, process_seed: int | None = None) -> None:
    """Create the environment of ``payload`` (``(env, env_config)`` pickled with cloudpickle,
    as :func:`create_env` takes them) and serve the parent's commands on ``conn`` (the module
    docstring lists them); numpy's and torch's global generators are seeded with
    ``process_seed`` first (None: fresh OS entropy)."""
    # Ctrl-C reaches the whole process group, and so does SIGTERM from a job scheduler (SLURM
    # signals every process of the job) or `kill -TERM -PGID`: the parent handles them (cairn
    # train finishes the iteration and saves, which reads these children's states) and closes
    # its children; a child whose parent is gone sees its pipe end and exits.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    seed_process_generators(process_seed)
    try:
        instance = create_env(*pickle.loads(payload))
        multi_agent = is_multi_agent_env(instance)
        spaces = (None, None) if multi_agent else (instance.observation_space, instance.action_space)
        _send(conn, ("ok", (multi_agent, *spaces)))
    except BaseException:
        _send(conn, ("error", traceback.format_exc()))
        return
    try:
        while True:
            try:
                command, argument = pickle.loads(conn.recv_bytes())
            except (EOFError, OSError):  # the parent is gone
                return
            if command == "close":
                return
            try:
                _send(conn, ("ok", _answer(instance, command, argument)))
            except Exception:
                _send(conn, ("error", traceback.format_exc()))
    except (BrokenPipeError, EOFError, OSError):
        return  # the parent is gone while we answered
    finally:
        close_env(instance)
