"""One DQN gradient step for small Q-networks, in numpy: ``update_backend="numpy"``.

For the networks DQN usually trains on a CPU (two hidden layers of 64-256 units, minibatches of
32-256), torch spends most of an update dispatching some forty small operators (forward,
autograd, clipping, Adam). The same step written as a dozen numpy matrix products on views of
the parameters and of the optimizer's own state tensors costs a fraction of that, and leaves the
policy, its optimizer and its checkpoints in the same layout as the torch path would (equal up
to float32 rounding; see docs/dqn.md for the measured difference).

The forward pass is the network's own numpy forward (:func:`~cairn.algorithms.dqn.model.
numpy_q_forward`, also used for acting and targets); this module adds the backward pass,
global-norm clipping and torch's Adam step. :func:`numpy_update_unsupported` says which
network/optimizer pairs it covers; ``tests/algorithms/dqn/test_numpy_update.py`` checks it
against autograd and ``torch.optim.Adam``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import cast

import numpy as np
import torch

from cairn.algorithms.dqn.model import QNetwork, numpy_q_forward
from cairn.errors import NonFiniteLossError

__all__ = ["numpy_update_unsupported", "supports_numpy_update", "numpy_dqn_update", "UpdateResult",
           "NUMPY_UPDATE_ACTIVATIONS"]

#: d(loss)/d(pre-activation) from d(loss)/d(output) and the output, per supported activation.
_ACTIVATION_GRADS: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    "relu": lambda d_out, out: d_out * (out > 0),
    "tanh": lambda d_out, out: d_out * (1.0 - out * out),
}
#: The activations the numpy update can differentiate.
NUMPY_UPDATE_ACTIVATIONS = tuple(_ACTIVATION_GRADS)

_ADAM_FLAGS = ("amsgrad", "maximize", "differentiable", "capturable")


@dataclass
class UpdateResult:
    """What one update reports: the loss statistics and the TD errors (for priorities)."""

    stats: list[float]  # loss, q_mean, target_mean, td_error_abs_mean
    td_errors: np.ndarray


def numpy_update_unsupported(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> str | None:
    """Why :func:`numpy_dqn_update` cannot stand in for the torch update of this pair, or None
    when it can: a :class:`QNetwork` (exactly that class, since a subclass may change the
    forward pass) with a ``relu`` or ``tanh`` activation and no parameter shared between two of
    its layers, all of whose float32 CPU parameters,
    each requiring grad, are trained by one ``torch.optim.Adam`` param group without
    ``weight_decay``, ``amsgrad``, ``maximize``, ``differentiable`` or ``capturable``.

    >>> import torch
    >>> net = QNetwork(4, 2, activation="elu")
    >>> numpy_update_unsupported(net, torch.optim.Adam(net.parameters()))
    "activation 'elu' (the numpy update covers ['relu', 'tanh'])"
    """
    reason = _network_unsupported(model)
    if reason is not None:
        return reason
    if type(optimizer) is not torch.optim.Adam:
        return (f"the optimizer is {type(optimizer).__module__}.{type(optimizer).__name__}, "
                "not torch.optim.Adam")
    if len(optimizer.param_groups) != 1:
        return f"the optimizer has {len(optimizer.param_groups)} param groups, not 1"
    group = optimizer.param_groups[0]
    flags = [flag for flag in _ADAM_FLAGS if group.get(flag)]
    if flags:
        return f"Adam with {', '.join(f'{flag}=True' for flag in flags)}"
    if group["weight_decay"] != 0:
        return f"Adam with weight_decay={group['weight_decay']}"
    params = list(model.parameters())
    if {id(p) for p in group["params"]} != {id(p) for p in params} or len(group["params"]) != len(params):
        return "the optimizer does not train exactly the network's parameters"
    for param in params:
        if param.dtype != torch.float32 or param.device.type != "cpu" or not param.requires_grad:
            return (f"a parameter is {param.dtype} on {param.device} with requires_grad="
                    f"{param.requires_grad} (needs float32 on the CPU, requiring grad)")
    return None


def _network_unsupported(model: object) -> str | None:
    """The network half of :func:`numpy_update_unsupported`: the one check of which networks
    this module's maths describes, also made by :func:`numpy_dqn_update` before it moves anything."""
    if type(model) is not QNetwork:
        return f"the network is a {type(model).__name__}, not a QNetwork"
    if model.encoder is not None:
        return "the QNetwork has a CNN encoder (image observations)"
    if model.activation not in _ACTIVATION_GRADS:
        return f"activation {model.activation!r} (the numpy update covers {list(NUMPY_UPDATE_ACTIVATIONS)})"
    # The backward pass computes one gradient per layer and keys it by the tensor: for a tensor two
    # layers share (tied weights), one layer's gradient would replace the other's, where autograd sums them.
    hidden, adv_head, value_head = model.linear_layers()
    layers = [layer for layer in (*hidden, adv_head, value_head) if layer is not None]
    tensors = [t for layer in layers for t in (layer.weight, layer.bias)]
    if len({id(t) for t in tensors}) != len(tensors):
        return "the QNetwork's linear layers share a parameter (tied weights)"
    return None


