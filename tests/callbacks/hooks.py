"""Callbacks classes for the tests, at module level so that configs and checkpoints name them."""

from __future__ import annotations

import threading
from collections import Counter
from typing import Any

import gymnasium as gym
import numpy as np

from cairn.callbacks import Callbacks, MLflowLogger, WandbLogger
from cairn.envs.multi_agent_cartpole import MultiAgentCartPole

#: Calls per hook name, per process (remote runners count in their own process).
CALLS: Counter[str] = Counter()


class CountingCallbacks(Callbacks):
    """Counts every hook; overrides take exactly the documented keyword arguments (no
    ``**kwargs``), so a call with any other argument fails the test. Its
    ``on_checkpoint_saved`` leaves out ``iteration``, as overrides written before it did."""

    def on_algorithm_init(self, *, algorithm: Any) -> None:
        CALLS["on_algorithm_init"] += 1

    def on_episode_start(self, *, episode: Any, env_runner: Any) -> None:
        CALLS["on_episode_start"] += 1
        assert episode.length == 0 and episode.custom_metrics == {}

    def on_episode_step(self, *, episode: Any, env_runner: Any) -> None:
        CALLS["on_episode_step"] += 1
        episode.custom_metrics["steps_seen"] = episode.custom_metrics.get("steps_seen", 0) + 1

    def on_episode_end(self, *, episode: Any, env_runner: Any) -> None:
        CALLS["on_episode_end"] += 1
        episode.custom_metrics["length"] = episode.length
        episode.custom_metrics["env_index"] = episode.env_index

    def on_sample_end(self, *, samples: Any, env_runner: Any) -> None:
        CALLS["on_sample_end"] += 1
        CALLS["sampled_rows"] += sum(len(batch) for batch in samples.values())

    def on_train_result(self, *, algorithm: Any, result: dict[str, Any]) -> None:
        CALLS["on_train_result"] += 1
        result["callback_saw_iteration"] = result["training_iteration"]

    def on_evaluate_end(self, *, algorithm: Any, evaluation_metrics: dict[str, Any]) -> None:
        CALLS["on_evaluate_end"] += 1

    def on_checkpoint_saved(self, *, algorithm: Any, checkpoint: str) -> None:
        CALLS["on_checkpoint_saved"] += 1

    def on_checkpoint_loaded(self, *, algorithm: Any) -> None:
        CALLS["on_checkpoint_loaded"] += 1

    def on_algorithm_stop(self, *, algorithm: Any) -> None:
        CALLS["on_algorithm_stop"] += 1


class StopAtTwo(Callbacks):
    """Asks to stop once two iterations are done."""

    def on_train_result(self, *, algorithm: Any, result: dict[str, Any]) -> None:
        result["done"] = result["training_iteration"] >= 2


class EpisodeLength(Callbacks):
    """Reports each episode's length as a custom metric (from the step hook, so that the
    metric is in flight mid-episode when a checkpoint is taken)."""

    def on_episode_step(self, *, episode: Any, env_runner: Any) -> None:
        episode.custom_metrics["len"] = episode.length


class NotCallbacks:
    """Not a cairn.Callbacks subclass."""


class LateReport(Callbacks):
    """Records what ``on_checkpoint_saved`` sees, reporting only once ``release`` is set (so
    that a background save reports after the next ``train()``)."""

    release = threading.Event()
    seen: list[tuple[int, int, str]] = []

    def on_checkpoint_saved(self, *, algorithm: Any, checkpoint: str, iteration: int) -> None:
        assert self.release.wait(120), "the test never released the report"
        self.seen.append((iteration, algorithm.iteration, checkpoint))


class LateWandbLogger(WandbLogger):
    """The W&B logger, reporting a checkpoint only once :attr:`LateReport.release` is set."""

    def on_checkpoint_saved(self, **kwargs: Any) -> None:
        assert LateReport.release.wait(120), "the test never released the report"
        super().on_checkpoint_saved(**kwargs)


class RaiseEveryStep(Callbacks):
    """Raises the same error on every step: a deterministic bug in a user's callback, which a
    recreated runner meets again at once."""

    def on_episode_step(self, *, episode: Any, env_runner: Any) -> None:
        CALLS["on_episode_step"] += 1
        raise RuntimeError("RaiseEveryStep: this callback fails on every step")


class RaiseAfterTraining(Callbacks):
    """Raises in every algorithm-level hook that runs after an iteration learned or while the
    algorithm stops (``on_train_result``, ``on_checkpoint_saved``, ``on_algorithm_stop``): a
    user's failing hooks, beside which the ready-made loggers of ``cairn train --mlflow`` run."""

    def on_train_result(self, *, algorithm: Any, result: dict[str, Any]) -> None:
        raise RuntimeError("RaiseAfterTraining: on_train_result fails")

    def on_checkpoint_saved(self, *, algorithm: Any, checkpoint: str) -> None:
        raise RuntimeError("RaiseAfterTraining: on_checkpoint_saved fails")

    def on_algorithm_stop(self, *, algorithm: Any) -> None:
        raise RuntimeError("RaiseAfterTraining: on_algorithm_stop fails")


class RaiseOnLoad(CountingCallbacks):
    """Counts every hook, and raises once in each of ``on_algorithm_init`` and
    ``on_checkpoint_loaded`` that :data:`RAISE_ON_LOAD` names."""

    def on_algorithm_init(self, *, algorithm: Any) -> None:
        super().on_algorithm_init(algorithm=algorithm)
        _raise_if_named("on_algorithm_init")

    def on_checkpoint_loaded(self, *, algorithm: Any) -> None:
        super().on_checkpoint_loaded(algorithm=algorithm)
        _raise_if_named("on_checkpoint_loaded")


