"""A Keras policy's observation-to-action path as one Keras model of built-in layers and ops.

:func:`serving_model` wraps the policy's Keras network in a functional model that takes raw
observations, as every cairn export does (``docs/export.md``, *Inputs*), and returns the
export graph's outputs (``action`` first): the observation preprocessing (one-hot or flatten),
the ``MeanStdFilter`` with its current statistics as constants, the network, and the
deterministic action. It holds only Keras' own layers and ``keras.ops`` calls, so
``keras.saving.load_model("model.keras")`` reads it in safe mode without cairn (a user's
network must be serialisable the same way), on any Keras backend: TensorFlow serves it
(:mod:`cairn.export.keras_saved_model`), and Keras' ONNX export converts it.

Convolutions: cairn's CNN encoders convolve ``channels_first`` (NCHW), as torch does, but
TensorFlow's plain CPU kernels (a build or machine without oneDNN, or
``TF_ENABLE_ONEDNN_OPTS=0``) have no NCHW ``Conv2D``. For files that TensorFlow may serve
(``model.keras``, the SavedModel) :func:`channels_last_convolutions` therefore runs each chain
of ``channels_first`` ``Conv2D`` layers ``channels_last``: one ``Permute`` to NHWC before the
chain and one back to NCHW after it, so the ``Flatten`` and ``Dense`` that follow, and every
weight, keep their meaning (a Keras conv kernel is ``[kh, kw, in, out]`` in both formats).
The ONNX export keeps NCHW, the layout of ONNX's ``Conv`` and of torch.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import gymnasium as gym
import numpy as np

from cairn.errors import ExportError
from cairn.policy.action_mask_input import ACTION_MASK_INPUT
from cairn.policy.action_masking import (
    LOWEST_PLAIN_LEGAL_SCORE,
    MASKED_SCORE,
    MaskedActorCritic,
    MaskedQModel,
)
from cairn.policy.distributions import Categorical, DiagGaussian, MultiCategorical
from cairn.policy.filters import MeanStdFilter
from cairn.policy.keras_backend import builds_float32, import_keras

if TYPE_CHECKING:
    from cairn.policy.export_hook import ExportGraph
    from cairn.policy.policy import Policy

__all__ = ["channels_last_convolutions", "serving_model", "keras_network"]

_FLOAT32_MAX = float(np.finfo(np.float32).max)


def _unmasked_model(policy: Policy) -> Any:
    """``policy.model``, or the network inside it for a masked policy (which wraps it)."""
    model = policy.model
    return model.net if isinstance(model, (MaskedActorCritic, MaskedQModel)) else model


def keras_network(policy: Policy) -> Any:
    """The Keras model inside ``policy``'s network, or ExportError for a torch policy."""
    network = getattr(_unmasked_model(policy), "network", None)
    keras = import_keras("Keras export")
    if not isinstance(network, keras.Model):
        raise ExportError(
            f"{type(policy).__name__}'s model {type(policy.model).__name__} is not a Keras model; "
            "Keras files (model.keras, saved_model) are written for policies with "
            "model.framework='keras' only. Export torch policies with --format torch or onnx."
        )
    return network


def _observations(policy: Policy, keras: Any) -> tuple[Any, Any]:
    """``(obs input, processed float32 [batch, obs_size])``: ObservationPath in Keras ops (of
    the network's observation: without a masked policy's action mask)."""
    ops = keras.ops
    space = policy.network_observation_space
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
        x = ops.clip(ops.multiply(ops.subtract(x, mean.astype(np.float32)), inv_std.astype(np.float32)),
                     -clip, clip)
    return obs, x


def _bounds(values: np.ndarray) -> np.ndarray:
    # Infinite bounds as the largest float32: the same clip, and finite numbers in config.json.
    return np.clip(values.astype(np.float32), -_FLOAT32_MAX, _FLOAT32_MAX)


def _masked(scores: Any, mask: Any, keras: Any) -> Any:
    """``scores`` where ``mask`` > 0.5, MASKED_SCORE elsewhere, or ``-inf`` in a row
    with a legal score at or below LOWEST_PLAIN_LEGAL_SCORE (``mask_scores`` in Keras ops)."""
    if mask is None:
        return scores
    ops = keras.ops
    legal = ops.greater(mask, 0.5)
    lowest_legal = ops.min(ops.where(legal, scores, ops.full_like(scores, np.inf)), axis=-1, keepdims=True)
    fill = ops.where(ops.greater(lowest_legal, LOWEST_PLAIN_LEGAL_SCORE),
                     ops.full_like(lowest_legal, MASKED_SCORE),
                     ops.full_like(lowest_legal, -np.inf))
    return ops.where(legal, scores, fill)


def _legal_scores(scores: Any, mask: Any, keras: Any) -> Any:
    """``scores`` with illegal entries at ``-inf``, for the argmax only (the policy's
    ``legal_argmax``: a legal score below MASKED_SCORE still beats every illegal one)."""
    if mask is None:
        return scores
    ops = keras.ops
    return ops.where(ops.greater(mask, 0.5), scores, ops.full_like(scores, -np.inf))


