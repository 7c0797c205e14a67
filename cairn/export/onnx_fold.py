"""Fold the observation filter into the first layers of an exported ONNX graph.

A MeanStdFilter policy's graph starts with ``clip((obs - mean) * inv_std, -c, c)`` (three
nodes: Sub, Mul, Clip) and feeds it to the first ``Gemm`` of each network. onnxruntime runs
every node at a fixed cost of about a microsecond for one observation, as much as a small
layer. Because ``inv_std > 0``, the same function is

    x = min(max(obs, mean - c / inv_std), mean + c / inv_std)      # clip in raw units
    Gemm(W, b) applied to (x - mean) * inv_std  ==  Gemm(W * inv_std, b - (W * inv_std) @ mean)(x)

so the three nodes become two (Max, Min) and the affine part moves into the weights of the
Gemms that read it. The result differs from the unfolded graph by rounding only, and every
export is then checked against the policy as usual (:mod:`cairn.export.verify`).

The fold is applied only where it cannot lose precision: the folded bias subtracts
``(W * inv_std) @ mean`` from terms of the size of ``obs * inv_std``, which stay within
``|mean * inv_std| + c``; folding is skipped when ``|mean * inv_std|`` exceeds ``c`` for any
feature (an observation far from zero in its own standard deviations), so rounding grows by at
most a factor of two. Graphs without the pattern (no filter, one-hot inputs, a first layer that
is not a plain Gemm, an input read by more than the filter and Shape nodes) are left as they
are.

Not used: computing the normalisation and clip as ``HardSigmoid(Gemm_diagonal(obs))``, which
onnxruntime fuses into one node at run time (one fewer than Max and Min), maps
``[-c, c]`` onto ``[0, 1]``; near the middle of that interval float32 keeps only ``2c * 2**-24``
(about 1e-6 for c = 10) of the normalised value, and a SAC actor exported that way missed the
1e-5 parity bound (1.9e-5).
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["fold_observation_filter"]


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
    from onnx import helper, numpy_helper

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

    # Names say what a value is: the raw-unit clip bounds, and each folded weight and bias
    # after the weight it replaces (e.g. model.actor.0.weight.filter_folded).
    low_name, high_name, clipped = "observations.clip_low", "observations.clip_high", "observations.clipped"
    new_inits = [
        numpy_helper.from_array((mean + low / inv_std).astype(np.float32), low_name),
        numpy_helper.from_array((mean + high / inv_std).astype(np.float32), high_name),
    ]
    nodes = [
        helper.make_node("Max", [obs, low_name], ["observations.clipped_below"], name="filter_clip_low"),
        helper.make_node("Min", ["observations.clipped_below", high_name], [clipped], name="filter_clip_high"),
    ]
    for node in gemms:
        weight = initializers[node.input[1]].astype(np.float64) * inv_std[None, :]
        bias = initializers[node.input[2]].astype(np.float64) if len(node.input) > 2 and node.input[2] else 0.0
        bias = bias - weight @ mean
        stem = node.input[1].removesuffix(".weight")
        names = (f"{stem}.weight.filter_folded", f"{stem}.bias.filter_folded")
        new_inits += [numpy_helper.from_array(weight.astype(np.float32), names[0]),
                      numpy_helper.from_array(np.asarray(bias, np.float32), names[1])]
        del node.input[:]
        node.input.extend([clipped, *names])

    removed = {sub.output[0], mul.output[0], clip.output[0]}
    kept = [node for node in graph.node if not set(node.output) & removed]
    del graph.node[:]
    graph.node.extend([*nodes, *kept])
    used = {name for node in graph.node for name in node.input}
    inits = [init for init in graph.initializer if init.name in used]
    del graph.initializer[:]
    graph.initializer.extend([*inits, *new_inits])
    return True
