"""Building a user's own network (``model={"custom_model": ...}``, :mod:`cairn.models`).

The ``model`` config keeps references, never classes: :func:`model_references` turns a class
given in a config into the name it is registered under or its ``"module:QualName"``
(:func:`cairn.registry.model_class_reference`), so that configs and checkpoints stay JSON.
:func:`build_custom_model` resolves the reference with cairn's one resolver (the class must
subclass the base class of its role) and builds it with torch's generator seeded from the
policy's own, so that a seeded policy always starts from the same weights; a user's Keras
builder runs under the same seeding (:func:`seeded_build`).
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any, TypeVar

import gymnasium as gym
import torch

from cairn.errors import ConfigError
from cairn.models import ModelBase
from cairn.registry import callable_reference, model_class_reference, resolve_model_class

__all__ = ["CUSTOM_MODEL_KEYS", "MODEL_CLASS_KEYS", "check_custom_model_settings", "model_references",
           "uses_custom_model", "build_custom_model", "has_reset_parameters", "refuse_lazy_tensors",
           "refuse_unbuilt_model_classes", "refuse_unmet_mask_requests", "reset_users_parameters",
           "seeded_build"]

#: Optional ``model`` keys for a user's network (no default: absent means the built-in one).
CUSTOM_MODEL_KEYS = ("custom_model", "custom_model_config", "custom_q_model")
#: The keys that name a model class (SAC's critic is ``custom_q_model``).
MODEL_CLASS_KEYS = ("custom_model", "custom_q_model")

M = TypeVar("M", bound=ModelBase)


def check_custom_model_settings(model: Mapping[str, Any]) -> None:
    """ConfigError for a ``custom_model``/``custom_q_model`` that is not a class, a registered
    name or a reference, or a ``custom_model_config`` that is not a JSON object."""
    for key in MODEL_CLASS_KEYS:
        value = model.get(key)
        if value is not None and not isinstance(value, (str, type)):
            raise ConfigError(
                f"Config 'model.{key}'={value!r:.100} must be a model class (a subclass of a "
                "cairn.models base class), a name given to cairn.models.register_model, or a "
                "'package.module:QualName' reference.")
    config = model.get("custom_model_config")
    if config is None:
        return
    try:
        ok = isinstance(config, Mapping) and json.loads(json.dumps(config)) == config
    except (TypeError, ValueError):
        ok = False
    if not ok:
        raise ConfigError(
            f"Config 'model.custom_model_config'={config!r:.100} must be a dict of JSON values "
            "(str keys; numbers, strings, bools, None, lists and dicts): it is stored in checkpoints.")


def model_references(model: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of a ``model`` config with model classes replaced by their references and a
    ``keras_model`` function by its ``"module:function"`` (the JSON form checkpoints store)."""
    out = dict(model)
    for key in MODEL_CLASS_KEYS:
        if isinstance(out.get(key), type):
            out[key] = model_class_reference(out[key], what=f"model.{key}")
    keras_model = out.get("keras_model")
    if callable(keras_model):
        reference = callable_reference(keras_model)
        if reference is None:
            raise ConfigError(
                f"Config 'model.keras_model'={keras_model!r:.100} has no import path a checkpoint "
                "could store: define the builder at the top level of an importable module "
                "(not in __main__, a lambda or a closure) or pass 'package.module:builder'.")
        out["keras_model"] = reference
    return out


def refuse_unbuilt_model_classes(model: Mapping[str, Any], built: tuple[str, ...], policy_class: str) -> None:
    """ConfigError when ``model`` names a class under a key of :data:`MODEL_CLASS_KEYS` that
    ``policy_class`` does not build (``built``: its own keys): a ``custom_q_model`` given to DQN,
    PPO, IMPALA or APPO was ignored, and the built-in network trained in its place while the
    config and every checkpoint named the user's class."""
    for key in MODEL_CLASS_KEYS:
        if key not in built and uses_custom_model(model, key):
            raise ConfigError(
                f"Config 'model.{key}'={model[key]!r:.100} is not used by {policy_class}: only SAC's and "
                "TD3's critics are built from it (a cairn.models.SACCriticModel). This policy's network of "
                "your own is model.custom_model (DQN: a cairn.models.QModel; PPO, IMPALA, APPO: an "
                f"ActorCriticModel, whose forward returns the value too). Remove model.{key}.")


