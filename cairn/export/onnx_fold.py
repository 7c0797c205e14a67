"""Fold the observation filter into the first layers of an exported ONNX graph.

A MeanStdFilter policy's graph starts with ``clip((obs - mean) * inv_std, -c, c)`` (three
nodes: Sub, Mul, Clip) and feeds it to the first ``Gemm`` of each network. onnxruntime runs
every node at a fixed cost of about a microsecond for one observation, as much as a small
layer. The affine part of the filter can move into the weights of the Gemms that read it, and
the clip can be done in fewer nodes, in one of two forms:

* up to :data:`UNIT_CLIP_MAX_FEATURES` features, ``HardSigmoid(Gemm(obs))``: a diagonal Gemm
  maps ``obs`` to ``u = ((obs - mean) * inv_std - low) / (high - low)``, HardSigmoid with
  alpha 1 and beta 0 clips it to [0, 1], and the layer reads ``low + (high - low) * u``,
  folded as ``Gemm(W * (high - low), b + low * W @ 1)``. onnxruntime fuses the activation
  into its Gemm, so at run time the filter is one node;
* above it, where the diagonal matrix would cost more than a node, the clip in raw units:
  because ``inv_std > 0``, ``x = min(max(obs, mean + low / inv_std), mean + high / inv_std)``
  (Max, Min) and ``Gemm(W * inv_std, b - (W * inv_std) @ mean)(x)``.

The result differs from the unfolded graph by rounding only, and every export is then
checked against the policy as usual (:mod:`cairn.export.verify`).

The fold is applied only where it cannot lose precision: the folded bias subtracts
``(W * inv_std) @ mean`` from terms of the size of ``obs * inv_std``, which stay within
``|mean * inv_std| + c``; folding is skipped when ``|mean * inv_std|`` exceeds ``c`` for any
feature (an observation far from zero in its own standard deviations), so rounding grows by at
most a factor of two. Graphs without the pattern (no filter, one-hot inputs, a first layer that
is not a plain Gemm, an input read by more than the filter and Shape nodes) are left as they
are.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

__all__ = ["fold_observation_filter", "UNIT_CLIP_MAX_FEATURES"]

#: Up to this many observation features the clip is a diagonal Gemm and a HardSigmoid (one
#: fused node at run time); above it, the diagonal matrix costs more than a node, and the clip
#: stays Max and Min in raw units.
UNIT_CLIP_MAX_FEATURES = 64


def _consumers(graph: Any, name: str) -> list[Any]:
    return [node for node in graph.node if name in node.input]


def _attributes(node: Any) -> dict[str, Any]:
    from onnx import helper

    return {attr.name: helper.get_attribute_value(attr) for attr in node.attribute}


def _plain_gemm(node: Any, source: str, initializers: dict[str, np.ndarray]) -> bool:
    """A Gemm computing ``source @ W.T (+ b)`` with ``W`` (and ``b``) stored in the graph."""
    if node.op_type != "Gemm" or len(node.input) < 2 or node.input[0] != source:
        return False
    attrs = _attributes(node)
    if attrs.get("transA", 0) != 0 or attrs.get("transB", 0) != 1:
        return False
    if attrs.get("alpha", 1.0) != 1.0 or attrs.get("beta", 1.0) != 1.0:
        return False
    if node.input[1] not in initializers:
        return False
    return len(node.input) < 3 or not node.input[2] or node.input[2] in initializers


def fold_observation_filter(proto: Any) -> bool:
    """Fold ``Sub -> Mul -> Clip`` of the graph input into the Gemms that read it, in place.

    Returns True when the graph was changed (see the module docstring for when it is).
    """
    from onnx import numpy_helper

    graph = proto.graph
    if len(graph.input) != 1:
        return False
    initializers = {init.name: numpy_helper.to_array(init) for init in graph.initializer}
    obs = graph.input[0].name
    subs = [n for n in _consumers(graph, obs) if n.op_type == "Sub" and list(n.input[:1]) == [obs]]
    # Other readers of the raw input may only ask its shape (a Box policy's graph does, to
    # expand its log-std to the batch): the input itself stays as it is.
    others = [n for n in _consumers(graph, obs) if n not in subs]
    if len(subs) != 1 or any(n.op_type != "Shape" for n in others) or subs[0].input[1] not in initializers:
        return False
    sub = subs[0]
    muls = _consumers(graph, sub.output[0])
    if len(muls) != 1 or muls[0].op_type != "Mul" or muls[0].input[1] not in initializers:
        return False
    mul = muls[0]
    clips = _consumers(graph, mul.output[0])
    if len(clips) != 1 or clips[0].op_type != "Clip" or len(clips[0].input) != 3:
        return False
    clip = clips[0]
    if not all(name in initializers for name in clip.input[1:]):
        return False
    mean = initializers[sub.input[1]].astype(np.float64)
    inv_std = initializers[mul.input[1]].astype(np.float64)
    low, high = (float(initializers[name]) for name in clip.input[1:])
    if mean.ndim != 1 or inv_std.shape != mean.shape or not np.all(inv_std > 0) or not low < 0 < high:
        return False
    if np.max(np.abs(mean * inv_std)) > min(-low, high):
        return False
    gemms = _consumers(graph, clip.output[0])
    if not gemms or not all(_plain_gemm(node, clip.output[0], initializers) for node in gemms):
        return False
    if any(initializers[node.input[1]].shape[-1:] != mean.shape for node in gemms):
        return False

    if mean.shape[0] <= UNIT_CLIP_MAX_FEATURES:
        nodes, new_inits, source, affine = _unit_clip(obs, mean, inv_std, low, high)
    else:
        nodes, new_inits, source, affine = _raw_clip(obs, mean, inv_std, low, high)
    for node in gemms:
        weight, bias = affine(initializers[node.input[1]].astype(np.float64),
                              initializers[node.input[2]].astype(np.float64)
                              if len(node.input) > 2 and node.input[2] else 0.0)
        stem = node.input[1].removesuffix(".weight")
        names = (f"{stem}.weight.filter_folded", f"{stem}.bias.filter_folded")
        new_inits += [numpy_helper.from_array(weight.astype(np.float32), names[0]),
                      numpy_helper.from_array(np.asarray(bias, np.float32), names[1])]
        del node.input[:]
        node.input.extend([source, *names])

    removed = {sub.output[0], mul.output[0], clip.output[0]}
    kept = [node for node in graph.node if not set(node.output) & removed]
    del graph.node[:]
    graph.node.extend([*nodes, *kept])
    used = {name for node in graph.node for name in node.input}
    inits = [init for init in graph.initializer if init.name in used]
    del graph.initializer[:]
    graph.initializer.extend([*inits, *new_inits])
    return True


Affine = Callable[[np.ndarray, Any], tuple[np.ndarray, Any]]


def _raw_clip(obs: str, mean: np.ndarray, inv_std: np.ndarray, low: float, high: float,
              ) -> tuple[list[Any], list[Any], str, Affine]:
    """``Max``/``Min`` against the clip bounds in raw units; the layer then reads
    ``(x - mean) * inv_std``, folded as ``W * inv_std`` and ``b - (W * inv_std) @ mean``."""
    from onnx import helper, numpy_helper

    low_name, high_name, clipped = "observations.clip_low", "observations.clip_high", "observations.clipped"
    inits = [numpy_helper.from_array((mean + low / inv_std).astype(np.float32), low_name),
             numpy_helper.from_array((mean + high / inv_std).astype(np.float32), high_name)]
    nodes = [
        helper.make_node("Max", [obs, low_name], ["observations.clipped_below"], name="filter_clip_low"),
        helper.make_node("Min", ["observations.clipped_below", high_name], [clipped], name="filter_clip_high"),
    ]

    def affine(weight: np.ndarray, bias: Any) -> tuple[np.ndarray, Any]:
        weight = weight * inv_std[None, :]
        return weight, bias - weight @ mean

    return nodes, inits, clipped, affine


def _unit_clip(obs: str, mean: np.ndarray, inv_std: np.ndarray, low: float, high: float,
               ) -> tuple[list[Any], list[Any], str, Affine]:
    """The normalisation and clip as ``HardSigmoid(Gemm(obs))``, a value in [0, 1].

    ``u = ((obs - mean) * inv_std - low) / (high - low)`` is an affine map (a diagonal Gemm),
    and ``HardSigmoid(u)`` with alpha 1, beta 0 is ``clip(u, 0, 1)``, so the clipped
    normalised observation is ``low + (high - low) * HardSigmoid(u)``; that last affine step
    folds into the layer, as ``W * (high - low)`` and ``b + low * W @ 1``. onnxruntime fuses
    the activation into its Gemm: one node at run time, where the raw-unit clip takes two.
    """
    from onnx import helper, numpy_helper

    span = high - low
    scale, shift = "observations.unit_scale", "observations.unit_shift"
    scaled, clipped = "observations.unit_scaled", "observations.unit_clipped"
    inits = [numpy_helper.from_array(np.diag(inv_std / span).astype(np.float32), scale),
             numpy_helper.from_array(((-mean * inv_std - low) / span).astype(np.float32), shift)]
    nodes = [
        helper.make_node("Gemm", [obs, scale, shift], [scaled], name="filter_unit_scale", transB=1),
        helper.make_node("HardSigmoid", [scaled], [clipped], name="filter_unit_clip", alpha=1.0, beta=0.0),
    ]

    def affine(weight: np.ndarray, bias: Any) -> tuple[np.ndarray, Any]:
        return weight * span, bias + low * weight.sum(axis=1)

    return nodes, inits, clipped, affine
