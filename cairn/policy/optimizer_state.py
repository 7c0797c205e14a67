"""Optimizer state as a state tree (numpy arrays and JSON values) and back.

``torch.optim.Optimizer.state_dict()`` holds tensors keyed by parameter index; checkpoints need
arrays keyed by strings, and restoring must check shapes before torch silently broadcasts.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch

from cairn.alignment import aligned

__all__ = [
    "optimizer_state_to_tree",
    "optimizer_state_from_tree",
    "check_optimizer_tree",
    "copy_optimizer_tree",
]

_OPTIMIZER_IMPLEMENTATION_KEYS = frozenset(
    {"params", "foreach", "fused", "capturable", "differentiable"}
)


def optimizer_state_to_tree(optimizer: torch.optim.Optimizer, *, copy: bool) -> dict[str, Any]:
    """``{"state": {"<param index>": {slot: array | number}}, "param_groups": [...]}``;
    ``copy=False`` returns views of the live tensors (for writing a checkpoint at once)."""
    raw = optimizer.state_dict()
    state: dict[str, Any] = {}
    for index, slots in raw["state"].items():
        state[str(index)] = {
            # On the CPU wherever the parameters are (device-free checkpoints): a view for a
            # CPU tensor, a copy from an accelerator. Loading casts back to the parameters' device.
            name: (value.detach().cpu().numpy().copy() if copy else value.detach().cpu().numpy())
            if isinstance(value, torch.Tensor)
            else value
            for name, value in slots.items()
        }
    groups = [
        {k: (list(v) if isinstance(v, tuple) else v) for k, v in group.items()}
        for group in raw["param_groups"]
    ]
    return {"state": state, "param_groups": groups}


def check_optimizer_tree(
    tree: Mapping[str, Any], params: Sequence[torch.Tensor], *, num_groups: int
) -> None:
    """Raise ValueError unless ``tree`` (from :func:`optimizer_state_to_tree`) fits an
    optimizer over ``params`` (in its parameter order) with ``num_groups`` groups."""
    groups = tree["param_groups"]
    if not isinstance(groups, list) or len(groups) != num_groups:
        raise ValueError("Optimizer state has a different number of parameter groups.")
    for key, slots in tree["state"].items():
        index = int(key)
        if not 0 <= index < len(params):
            raise ValueError(f"Optimizer state refers to parameter {key}, which does not exist.")
        for name, value in slots.items():
            if isinstance(value, np.ndarray) and value.ndim and value.shape != tuple(params[index].shape):
                raise ValueError(
                    f"Optimizer slot {name!r} of parameter {key} has shape "
                    f"{tuple(value.shape)}, expected {tuple(params[index].shape)}."
                )


def optimizer_state_from_tree(
    optimizer: torch.optim.Optimizer, tree: Mapping[str, Any], *, copy: bool = True
) -> None:
    """Load :func:`optimizer_state_to_tree` output, checking indices and shapes first.
    ``copy=False`` lets the optimizer keep writable arrays as its state tensors."""
    own_groups = optimizer.state_dict()["param_groups"]
    params = [p for group in optimizer.param_groups for p in group["params"]]
    check_optimizer_tree(tree, params, num_groups=len(own_groups))
    groups = tree["param_groups"]
    state: dict[int, dict[str, Any]] = {}
    for key, slots in tree["state"].items():
        # aligned() keeps a writable, contiguous, aligned array as the storage and copies
        # anything else (see cairn.alignment for why alignment matters).
        state[int(key)] = {
            name: torch.from_numpy(aligned(value, copy=copy)) if isinstance(value, np.ndarray) else value
            for name, value in slots.items()
        }
    merged_groups = []
    for own, saved in zip(own_groups, groups):
        group = dict(own)
        # Hyperparameters come from the checkpoint; implementation switches (fused, foreach,
        # capturable, ...) stay as this process built them, so a checkpoint never asks for an
        # implementation this torch lacks.
        group.update({k: (tuple(v) if k == "betas" else v) for k, v in saved.items()
                      if k in own and k not in _OPTIMIZER_IMPLEMENTATION_KEYS})
        merged_groups.append(group)
    optimizer.load_state_dict({"state": state, "param_groups": merged_groups})


def copy_optimizer_tree(tree: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of an optimizer state tree whose arrays are aligned and owned by nobody else."""
    return {
        "state": {key: {name: aligned(v, copy=True) if isinstance(v, np.ndarray) else v
                        for name, v in slots.items()}
                  for key, slots in tree["state"].items()},
        "param_groups": [dict(group) for group in tree["param_groups"]],
    }
