"""Ray Tune: a ``ray.tune.Trainable`` class for any registered cairn algorithm.

>>> import cairn, cairn.tune                                           # doctest: +SKIP
>>> from ray import tune                                               # doctest: +SKIP
>>> tuner = tune.Tuner(cairn.tune.trainable(cairn.PPOConfig().environment("CartPole-v1")),
...                    param_space={"lr": tune.grid_search([1e-3, 3e-4])})  # doctest: +SKIP

Each Tune checkpoint is a cairn checkpoint (``Trainable.save_checkpoint`` writes one), so
``cairn.Algorithm.from_checkpoint(result.checkpoint)`` rebuilds the trial's algorithm. Ray is
imported when :func:`trainable` is called (the ``ray`` extra); docs/ray.md has the full example.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from cairn.callbacks.base import callbacks_reference
from cairn.config.algorithm_config import AlgorithmConfig
from cairn.config.checks import merge_setting, suggest
from cairn.errors import ConfigError

if TYPE_CHECKING:
    from cairn.core import AlgorithmLike

__all__ = ["trainable", "apply_param_space"]

#: Dict-valued fields outside the merged training settings that a nested param_space dict
#: merges into (Tune gives {"env_config": {"difficulty": grid_search(...)}} as a nested dict).
_SETS_ITS_KEYS = frozenset({"env_config"})
#: Fields that config.multi_agent() checks and normalises (a set of IDs becomes a sorted list).
_MULTI_AGENT = frozenset({"policies", "policies_to_train", "policy_mapping_fn"})


def _set_path(current: Mapping[str, Any], path: list[str], value: Any) -> dict[str, Any]:
    """A deep copy of ``current`` with ``value`` at the nested ``path`` (a non-dict on the way
    becomes a dict)."""
    out = copy.deepcopy(dict(current))
    node = out
    for part in path[:-1]:
        child = node.get(part)
        node[part] = copy.deepcopy(dict(child)) if isinstance(child, Mapping) else {}
        node = node[part]
    node[path[-1]] = copy.deepcopy(value)
    return out


def apply_param_space(config: AlgorithmConfig, params: Mapping[str, Any]) -> AlgorithmConfig:
    """A copy of ``config`` with ``params`` set by field name (``"lr"``), a dotted key going
    into a dict-valued field and setting that one key (``"model.hidden"``,
    ``"env_config.num_agents"``, ``"model.custom_model_config.width"``). A dict given for a
    dict-valued training setting (``{"model": {"hidden": [32]}}``, the form Tune gives a
    nested ``param_space``) is merged into the config's value as ``config.training()`` merges
    it, one level deep (the activation stays; a dict inside it, ``custom_model_config``,
    replaces the config's whole; a model class, given either way, becomes its reference); a
    dict for ``env_config`` sets the keys it names, likewise one level deep. Any
    other value replaces the field's (``policies`` names the whole set of policies);
    ``callbacks_class`` takes a class, as ``config.callbacks()`` does, and stores its reference;
    ``policies``, ``policies_to_train`` and ``policy_mapping_fn`` go through
    ``config.multi_agent()``.

    >>> import cairn
    >>> c = apply_param_space(cairn.PPOConfig(), {"lr": 1e-3, "model.hidden": [32]})
    >>> c.lr, c.model["hidden"]
    (0.001, [32])
    """
    out = config.copy()
    merged = out.merged_fields()
    for key, value in params.items():
        name, *path = str(key).split(".")
        if name not in out.FIELDS:
            raise ConfigError(f"param_space key {key!r} names no config field of "
                              f"{type(out).__name__}; fields: {sorted(out.FIELDS)}."
                              + suggest(name, out.FIELDS))
        if path:
            current = getattr(out, name)
            if not isinstance(current, Mapping):
                raise ConfigError(f"param_space key {key!r} goes into {name!r}, which is "
                                  f"{current!r}, not a dict; use the key {name!r}.")
            # The key at the path is set, the others stay: "model.custom_model_config.width"
            # keeps the other keys of custom_model_config (a dict at the path replaces the value
            # there, as {"model": {"custom_model_config": {...}}} does).
            value = _set_path(current, path, value)
        elif name in _SETS_ITS_KEYS and isinstance(value, Mapping):
            # {"env_config": {"difficulty": 2}} varies that key, as "env_config.difficulty" does.
            current = getattr(out, name)
            if isinstance(current, Mapping):
                value = merge_setting(copy.deepcopy(dict(current)), value)
        if name == "callbacks_class":  # a class, as config.callbacks() takes it, or its reference
            value = callbacks_reference(value)
        elif name in _MULTI_AGENT and not path:  # checked and normalised as multi_agent() does
            out.multi_agent(**{name: value})
            continue
        if name in merged and isinstance(value, Mapping):
            # Merged into the base value as training() merges it, so the other keys stay (Tune
            # resolves {"model": {"hidden": tune.grid_search(...)}} into a nested dict), and a
            # model class becomes its reference, as a checkpoint stores it.
            out.training(**{name: value})
            continue
        out.FIELDS[name].check(name, value)
        setattr(out, name, value)
    return out


def trainable(config: AlgorithmConfig) -> Any:
    """A ``ray.tune.Trainable`` subclass that trains ``config``'s algorithm, with Tune's
    ``param_space`` applied by :func:`apply_param_space` in each trial.

    ``step()`` is one ``Algorithm.train()`` (its results go to Tune as they are);
    ``save_checkpoint(dir)`` writes a cairn checkpoint into ``dir``; ``load_checkpoint``
    restores one in place (``tune.Tuner.restore``, schedulers that pause trials). Each trial
    asks Tune for 1 CPU for the learner plus 1 per remote env runner.
    """
    from ray import tune

    if not isinstance(config, AlgorithmConfig):
        raise ConfigError(f"cairn.tune.trainable needs an AlgorithmConfig, got {type(config).__name__}.")
    config.validate()
    base = config.copy()

    class CairnTrainable(tune.Trainable):  # type: ignore[misc]
        algo: AlgorithmLike

        @classmethod
        def default_resource_request(cls, trial_config: Mapping[str, Any]) -> Any:
            trial = apply_param_space(base, trial_config or {})
            learner = {"CPU": float(trial.num_cpus_per_learner)}
            if trial.num_gpus_per_learner:
                learner["GPU"] = float(trial.num_gpus_per_learner)
            # The driver (which learns itself with num_learners=0, on its GPU when it has one),
            # one CPU per env runner, and each DDP learner's CPUs and GPUs.
            driver = learner if not trial.num_learners else {"CPU": 1.0}
            bundles: list[dict[str, float]] = [driver, *({"CPU": 1.0} for _ in range(trial.num_env_runners)),
                                               *(dict(learner) for _ in range(trial.num_learners))]
            return tune.PlacementGroupFactory(bundles)

        def setup(self, trial_config: Mapping[str, Any]) -> None:
            self.algo = apply_param_space(base, trial_config or {}).build()

        def step(self) -> dict[str, Any]:
            return self.algo.train()

        def save_checkpoint(self, checkpoint_dir: str) -> None:
            self.algo.save(checkpoint_dir)

        def load_checkpoint(self, checkpoint: Any) -> None:
            self.algo.restore(checkpoint)

        def cleanup(self) -> None:
            self.algo.stop()

    CairnTrainable.__name__ = CairnTrainable.__qualname__ = f"{type(config).__name__}Trainable"
    return CairnTrainable
