"""Users' Keras models and the Keras variables cairn's torch modules hold.

A user names a builder in ``model["keras_model"]`` (``"package.module:builder"``, resolved by
cairn's one resolver, called as ``builder(obs_size, num_outputs, model_config)``);
:func:`build_user_keras_model` checks that what it returns is a ``keras.Model`` cairn can feed
(one float input ``[batch, obs_size]``, the expected outputs) and that no live cairn network
already holds its variables. :func:`register_keras_variables` attaches a Keras model to the
torch module that trains it (cairn's networks and users' alike) and records which module holds
each variable, which is what that last check reads.
"""

from __future__ import annotations

import contextlib
import gc
import weakref
from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from cairn._compat.keras_internals import seeded_global_seed_generator
from cairn.errors import ConfigError
from cairn.policy.custom_model import seeded_build
from cairn.policy.keras_backend import import_keras
from cairn.registry import resolve_callable
from cairn.rng import Stream, seed_sequence

__all__ = ["build_user_keras_model", "load_keras_builder", "register_keras_variables"]


def load_keras_builder(reference: str) -> Any:
    """The function ``"package.module:builder"`` names, through cairn's one resolver
    (:func:`cairn.registry.resolve_callable`): a plain function defined in that module, never
    the standard library; anything else is :class:`~cairn.errors.UnsafeCheckpointError`
    before it is called (a checkpoint's ``model.keras_model`` is untrusted data)."""
    return resolve_callable(reference, what="model.keras_model")


def build_user_keras_model(reference: str, obs_size: int, num_outputs: int,
                           model_config: Mapping[str, Any], *, outputs: int, expected: str,
                           generator: torch.Generator | None = None) -> Any:
    """The ``keras.Model`` the user's builder ``reference`` returns for
    ``builder(obs_size, num_outputs, model_config)``; ConfigError unless it is one with
    ``outputs`` outputs (``expected`` describes them in the message). With ``generator`` (the
    policy's) the builder runs under :func:`~cairn.policy.custom_model.seeded_build`: Keras seeds
    unseeded initializers and random layers from Python's ``random``, so a seeded policy starts
    from the same weights and noise streams, as a torch model of the user's does; and with Keras'
    global ``SeedGenerator`` (``keras.random.*`` without a seed) seeded from the same draw
    (:data:`~cairn.rng.Stream.KERAS_BUILD`), the process's handed back unmoved afterwards."""
    builder = load_keras_builder(reference)  # refused before Keras (seconds) is imported
    keras = import_keras(f"model.keras_model={reference!r}")  # first: importing draws from `random`
    with contextlib.ExitStack() as seeded:
        if generator is not None:
            seed = seeded.enter_context(seeded_build(generator))
            keras_seed = int(seed_sequence(seed, Stream.KERAS_BUILD).generate_state(1)[0]) >> 1  # int32
            seeded.enter_context(seeded_global_seed_generator(keras_seed))
        network = builder(obs_size, num_outputs, dict(model_config))
    # A subclassed model, or a Sequential without an Input, has no graph (no inputs/outputs) yet.
    graph_outputs = getattr(network, "outputs", None) if isinstance(network, keras.Model) else None
    if graph_outputs is not None and len(graph_outputs) != outputs:
        graph_outputs = None
    if graph_outputs is None:
        built = ("; a subclassed keras.Model or a Sequential without keras.Input has no inputs and outputs "
                 "cairn can check: build it as a functional model, keras.Model(keras.Input((obs_size,)), "
                 "outputs), or a Sequential starting with keras.Input((obs_size,))"
                 if isinstance(network, keras.Model) and not hasattr(network, "outputs") else "")
        raise ConfigError(
            f"Config 'model.keras_model'={reference!r} returned {type(network).__name__}; expected a "
            f"keras.Model with {expected}, for inputs of shape [batch, {obs_size}]{built}."
        )
    _check_user_keras_inputs(network, reference, obs_size)
    _refuse_registered_variables(network, reference)
    return network


