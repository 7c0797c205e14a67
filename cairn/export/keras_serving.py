"""A Keras policy's observation-to-action path as one Keras model of built-in layers and ops.

:func:`serving_model` wraps the policy's Keras network in a functional model that takes raw
observations, as every cairn export does (``docs/export.md``, *Inputs*), and returns the
export graph's outputs (``action`` first): the observation preprocessing (one-hot or flatten),
the ``MeanStdFilter`` with its current statistics as constants, the network, and the
deterministic action. It holds only Keras' own layers and ``keras.ops`` calls, so
``keras.saving.load_model("model.keras")`` reads it in safe mode without cairn (a user's
network must be serialisable the same way), on any Keras backend: TensorFlow serves it
(:mod:`cairn.export.keras_saved_model`), and Keras' ONNX export converts it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import gymnasium as gym
import numpy as np

from cairn.errors import ExportError
from cairn.policy.distributions import Categorical, DiagGaussian, MultiCategorical
from cairn.policy.filters import MeanStdFilter
from cairn.policy.keras_backend import import_keras

if TYPE_CHECKING:
    from cairn.policy.export_hook import ExportGraph
    from cairn.policy.policy import Policy

__all__ = ["serving_model", "keras_network"]

_FLOAT32_MAX = float(np.finfo(np.float32).max)


def keras_network(policy: Policy) -> Any:
    """The Keras model inside ``policy``'s network, or ExportError for a torch policy."""
    network = getattr(policy.model, "network", None)
    keras = import_keras("Keras export")
    if not isinstance(network, keras.Model):
        raise ExportError(
            f"{type(policy).__name__}'s model {type(policy.model).__name__} is not a Keras model; "
            "Keras files (model.keras, saved_model) are written for policies with "
            "model.framework='keras' only. Export torch policies with --format torch or onnx."
        )
    return network


def _observations(policy: Policy, keras: Any) -> tuple[Any, Any]:
    """``(obs input, processed float32 [batch, obs_size])``: ObservationPath in Keras ops."""
    ops = keras.ops
    space = policy.observation_space
    size = int(policy.preprocessor.size)
    if isinstance(space, gym.spaces.Discrete):
        obs = keras.Input((), dtype="int64", name="obs")
        shifted = ops.subtract(obs, int(space.start)) if int(space.start) else obs
        # Comparing with arange one-hot encodes; values outside the space give all zeros.
        x = ops.cast(ops.equal(ops.expand_dims(shifted, -1), ops.arange(size, dtype="int64")), "float32")
    elif isinstance(space, (gym.spaces.Box, gym.spaces.MultiBinary)):
        shape = tuple(int(d) for d in space.shape)
        obs = keras.Input(shape, dtype="float32", name="obs")
        x = obs if shape == (size,) else ops.reshape(obs, (-1, size))
    else:
        obs = keras.Input((size,), dtype="float32", name="obs")
        x = obs
    obs_filter = policy.observation_filter
    if isinstance(obs_filter, MeanStdFilter):
        mean, inv_std = obs_filter.constants()  # the arrays MeanStdFilter.apply uses
        clip = float(obs_filter.clip)
        x = ops.clip(ops.multiply(ops.subtract(x, mean.astype(np.float32)), inv_std.astype(np.float32)), -clip, clip)
    return obs, x


def _bounds(values: np.ndarray) -> np.ndarray:
    # Infinite bounds as the largest float32: the same clip, and finite numbers in config.json.
    return np.clip(values.astype(np.float32), -_FLOAT32_MAX, _FLOAT32_MAX)


def _actor_critic_outputs(policy: Policy, network: Any, x: Any, keras: Any) -> dict[str, Any]:
    ops = keras.ops
    inputs, value = network(x)
    outputs = {"value": ops.reshape(value, (-1,))}
    dist = policy.dist
    if isinstance(dist, Categorical):
        action = ops.cast(ops.argmax(inputs, axis=-1), "int64")
        outputs.update(action=ops.add(action, dist.start) if dist.start else action, logits=inputs)
    elif isinstance(dist, MultiCategorical):
        bounds = np.cumsum([0, *dist.nvec])
        parts = [ops.cast(ops.argmax(inputs[:, int(a):int(b)], axis=-1), "int64")
                 for a, b in zip(bounds[:-1], bounds[1:], strict=True)]
        action = ops.add(ops.stack(parts, axis=1), dist.start)
        action = ops.cast(ops.reshape(action, (-1, *dist.shape)), np.dtype(dist.env_dtype).name)
        outputs.update(action=action, logits=inputs)
    elif isinstance(dist, DiagGaussian):
        mean, log_std = inputs[:, : dist.size], inputs[:, dist.size :]
        action = ops.minimum(ops.maximum(mean, _bounds(dist.low)), _bounds(dist.high))
        action = ops.reshape(action, (-1, *dist.shape)) if tuple(dist.shape) != (dist.size,) else action
        outputs.update(action=ops.cast(action, np.dtype(dist.env_dtype).name), mean=mean, log_std=log_std)
    else:
        raise ExportError(f"Keras export supports Categorical, MultiCategorical and DiagGaussian "
                          f"actions, not {type(dist).__name__}.")
    return outputs


def _q_value_outputs(policy: Policy, network: Any, x: Any, keras: Any) -> dict[str, Any]:
    ops = keras.ops
    q_values = network(x)
    start = int(policy.action_space.start)  # type: ignore[attr-defined]
    action = ops.cast(ops.argmax(q_values, axis=-1), "int64")
    return {"action": ops.add(action, start) if start else action, "q_values": q_values}


def serving_model(policy: Policy, graph: ExportGraph) -> Any:
    """A ``keras.Model`` from raw observations to ``graph``'s outputs, in ``graph.outputs``
    order (the policy's export graph, :meth:`~cairn.Policy.export_graph`, with the optional
    outputs chosen), sharing the policy's Keras variables (save it to snapshot them). A network
    with ``keras_serving_outputs(processed_obs, dist)`` (Keras SAC: the squashed, rescaled
    action) builds its own outputs."""
    keras = import_keras("Keras export")
    network = keras_network(policy)
    obs, x = _observations(policy, keras)
    names: Sequence[str] = [spec.name for spec in graph.outputs]
    own_outputs = getattr(policy.model, "keras_serving_outputs", None)
    if own_outputs is not None:  # a network that builds its own action path (Keras SAC's squashing)
        outputs = own_outputs(x, policy.dist)
    else:
        build = _q_value_outputs if "q_values" in names else _actor_critic_outputs
        outputs = build(policy, network, x, keras)
    missing = [name for name in names if name not in outputs]
    if missing:
        raise ExportError(f"The Keras export of {type(policy).__name__} computes no {missing}.")
    return keras.Model(obs, [outputs[name] for name in names], name="cairn_policy")
