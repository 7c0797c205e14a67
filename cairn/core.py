"""The system on one page: what each part of cairn promises the others.

Read this first. cairn has three kinds of live objects and one kind of data:

* a **Policy** maps observations to actions and owns everything needed to keep learning (its
  network, optimizer, observation filter, random generators and counters);
* an **EnvRunner** owns environments and a view of the policies, and turns them into
  experience, keyed by policy ID;
* an **Algorithm** owns the config, the policies and the env runners, and runs the training
  step;
* a **state tree** is what each of them is, as data: dicts with ``str`` keys, lists, JSON
  scalars and numpy arrays, nothing else (no classes, no callables, no tensors). The checkpoint
  layer turns trees into files and back, and knows no class above it.

Every stateful object implements :class:`Stateful`. Classes are named in trees by a registry
name or ``"module:QualName"`` (the component registry below), and a named class must subclass
the expected base before it is used, so that reading a checkpoint never runs code it names.

The layers, and which may import which, are drawn in ``docs/architecture.md`` and enforced by
the import-linter contract in ``pyproject.toml``. Modules talk through the public methods
listed here; none calls another module's underscore names.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np

from cairn.registry import class_reference, register_class, resolve_class

__all__ = [
    "StateTree",
    "Stateful",
    "PolicyLike",
    "EnvRunnerLike",
    "AlgorithmLike",
    "Checkpointable",
    "ScriptedOpponent",
    "register_class",
    "class_reference",
    "resolve_class",
]

#: A state tree: JSON values and numpy arrays, nested in dicts (str keys) and lists.
StateTree = dict[str, Any]

@runtime_checkable
class Stateful(Protocol):
    """The state protocol.

    ``get_state(copy=False)`` may return views of live arrays, for a caller that writes them at
    once (the checkpoint writer); ``copy=True`` (the default) returns a snapshot that later
    training does not change. ``set_state`` restores such a tree in place, checking that it fits
    (a policy knows what a policy state must hold); ``from_state`` builds a new object from a
    tree alone.
    """

    def get_state(self, *, copy: bool = True) -> StateTree:
        """This object as a state tree."""
        ...

    def set_state(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`get_state` output in place."""
        ...


@runtime_checkable
class PolicyLike(Stateful, Protocol):
    """What a policy promises: acting on raw observations, its weights, and its own checkpoint.

    Actions come back ready for the environment (in the action space). A policy validates
    observations at this boundary and raises ``ObservationSpaceError`` naming the space.
    """

    observation_space: Any
    action_space: Any

    def compute_actions(self, obs_batch: Sequence[Any] | np.ndarray, *, explore: bool = True) -> np.ndarray:
        """Actions for a batch of raw observations."""
        ...

    def compute_single_action(self, obs: Any, *, explore: bool = True) -> Any:
        """The action for one raw observation."""
        ...

    def get_weights(self) -> dict[str, np.ndarray]:
        """A copy of the network's parameters and buffers."""
        ...

    def set_weights(self, weights: Mapping[str, np.ndarray]) -> None:
        """Load parameters from :meth:`get_weights` (names and shapes must match)."""
        ...


@runtime_checkable
class ScriptedOpponent(Protocol):
    """A fixed player of a two-player game, written by hand (``cairn.league``, docs/league.md).

    Called once per move with the observation of the player it plays (a dict observation's
    ``"observation"`` entry), the action mask (1 = legal; None when the env gives none and the
    action space is not Discrete) and a random generator seeded per game; returns an action of
    the action space (for ``Discrete(n, start=s)``, mask entry ``k`` is action ``s + k``). A
    function with this signature qualifies, and so does a class whose instances are such
    callables (built with no arguments when named by ``"module:Class"``).
    """

    def __call__(self, observation: np.ndarray, action_mask: np.ndarray | None,
                 rng: np.random.Generator) -> Any:
        """The action to play."""
        ...


@runtime_checkable
class EnvRunnerLike(Stateful, Protocol):
    """What an env runner promises: experience per policy ID, and following policy changes.

    A runner never reaches into the learner; the learner hands it weights (``set_weights``)
    and policy changes (``update_policies``) through these methods.
    """

    def sample(self, num_steps: int | None = None, *, explore: bool = True) -> Mapping[str, Any]:
        """Step the environments and return ``{policy_id: SampleBatch}``."""
        ...

    def get_metrics(self) -> list[dict[str, Any]]:
        """The episodes completed since the last call."""
        ...

    def set_weights(self, weights: Mapping[str, Mapping[str, Any]]) -> None:
        """Load policy weights (and observation-filter states) sent by the learner."""
        ...

    def update_policies(self, config: Any, policies: Mapping[str, Any]) -> None:
        """Follow an added or removed policy and a new agent -> policy mapping."""
        ...

    def stop(self) -> None:
        """Close the environments."""
        ...


@runtime_checkable
class AlgorithmLike(Stateful, Protocol):
    """What an algorithm promises: training iterations, its policies, and checkpoints."""

    def train(self) -> dict[str, Any]:
        """One training iteration; its result dict."""
        ...

    def get_policy(self, policy_id: str = ...) -> PolicyLike:
        """The policy with this ID."""
        ...

    def save(self, path: Any = None, *, blocking: bool = True,
             storage_options: Mapping[str, Any] | None = None, previous: Any = None,
             metadata: Mapping[str, Any] | None = None) -> Any:
        """Write a checkpoint atomically and return its location (``blocking=False``: a
        ``concurrent.futures.Future`` of it, written in the background); ``metadata`` (JSON
        data) is stored in its manifest."""
        ...

    def restore(self, checkpoint: Any, *, storage_options: Mapping[str, Any] | None = None) -> None:
        """Load a checkpoint of this algorithm into it, in place."""
        ...

    def stop(self) -> None:
        """Release environments and remote runners."""
        ...


@runtime_checkable
class Checkpointable(Protocol):
    """What a ``CheckpointManager`` saves (an Algorithm): an iteration that names the
    checkpoint, and a ``save`` that returns the location, or a Future of it with
    ``blocking=False``; ``previous`` names an earlier checkpoint whose unchanged files the
    save may link instead of rewriting."""

    iteration: int

    def save(self, path: Any = None, *, blocking: bool = True,
             storage_options: Mapping[str, Any] | None = None, previous: Any = None,
             metadata: Mapping[str, Any] | None = None) -> Any:
        """Write a checkpoint at ``path`` (with ``metadata`` in its manifest; the manager passes
        it only when given); see :meth:`AlgorithmLike.save`."""
        ...