#: The cairn network whose ``variables`` holds each Keras variable's tensor, by the tensor's id
#: (the network holds the tensor, so the id is not reused while the network lives).
_HOLDERS: weakref.WeakValueDictionary[int, nn.Module] = weakref.WeakValueDictionary()


def _holder(tensor: torch.Tensor) -> nn.Module | None:
    holder = _HOLDERS.get(id(tensor))
    held = holder is not None and any(t is tensor for t in holder.parameters())
    return holder if held else None


def _refuse_registered_variables(network: Any, reference: str) -> None:
    """ConfigError when a variable of the user's model is already a live cairn network's (a
    builder that returns a model, or layers, it built before): two policies would then train,
    save and load the same tensors, and restoring one policy would overwrite the other."""
    for variable in network.variables:
        if _holder(variable.value) is not None:
            gc.collect()  # a dropped policy in a reference cycle holds nothing any more
            if _holder(variable.value) is not None:
                raise ConfigError(
                    f"Config 'model.keras_model'={reference!r} returned a Keras model whose variable "
                    f"{variable.path!r} another cairn network already holds (the builder returned a model, "
                    "or layers, that it had built before): two policies would train, save and restore the "
                    "same weights, and loading one would overwrite the other. Fix: build new layers and a "
                    "new keras.Model on every call (no cache, no module-level layers); agents meant to "
                    "share weights map to one policy.")


def _check_user_keras_inputs(network: Any, reference: str, obs_size: int) -> None:
    """ConfigError unless the user's model takes what cairn feeds it: one float tensor
    ``[batch, obs_size]``. Keras would cast float observations to an integer ``Input``
    without a word (0.7 -> 0), and reports other mismatches in its own terms."""
    inputs = list(network.inputs)
    fix = (f"Fix: take one input, keras.Input(({obs_size},)) (float32), and split or reshape it inside "
           "the model (Dict/Tuple observations arrive flattened, images as flat raw values).")
    if len(inputs) != 1:
        raise ConfigError(
            f"Config 'model.keras_model'={reference!r} returned a model of {len(inputs)} inputs "
            f"{[tuple(i.shape) for i in inputs]}; cairn calls it on one tensor, the processed "
            f"observations [batch, {obs_size}]. {fix}")
    shape, dtype = tuple(inputs[0].shape), str(inputs[0].dtype)
    if len(shape) != 2 or shape[1] not in (None, obs_size):
        raise ConfigError(
            f"Config 'model.keras_model'={reference!r} returned a model whose input has shape {shape}; "
            f"cairn feeds the processed observations, shape [batch, {obs_size}]. {fix}")
    if not dtype.startswith(("float", "bfloat")):
        raise ConfigError(
            f"Config 'model.keras_model'={reference!r} returned a model whose input has dtype {dtype!r}; "
            f"cairn feeds float32 observations, which Keras would cast to {dtype} (0.7 -> 0). {fix}")


def register_keras_variables(module: nn.Module, network: Any, *, by_layer: bool) -> None:
    """Attach the Keras model ``network`` to ``module`` as ``network`` and register its variables'
    tensors as the ParameterDict ``variables`` (their names, in the model's order, as
    ``variable_names``). The Keras model is not a submodule: its own parameter names follow
    Keras' layer names, which for unnamed layers count up per process ("dense_3"), so a restore
    would not find them. The variables are registered instead under the layer names cairn gave
    them (``by_layer``, cairn's networks: ``<layer>_<variable>``) or by position (a user's model:
    ``variable_<i>``). Each tensor's holder is recorded, for :func:`build_user_keras_model` to refuse
    a model whose variables a live network already holds."""
    object.__setattr__(module, "network", network)
    variables = list(network.variables)
    names = ([v.path.replace("/", "_") for v in variables] if by_layer
             else [f"variable_{i}" for i in range(len(variables))])
    object.__setattr__(module, "variable_names", names)  # plain data, nothing torch tracks
    module.variables = nn.ParameterDict({name: v.value for name, v in zip(names, variables, strict=True)})
    for variable in variables:
        _HOLDERS[id(variable.value)] = module
