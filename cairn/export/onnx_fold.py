"""Compute the observation filter of an exported ONNX graph in two nodes instead of three.

A MeanStdFilter policy's graph starts with ``clip((obs - mean) * inv_std, -c, c)``: three nodes
(Sub, Mul, Clip). For one observation onnxruntime pays a fixed cost per call (about 6 µs from
Python here) and 0.2-0.5 µs per node on top, so a node is a few percent of a small policy's
latency. Sub and Mul become one ``BatchNormalization`` node in inference mode with scale
``inv_std``, bias 0, mean ``mean``, variance 1 and epsilon 0: per feature (dimension 1 of the
``[batch, n]`` input) it computes ``(x - mean) / sqrt(1 + 0) * inv_std + 0``, the same function.
The Clip and everything after it stay as they are; the weights are not touched. Infinite
observations still clip to ``±c``, as in the policy.

onnxruntime evaluates the node as ``x * inv_std + (-mean * inv_std)`` (its kernel folds the
per-feature constants), which differs from ``(x - mean) * inv_std`` by rounding in terms of the
size of ``|x * inv_std|`` and ``|mean * inv_std|``; for values the clip does not bind these stay
within ``|mean * inv_std| + c``. The rewrite is skipped when ``|mean * inv_std|`` exceeds ``c``
for any feature (an observation far from zero in its own standard deviations), so rounding grows
by at most a factor of two, and every export is then checked against the policy as usual
(:mod:`cairn.export.verify`). Graphs without the pattern (no filter, one-hot inputs, an input of
another rank than ``[batch, n]``, an input read by more than the filter and Shape nodes) are
left as they are. Only the first input (``obs``) is looked at: a masked policy's
``action_mask`` input is not filtered.

Other forms, measured with ``bench/export_inference.py``'s CartPole policy (one observation,
onnxruntime 1.32) and not used:

* Max and Min with the clip bounds in raw units (``mean ± c / inv_std``), the affine part folded
  into the weights of the first layers: two nodes too, but onnxruntime's broadcasting Max and
  Min made the model 0-4% slower for one observation than BatchNormalization and Clip (paired
  runs) and about 15% slower at batch 1024 (the form used before).
* A diagonal Gemm and a scalar Clip: as fast as BatchNormalization and Clip, but the zeros off
  the diagonal turn an infinite feature into NaN in every feature (``0 * inf``).
* ``HardSigmoid(diagonal Gemm)``, which onnxruntime fuses into one node: it maps ``[-c, c]``
  onto ``[0, 1]``, where float32 keeps only ``2c * 2**-24`` (about 1e-6 for c = 10) of the
  normalised value, and a SAC actor exported that way missed the 1e-5 parity bound (1.9e-5).
* No standard operator clips each feature to its own bounds in one node (Clip takes scalars).
  Leaving the clip out where it cannot bind (Box bounds inside ``mean ± c / inv_std``) would
  be exact only for observations inside the space, which environments do not always keep to.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["fold_observation_filter"]


def _consumers(graph: Any, name: str) -> list[Any]:
    return [node for node in graph.node if name in node.input]


def fold_observation_filter(proto: Any) -> bool:
    """Replace ``Sub -> Mul`` before the filter's ``Clip`` by one BatchNormalization, in place.

    Returns True when the graph was changed (see the module docstring for when it is).
    """
    from onnx import helper, numpy_helper

    graph = proto.graph
    if not graph.input or len(graph.input[0].type.tensor_type.shape.dim) != 2:
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
    if not all(name in initializers for name in clips[0].input[1:]):
        return False
    mean, inv_std = initializers[sub.input[1]], initializers[mul.input[1]]
    low, high = (float(initializers[name]) for name in clips[0].input[1:])
    if (mean.ndim != 1 or inv_std.shape != mean.shape
            or mean.dtype != np.float32 or inv_std.dtype != np.float32):
        return False
    features = graph.input[0].type.tensor_type.shape.dim[1]
    if not features.HasField("dim_value") or features.dim_value != mean.shape[0] or not low < 0 < high:
        return False
    if not np.all(np.isfinite(mean)) or not np.all(np.isfinite(inv_std)):
        return False
    if np.max(np.abs(mean.astype(np.float64) * inv_std.astype(np.float64))) > min(-low, high):
        return False

    zero, one = "observations.zero", "observations.one"
    normalise = helper.make_node(
        "BatchNormalization", [obs, mul.input[1], zero, sub.input[1], one], [mul.output[0]],
        name="filter_normalise", epsilon=0.0,
    )
    nodes = list(graph.node)
    nodes[nodes.index(sub)] = normalise
    nodes.remove(mul)
    del graph.node[:]
    graph.node.extend(nodes)
    kept = [value for value in graph.value_info if value.name != sub.output[0]]
    del graph.value_info[:]
    graph.value_info.extend(kept)
    graph.initializer.extend([numpy_helper.from_array(np.zeros_like(mean), zero),
                              numpy_helper.from_array(np.ones_like(mean), one)])
    return True
