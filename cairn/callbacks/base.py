"""``cairn.Callbacks``: hooks into training that a user overrides (docs/callbacks.md).

A subclass of :class:`Callbacks` is named in the config, ``config.callbacks(MyCallbacks)``
(a class, a registered name or ``"package.module:QualName"``), and stored there as a reference:
a restored algorithm runs the same hooks again. Each algorithm (and each remote env runner, in
its own process) builds one instance with no arguments; the local env runner and the evaluation
runner share the algorithm's. Every hook takes exactly the keyword arguments its signature lists, except that
``on_checkpoint_saved`` gets ``iteration`` only when the override declares it (or ``**kwargs``):
overrides written before it existed keep working.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from cairn.errors import ConfigError
from cairn.registry import class_reference, resolve_class

__all__ = ["Callbacks", "make_callbacks", "callbacks_reference", "overrides", "report_checkpoint_saved"]


class Callbacks:
    """No-op hooks; override the ones you need.

    A hook that raises stops the call it runs in; the exception reaches the caller unchanged
    and training stays usable (docs/fault-tolerance.md): one raising inside an env runner's
    ``sample()`` discards that fragment and its runner's envs start new episodes.

    Episode hooks get the :class:`~cairn.env_runner.episode.EpisodeTotals` of the episode
    (``episode.env_index``, ``episode.length``, ``episode.episode_return``,
    ``episode.agent_returns``, and ``episode.custom_metrics``, a dict whose numbers reach the
    training result as ``result["custom_metrics"][f"{name}_mean" | "_min" | "_max"]``) and the
    env runner that plays it. The episode's data is there too, with RLlib's getters:
    ``episode.get_observations(-1)``, ``get_actions``, ``get_rewards``, ``get_infos``
    (docs/callbacks.md, "Episode data").
    """

    #: Steps of each episode whose data the episode getters keep (observations, infos,
    #: actions, rewards), per env and agent: memory stays bounded in long episodes. An index
    #: older than that raises ``cairn.errors.EpisodeHistoryError``; None keeps whole episodes.
    #: Nothing is recorded unless an episode hook is overridden.
    episode_history_steps: int | None = 1000

    def on_algorithm_init(self, *, algorithm: Any) -> None:
        """The algorithm is built, all of it (an off-policy algorithm's replay buffers too), and
        its policies passed its checks (also when it is rebuilt from a checkpoint, before the
        state is loaded: :meth:`on_checkpoint_loaded` follows)."""

    def on_episode_start(self, *, episode: Any, env_runner: Any) -> None:
        """An episode begins in one of the runner's environments."""

    def on_episode_step(self, *, episode: Any, env_runner: Any) -> None:
        """The episode's environment took a step (once per env step; ``episode.length`` counts
        them)."""

    def on_episode_end(self, *, episode: Any, env_runner: Any) -> None:
        """The episode ended; its ``custom_metrics`` are recorded after this hook."""

    def on_sample_end(self, *, samples: Any, env_runner: Any) -> None:
        """The runner finished one ``sample()``: ``samples`` is ``{policy_id: SampleBatch}``."""

    def on_train_result(self, *, algorithm: Any, result: dict[str, Any]) -> None:
        """``algorithm.train()`` is about to return ``result`` (change it in place; set
        ``result["done"] = True`` to stop ``cairn train`` and Ray Tune). The iteration is
        complete by then: if this hook raises, it still counts, and ``algorithm.last_result``
        keeps ``result``."""

    def on_evaluate_end(self, *, algorithm: Any, evaluation_metrics: dict[str, Any]) -> None:
        """``algorithm.evaluate()`` is about to return ``evaluation_metrics``."""

    def on_checkpoint_saved(self, *, algorithm: Any, checkpoint: str, iteration: int) -> None:
        """``algorithm.save()`` committed a checkpoint at ``checkpoint`` (a path or URL) that
        holds the state after ``iteration`` training iterations. A background save
        (``blocking=False``) reports from its writer thread, when ``algorithm.iteration`` may
        have moved on: log the checkpoint under ``iteration``. (An override may leave
        ``iteration`` out of its signature; it is then not passed.)"""

    def on_checkpoint_loaded(self, *, algorithm: Any) -> None:
        """A checkpoint's state was loaded (once per ``from_checkpoint`` or ``restore``)."""

    def on_algorithm_stop(self, *, algorithm: Any) -> None:
        """``algorithm.stop()`` is releasing the environments (loggers end their runs here)."""


def overrides(callbacks: Callbacks, hook: str) -> bool:
    """Whether ``callbacks`` overrides ``hook`` (the per-step hooks are skipped otherwise)."""
    return getattr(type(callbacks), hook) is not getattr(Callbacks, hook)


def report_checkpoint_saved(callbacks: Callbacks, *, algorithm: Any, checkpoint: str,
                            iteration: int) -> None:
    """Call ``callbacks.on_checkpoint_saved``, passing ``iteration`` when the hook declares it
    (or takes ``**kwargs``): the argument came after the hook, and an override written before
    it must not fail with a TypeError."""
    hook: Callable[..., None] = callbacks.on_checkpoint_saved  # an override may lack iteration
    parameters = inspect.signature(hook).parameters.values()
    if any(p.name == "iteration" or p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters):
        hook(algorithm=algorithm, checkpoint=checkpoint, iteration=iteration)
    else:
        hook(algorithm=algorithm, checkpoint=checkpoint)


def callbacks_reference(value: Any) -> str | None:
    """What a config stores for ``config.callbacks(value)``: None, or the reference of a
    :class:`Callbacks` subclass (its registered short name or ``"module:QualName"``)."""
    if value is None or isinstance(value, str):
        return value
    if not (isinstance(value, type) and issubclass(value, Callbacks)):
        raise ConfigError(
            f"config.callbacks({value!r:.100}): expected a subclass of cairn.Callbacks (the class "
            "itself, not an instance), a registered name or a 'package.module:QualName' reference.")
    return class_reference(value)


def make_callbacks(reference: str | None) -> Callbacks:
    """A new instance of the class ``reference`` names (resolved by cairn's one resolver: it
    must subclass :class:`Callbacks`), or the no-op :class:`Callbacks` for None."""
    if reference is None:
        return Callbacks()
    return resolve_class(reference, Callbacks)()