#: The hooks in which :class:`RaiseOnLoad` raises next (each once).
RAISE_ON_LOAD: set[str] = set()


def _raise_if_named(hook: str) -> None:
    if hook in RAISE_ON_LOAD:
        RAISE_ON_LOAD.discard(hook)
        raise RuntimeError(f"RaiseOnLoad: injected failure in {hook}")


class SeesReplay(CountingCallbacks):
    """Records, in ``on_algorithm_init``, the replay buffers an off-policy algorithm holds."""

    def on_algorithm_init(self, *, algorithm: Any) -> None:
        super().on_algorithm_init(algorithm=algorithm)
        CALLS["replay_buffers_at_init"] = len(algorithm.replay_buffers)


class EvaluationTally(Callbacks):
    """Counts the evaluation episodes its own ``on_episode_end`` saw and reports the count in
    ``on_evaluate_end``: state kept on the instance, as a user's callbacks keep it."""

    def __init__(self) -> None:
        self.evaluation_episodes = 0

    def on_episode_end(self, *, episode: Any, env_runner: Any) -> None:
        if env_runner.evaluation:
            self.evaluation_episodes += 1

    def on_evaluate_end(self, *, algorithm: Any, evaluation_metrics: dict[str, Any]) -> None:
        evaluation_metrics["episodes_seen_by_hooks"] = self.evaluation_episodes
        self.evaluation_episodes = 0


class FiveStepEnv(gym.Env):  # type: ignore[misc]
    """Every episode lasts exactly five steps (far fewer than a batch of sampled steps) and pays
    1 a step."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, config: dict[str, Any] | None = None) -> None:
        self.t = 0

    def reset(self, *, seed: int | None = None, options: Any = None) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(2, np.float32), {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        self.t += 1
        return np.zeros(2, np.float32), 1.0, self.t >= 5, False, {}


def make_five_step_ma_cartpole(env_config: dict[str, Any]) -> MultiAgentCartPole:
    """Two-agent CartPole (a PettingZoo ParallelEnv) whose episodes last at most five steps."""
    return MultiAgentCartPole(num_agents=2, max_episode_steps=5)


class BadNameMLflowLogger(MLflowLogger):
    """The MLflow logger with a custom metric whose name MLflow refuses (``%``) beside a good one."""

    def on_episode_end(self, *, episode: Any, env_runner: Any) -> None:
        episode.custom_metrics["win%"] = 1.0
        episode.custom_metrics["len"] = episode.length



class RacingMLflowLogger(MLflowLogger):
    """The MLflow logger, with its run's start on a background save's writer thread held open
    until the main thread comes to start one too (at the start's lock, ``_start_lock``, or
    through ``_start_run`` itself, which it then finishes first): the two first reports of a
    run, at once."""

    writer_starting = threading.Event()  #: the writer thread is inside _start_run
    main_arrived = threading.Event()  #: the main thread came to start a run

    def __init__(self) -> None:
        super().__init__()
        lock = getattr(self, "_start_lock", None)
        if lock is not None:
            self._start_lock = _ArrivalLock(lock, self.main_arrived)

    def _start_run(self, algorithm: Any) -> None:
        if threading.current_thread() is threading.main_thread():
            super()._start_run(algorithm)  # whole, before the writer's goes on
            self.main_arrived.set()
            return
        self.writer_starting.set()
        assert self.main_arrived.wait(120), "the main thread never came to start the run"
        super()._start_run(algorithm)


class _ArrivalLock:
    """A lock that sets ``arrived`` when the main thread comes to take it."""

    def __init__(self, lock: Any, arrived: threading.Event) -> None:
        self.lock, self.arrived = lock, arrived

    def __enter__(self) -> None:
        if threading.current_thread() is threading.main_thread():
            self.arrived.set()
        self.lock.acquire()

    def __exit__(self, *exc: object) -> None:
        self.lock.release()


class LateExperimentMLflowLogger(MLflowLogger):
    """The MLflow logger, whose first look-up of its experiment misses it and another process
    (a parallel Tune trial starting its own run) creates it right after: the experiment exists
    by the time this logger creates it."""

    @property
    def _client(self) -> Any:
        return self.__dict__.get("_real_client")

    @_client.setter
    def _client(self, client: Any) -> None:
        self.__dict__["_real_client"] = None if client is None else _CreatedMeanwhile(client)


class _CreatedMeanwhile:
    """An ``MlflowClient`` whose first ``get_experiment_by_name`` answers None (the experiment
    is absent at the look-up), after which another client creates that experiment."""

    def __init__(self, client: Any) -> None:
        self.client, self.looked_up = client, False

    def get_experiment_by_name(self, name: str) -> Any:
        if self.looked_up:
            return self.client.get_experiment_by_name(name)
        self.looked_up = True
        from mlflow.tracking import MlflowClient

        MlflowClient().create_experiment(name)  # the other process, in its own client
        return None

    def __getattr__(self, name: str) -> Any:
        return getattr(self.client, name)


class BadNameWandbLogger(WandbLogger):
    """The W&B logger with the same custom metrics as :class:`BadNameMLflowLogger`."""

    def on_episode_end(self, *, episode: Any, env_runner: Any) -> None:
        episode.custom_metrics["win%"] = 1.0
        episode.custom_metrics["len"] = episode.length
