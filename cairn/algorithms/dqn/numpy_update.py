"""One DQN gradient step for small Q-networks, in numpy.

For the networks DQN usually trains on a CPU (two hidden layers of 64-256 units, minibatches of
32-256), torch spends most of an update dispatching some forty small operators (forward,
autograd, clipping, Adam). The same step written as a dozen numpy matrix products on views of
the parameters and of the optimizer's own state tensors costs a fraction of that, and leaves the
policy, its optimizer and its checkpoints exactly as the torch path would.

It covers :class:`~cairn.algorithms.dqn.model.QNetwork` (plain or dueling heads, ``relu`` or
``tanh``) with ``torch.optim.Adam`` (no weight decay, no AMSGrad); anything else uses the
torch path. ``tests/algorithms/dqn/test_numpy_update.py`` checks it against autograd and
``torch.optim.Adam``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from cairn.algorithms.dqn.model import QNetwork

__all__ = ["supports_numpy_update", "numpy_dqn_update", "UpdateResult"]

_ACTIVATIONS = ("relu", "tanh")


@dataclass
class UpdateResult:
    """What one update reports: the loss statistics and the TD errors (for priorities)."""

    stats: list[float]  # loss, q_mean, target_mean, td_error_abs_mean
    td_errors: np.ndarray


def supports_numpy_update(model: Any, optimizer: Any) -> bool:
    """Whether :func:`numpy_dqn_update` reproduces the torch update for this pair."""
    if not (isinstance(model, QNetwork) and model.activation in _ACTIVATIONS):
        return False
    if type(optimizer) is not torch.optim.Adam or len(optimizer.param_groups) != 1:
        return False
    group = optimizer.param_groups[0]
    return (
        not group["amsgrad"] and not group["maximize"] and group["weight_decay"] == 0
        and not group.get("differentiable", False) and not group.get("capturable", False)
        and all(p.dtype == torch.float32 and p.device.type == "cpu" for p in group["params"])
    )


def _layers(model: QNetwork) -> tuple[list[nn.Linear], nn.Linear, nn.Linear | None]:
    return [m for m in model.trunk if isinstance(m, nn.Linear)], model.advantage_head, model.value_head


def numpy_dqn_update(
    model: QNetwork,
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
    ``exp_avg_sq``, created as torch creates them) are updated through numpy views.
    """
    trunk, adv_head, value_head = _layers(model)
    relu = model.activation == "relu"
    batch = obs.shape[0]
    # Forward, keeping each layer's output for the backward pass.
    outputs = [obs]
    for layer in trunk:
        z = outputs[-1] @ _np(layer.weight).T + _np(layer.bias)
        outputs.append(np.maximum(z, 0.0) if relu else np.tanh(z))
    features = outputs[-1]
    advantages = features @ _np(adv_head.weight).T + _np(adv_head.bias)
    if value_head is None:
        q_values = advantages
    else:
        value = features @ _np(value_head.weight).T + _np(value_head.bias)
        q_values = value + advantages - advantages.mean(axis=1, keepdims=True)
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
    # Backward.
    d_q = np.zeros_like(q_values)
    d_q[rows, actions] = d_q_taken
    grads: dict[torch.Tensor, np.ndarray] = {}
    if value_head is None:
        d_adv = d_q
    else:
        d_value = d_q.sum(axis=1, keepdims=True)
        d_adv = d_q - d_value / d_q.shape[1]  # Q = V + A - mean(A)
        grads[value_head.weight] = d_value.T @ features
        grads[value_head.bias] = d_value.sum(axis=0)
    grads[adv_head.weight] = d_adv.T @ features
    grads[adv_head.bias] = d_adv.sum(axis=0)
    d_h = d_adv @ _np(adv_head.weight)
    if value_head is not None:
        d_h += d_value @ _np(value_head.weight)
    for i in range(len(trunk) - 1, -1, -1):
        out = outputs[i + 1]
        d_z = d_h * (out > 0) if relu else d_h * (1.0 - out * out)
        grads[trunk[i].weight] = d_z.T @ outputs[i]
        grads[trunk[i].bias] = d_z.sum(axis=0)
        if i:
            d_h = d_z @ _np(trunk[i].weight)
    if grad_clip is not None:
        total = math.sqrt(sum(float(np.dot(g.ravel(), g.ravel())) for g in grads.values()))
        scale = grad_clip / (total + 1e-6)
        if scale < 1.0:
            for g in grads.values():
                g *= scale
    _adam_step(optimizer, grads)
    td_errors = td.astype(np.float32, copy=False)
    stats = [loss, float(q_taken.mean()), float(targets.mean()), float(np.abs(td_errors).mean())]
    return UpdateResult(stats=stats, td_errors=td_errors)


def _np(tensor: torch.Tensor) -> np.ndarray:
    return tensor.detach().numpy()


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