def refuse_unmet_mask_requests(model: torch.nn.Module, policy_class: str) -> None:
    """ConfigError when a user's network in ``model`` (a policy's, whose observations carry no
    action mask) sets ``receives_action_mask = True``: nothing could pass it the mask, and the
    first call failed with torch's bare TypeError about ``forward``'s arguments."""
    for module in model.modules():
        if isinstance(module, ModelBase) and module.receives_action_mask:
            raise ConfigError(
                f"{type(module).__qualname__} sets receives_action_mask = True, but the observations of "
                f"this {policy_class} carry no action mask: a mask is read from a Dict observation's "
                "'action_mask' key, with Discrete or MultiDiscrete actions (docs/models.md, \"Action "
                "masking\"). Fix: add the mask to the observation space, or drop receives_action_mask.")


def uses_custom_model(model: Mapping[str, Any] | None, key: str = "custom_model") -> bool:
    """Whether a (merged) ``model`` config names a user's network for ``key``."""
    return model is not None and model.get(key) is not None


def build_custom_model(model: Mapping[str, Any], base: type[M], *, observation_space: gym.Space[Any],
                       action_space: gym.Space[Any], num_outputs: int, generator: torch.Generator,
                       key: str = "custom_model") -> M:
    """``cls(observation_space, action_space, num_outputs, custom_model_config)`` for the class
    ``model[key]`` names, which must subclass ``base``; built with torch's global generator
    seeded from ``generator`` (and restored afterwards)."""
    model_class = resolve_model_class(model[key], base, what=f"model.{key}")
    with seeded_build(generator):
        try:
            net = model_class(observation_space, action_space, num_outputs,
                              dict(model.get("custom_model_config") or {}))
        except TypeError as exc:
            raise ConfigError(
                f"Could not build model.{key}={model[key]!r}: {exc}. Its constructor must take "
                "(observation_space, action_space, num_outputs, model_config), as "
                f"{base.__module__}.{base.__qualname__}'s does.") from exc
    refuse_lazy_tensors(net, key)
    return net


def has_reset_parameters(net: torch.nn.Module) -> bool:
    """Whether a user's network initialises itself in ``reset_parameters(generator)``."""
    return callable(getattr(net, "reset_parameters", None))


def reset_users_parameters(net: torch.nn.Module, generator: torch.Generator) -> None:
    """``net.reset_parameters(generator)`` where a user's network defines it (docs/models.md,
    "Weights"): cairn calls it with the policy's generator when the policy is made; a network
    without one keeps what its seeded constructor gave it."""
    if has_reset_parameters(net):
        net.reset_parameters(generator)  # type: ignore[operator]


def refuse_lazy_tensors(net: torch.nn.Module, key: str) -> None:
    """ConfigError when a user's network still has uninitialized parameters or buffers once built
    (``nn.LazyLinear``, ``nn.LazyBatchNorm1d``, ...): their first forward would draw their initial
    values from torch's unseeded global generator (cairn's first forward is the output check, after
    the seeded constructor), so two runs with the same seed started from other weights, and a
    checkpoint of such a policy could not be restored (torch loads no state into an
    uninitialized parameter)."""
    lazy = [name for name, tensor in (*net.named_parameters(), *net.named_buffers())
            if isinstance(tensor, (torch.nn.UninitializedParameter, torch.nn.UninitializedBuffer))]
    if lazy:
        raise ConfigError(
            f"Config 'model.{key}'={type(net).__qualname__} has parameters or buffers that are created on "
            f"its first forward (lazy modules), {lazy[:4]}: they would be initialised unseeded, and a "
            "checkpoint of it could not be restored. Fix: give their input sizes in the constructor "
            "(self.obs_size is the observation's flattened size), e.g. nn.Linear(self.obs_size, 64) for "
            "nn.LazyLinear(64).")


@contextmanager
def seeded_build(generator: torch.Generator) -> Iterator[int]:
    """Build a user's network in the block with torch's global generator (the CPU's) and Python's
    ``random`` seeded by one draw of the policy's ``generator``, both handed back as they were
    afterwards, also when the block raises: a torch model's initialisation draws from the first,
    and a Keras model's unseeded initializers and random layers (``GaussianNoise``, whose
    generator state is a variable saved with the weights) take their seeds from the second
    (``keras.random.make_default_seed``), so a seeded policy always starts from the same weights
    and draws the same noise. The block gets the drawn seed (a Keras builder seeds Keras' global
    generator from it too: :func:`cairn.policy.keras_user_model.build_user_keras_model`)."""
    seed = int(torch.randint(0, 2**62, (1,), generator=generator, device="cpu"))
    python_state = random.getstate()
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        random.seed(seed)
        try:
            yield seed
        finally:
            random.setstate(python_state)