def _actor_critic_outputs(policy: Policy, network: Any, x: Any, keras: Any, mask: Any) -> dict[str, Any]:
    ops = keras.ops
    inputs, value = network(x)
    inputs = _masked(inputs, mask, keras)
    scores = _legal_scores(inputs, mask, keras)
    outputs = {"value": ops.reshape(value, (-1,))}
    dist = policy.dist
    if isinstance(dist, Categorical):
        action = ops.cast(ops.argmax(scores, axis=-1), "int64")
        outputs.update(action=ops.add(action, dist.start) if dist.start else action, logits=inputs)
    elif isinstance(dist, MultiCategorical):
        bounds = np.cumsum([0, *dist.nvec])
        parts = [ops.cast(ops.argmax(scores[:, int(a):int(b)], axis=-1), "int64")
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


def _q_value_outputs(policy: Policy, network: Any, x: Any, keras: Any, mask: Any) -> dict[str, Any]:
    ops = keras.ops
    q_values = _masked(network(x), mask, keras)
    start = int(policy.action_space.start)  # type: ignore[attr-defined]
    action = ops.cast(ops.argmax(_legal_scores(q_values, mask, keras), axis=-1), "int64")
    return {"action": ops.add(action, start) if start else action, "q_values": q_values}


def _is_nchw_conv(layer: Any, keras: Any) -> bool:
    return type(layer) is keras.layers.Conv2D and layer.data_format == "channels_first"


def _has_nchw_convolutions(model: Any, keras: Any) -> bool:
    return any(_has_nchw_convolutions(layer, keras) if isinstance(layer, keras.Model)
               else _is_nchw_conv(layer, keras)
               for layer in model.layers)


def channels_last_convolutions(model: Any) -> Any:
    """``model`` (a functional ``keras.Model``, nested functional models included) with each
    built-in ``Conv2D`` that is ``channels_first`` replaced by a ``channels_last`` copy of it
    (same config and weights, at the time of the call) between ``Permute`` layers; every
    other layer is shared with ``model``. Consecutive convolutions stay NHWC between them.
    Outputs are unchanged; see the module docstring for why.

    A user's ``Conv2D`` subclass, pooling layers and layers inside ``Sequential`` or subclassed
    models are left as they are (Keras clones a ``Sequential`` without a ``call_function``).
    """
    keras = import_keras("Keras export")
    layers = keras.layers
    if not _has_nchw_convolutions(model, keras):
        return model  # an MLP: nothing to move, and the file stays as it was
    # id of an NCHW tensor made here -> (that tensor, the NHWC tensor it transposes). The
    # tensors are held so their ids stay theirs; a conv reading one reads its NHWC twin, and
    # the unused Permute drops out of the model (Keras keeps only what reaches the outputs).
    made: dict[int, tuple[Any, Any]] = {}
    # One NHWC copy per conv layer, so a conv called at several places stays one layer (and
    # its Permutes get distinct names: a model's layer names must be unique).
    copies: dict[int, tuple[Any, int]] = {}

    def call(layer: Any, *args: Any, **kwargs: Any) -> Any:
        if not _is_nchw_conv(layer, keras):
            return layer(*args, **kwargs)
        x, *rest = args
        conv, calls = copies.get(id(layer), (None, 0))
        suffix = f"_{calls}" if calls else ""
        twin = made.get(id(x))
        x_nhwc = (twin[1] if twin is not None
                  else layers.Permute((2, 3, 1), name=f"{layer.name}_to_nhwc{suffix}")(x))
        if conv is None:
            conv = layers.Conv2D.from_config({**layer.get_config(), "data_format": "channels_last"})
            conv.build(x_nhwc.shape)
            conv.set_weights(layer.get_weights())
        copies[id(layer)] = (conv, calls + 1)
        y_nhwc = conv(x_nhwc, *rest, **kwargs)
        y = layers.Permute((3, 1, 2), name=f"{layer.name}_to_nchw{suffix}")(y_nhwc)
        made[id(y)] = (y, y_nhwc)
        return y

    return keras.models.clone_model(model, clone_function=lambda layer: layer, call_function=call,
                                    recursive=True)


@builds_float32
def serving_model(policy: Policy, graph: ExportGraph, *, channels_last: bool) -> Any:
    """A ``keras.Model`` from raw observations to ``graph``'s outputs, in ``graph.outputs``
    order (the policy's export graph, :meth:`~cairn.Policy.export_graph`, with the optional
    outputs chosen), sharing the policy's Keras variables (save it to snapshot them). A network
    with ``keras_serving_outputs(processed_obs, dist)`` (Keras SAC: the squashed, rescaled
    action) builds its own outputs. ``channels_last``: run the convolutions NHWC
    (:func:`channels_last_convolutions`; their weights are then copies) for files TensorFlow
    may serve on any CPU; False keeps the network's NCHW, for ONNX. A masked policy's model
    takes ``[obs, action_mask]`` and masks the logits or Q-values as the policy does."""
    keras = import_keras("Keras export")
    network = keras_network(policy)
    obs, x = _observations(policy, keras)
    size = int(policy.action_mask_size)
    mask = keras.Input((size,), dtype="float32", name=ACTION_MASK_INPUT) if size else None
    names: Sequence[str] = [spec.name for spec in graph.outputs]
    own_outputs = getattr(policy.model, "keras_serving_outputs", None)
    if own_outputs is not None:  # a network that builds its own action path (Keras SAC's squashing)
        outputs = own_outputs(x, policy.dist)
    else:
        build = _q_value_outputs if "q_values" in names else _actor_critic_outputs
        outputs = build(policy, network, x, keras, mask)
    missing = [name for name in names if name not in outputs]
    if missing:
        raise ExportError(f"The Keras export of {type(policy).__name__} computes no {missing}.")
    inputs = obs if mask is None else [obs, mask]
    model = keras.Model(inputs, [outputs[name] for name in names], name="cairn_policy")
    return channels_last_convolutions(model) if channels_last else model