def supports_numpy_update(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> bool:
    """Whether :func:`numpy_dqn_update` can stand in for the torch update of this pair."""
    return numpy_update_unsupported(model, optimizer) is None


def numpy_dqn_update(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    obs: np.ndarray,
    actions: np.ndarray,
    targets: np.ndarray,
    *,
    loss_fn: str,
    grad_clip: float | None,
    weights: np.ndarray | None = None,
) -> UpdateResult:
    """Minimise ``mean(w * l(Q(s, a) - y))`` by one Adam step, in place, like the torch path.

    ``l`` is the Huber loss (delta 1) or the squared error. The gradient's global norm is
    clipped to ``grad_clip`` first. Parameters and the Adam state (``step``, ``exp_avg``,
    ``exp_avg_sq``, created as torch creates them) are updated through numpy views. Only for
    pairs that :func:`numpy_update_unsupported` accepts; a network it does not describe (for
    example one replaced after DQN chose this backend for the iteration) is a TypeError, raised
    before any parameter moves, never trained as if it were a plain QNetwork.
    """
    reason = _network_unsupported(model)
    if reason is not None:
        raise TypeError(f"The numpy update cannot train this network: {reason}. DQN chooses "
                        "update_backend per iteration from the policy's network: replace networks between "
                        "train() calls, or use update_backend='torch'.")
    network = cast(QNetwork, model)  # exactly a QNetwork: _network_unsupported checks type(model)
    hidden, adv_head, value_head = network.linear_layers()
    layers = network.numpy_layers()
    activation_grad = _ACTIVATION_GRADS[layers.activation]
    outputs = [obs]  # the trunk's input, then each hidden layer's output (the last: the features)
    q_values = numpy_q_forward(layers, obs, outputs)
    batch = obs.shape[0]
    rows = np.arange(batch)
    q_taken = q_values[rows, actions]
    td = q_taken - targets
    w = np.ones(batch, dtype=np.float32) if weights is None else weights.astype(np.float32)
    if loss_fn == "huber":
        abs_td = np.abs(td)
        per_sample = np.where(abs_td <= 1.0, 0.5 * td * td, abs_td - 0.5)
        d_q_taken = w * np.clip(td, -1.0, 1.0) / batch
    else:
        per_sample = td * td
        d_q_taken = w * 2.0 * td / batch
    loss = float((w * per_sample).mean())
    if not math.isfinite(loss):  # before anything steps, as the torch path (GradientSync.optimizer_step)
        raise NonFiniteLossError("loss", loss)
    # Backward, through the heads, then the trunk from its last layer to its first.
    features = outputs[-1]
    d_q = np.zeros_like(q_values)
    d_q[rows, actions] = d_q_taken
    grads: dict[torch.Tensor, np.ndarray] = {}
    if value_head is None or layers.value is None:
        d_adv = d_q
        d_h = d_adv @ layers.advantage[0].T  # weights are [in, out] views
    else:
        d_value = d_q.sum(axis=1, keepdims=True)
        d_adv = d_q - d_value / d_q.shape[1]  # Q = V + A - mean(A)
        grads[value_head.weight] = d_value.T @ features
        grads[value_head.bias] = d_value.sum(axis=0)
        d_h = d_adv @ layers.advantage[0].T  # weights are [in, out] views
        d_h += d_value @ layers.value[0].T
    grads[adv_head.weight] = d_adv.T @ features
    grads[adv_head.bias] = d_adv.sum(axis=0)
    for i in range(len(hidden) - 1, -1, -1):
        d_z = activation_grad(d_h, outputs[i + 1])
        grads[hidden[i].weight] = d_z.T @ outputs[i]
        grads[hidden[i].bias] = d_z.sum(axis=0)
        if i:
            d_h = d_z @ layers.hidden[i][0].T
    # Checked with or without clipping, before anything steps, as the torch path: a finite loss
    # can still have non-finite gradients (an overflow in a product with a huge observation).
    with np.errstate(over="ignore", invalid="ignore"):
        total = math.sqrt(sum(float(np.dot(g.ravel(), g.ravel())) for g in grads.values()))
    if not math.isfinite(total):
        raise NonFiniteLossError("gradient norm", total,
                                 parameters=[t for t, g in grads.items() if not np.isfinite(g).all()])
    if grad_clip is not None:
        scale = grad_clip / (total + 1e-6)
        if scale < 1.0:
            for g in grads.values():
                g *= scale
    _adam_step(optimizer, grads)
    td_errors = td.astype(np.float32, copy=False)
    stats = [loss, float(q_taken.mean()), float(targets.mean()), float(np.abs(td_errors).mean())]
    return UpdateResult(stats=stats, td_errors=td_errors)


def _adam_step(optimizer: torch.optim.Optimizer, grads: dict[torch.Tensor, np.ndarray]) -> None:
    """``torch.optim.Adam``'s update (torch's formulation and state layout) on numpy views."""
    group = optimizer.param_groups[0]
    lr, (beta1, beta2), eps = float(group["lr"]), group["betas"], float(group["eps"])
    for param in group["params"]:
        grad = grads[param]
        state = optimizer.state[param]
        if not state:  # as torch initialises it on the first step
            state["step"] = torch.zeros((), dtype=torch.float32)
            state["exp_avg"] = torch.zeros_like(param, memory_format=torch.preserve_format)
            state["exp_avg_sq"] = torch.zeros_like(param, memory_format=torch.preserve_format)
        step_view = state["step"].numpy()
        step_view += 1
        step = float(step_view)
        exp_avg, exp_avg_sq = state["exp_avg"].numpy(), state["exp_avg_sq"].numpy()
        exp_avg += (1.0 - beta1) * (grad - exp_avg)
        exp_avg_sq *= beta2
        exp_avg_sq += (1.0 - beta2) * grad * grad
        step_size = lr / (1.0 - beta1**step)
        denom = np.sqrt(exp_avg_sq) / math.sqrt(1.0 - beta2**step) + eps
        param_view = param.detach().numpy()
        param_view -= step_size * exp_avg / denom
        torch.autograd.graph.increment_version([param, *state.values()])  # numpy wrote them: tell torch
