"""A network's weights as numpy arrays, and back: checked, copied in, or adopted as storage."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import torch

from cairn.alignment import aligned

__all__ = ["weights_to_numpy", "check_weights", "load_weights", "adopt_weights"]


def weights_to_numpy(model: torch.nn.Module, *, copy: bool) -> dict[str, np.ndarray]:
    """The network's parameters and buffers as numpy arrays, on the CPU wherever the network
    is (checkpoints are device-free); ``copy=False`` returns views of the live tensors of a CPU
    network (for a caller that writes them at once)."""
    return {
        k: (v.detach().cpu().numpy().copy() if copy else v.detach().cpu().numpy())
        for k, v in model.state_dict().items()
    }


def check_weights(model: torch.nn.Module, weights: Mapping[str, np.ndarray]) -> dict[str, torch.Tensor]:
    """Check names and shapes against the network; return its state dict."""
    own = model.state_dict()
    missing, unexpected = set(own) - set(weights), set(weights) - set(own)
    if missing or unexpected:
        raise ValueError(
            f"Weights do not fit this policy's network: missing {sorted(missing)}, "
            f"unexpected {sorted(unexpected)}."
        )
    for name, tensor in own.items():
        value = weights[name]
        if tuple(np.shape(value)) != tuple(tensor.shape):
            raise ValueError(
                f"Weight {name!r} has shape {tuple(np.shape(value))}, but this policy's "
                f"network expects {tuple(tensor.shape)}; were the spaces or model config "
                "changed?"
            )
    return own


def load_weights(model: torch.nn.Module, weights: Mapping[str, np.ndarray]) -> None:
    """Copy ``weights`` into the network's tensors (names and shapes must match)."""
    for name, tensor in check_weights(model, weights).items():
        value = np.asarray(weights[name])
        if not value.flags.writeable and tensor.device.type == "cpu":
            # Read-only arrays (Ray's zero-copy ones, from learner actors or a broadcast):
            # torch.from_numpy warns about them; numpy copies into the tensor's storage directly,
            # and the write is declared to torch's version counter, as torch's own in-place writes
            # are (autograd then refuses a graph that saved the old values).
            np.copyto(tensor.detach().numpy(), value, casting="unsafe")
            torch.autograd.graph.increment_version(tensor)
            continue
        with torch.no_grad():
            # np.require, not np.ascontiguousarray: that one makes a 0-d array (BatchNorm's
            # num_batches_tracked) 1-d, which copy_ refuses.
            tensor.copy_(torch.from_numpy(np.require(value, requirements="C")))


def adopt_weights(model: torch.nn.Module, weights: Mapping[str, np.ndarray]) -> None:
    """Make the given arrays the parameters' storage (no allocation, no copy).

    A tensor the network holds under several names (tied weights, ``b.weight = a.weight``)
    adopts the array of its first name, and its other names are pointed at that same tensor
    again: assigning each name its own array would untie them into separate parameters."""
    own = check_weights(model, weights)
    first: dict[int, str] = {}
    tied = {}  # a later name -> the first name of the same tensor
    for name, tensor in model.state_dict(keep_vars=True).items():
        if first.setdefault(id(tensor), name) != name:
            tied[name] = first[id(tensor)]
    tensors = {}
    for name, value in weights.items():
        if name in tied:
            continue
        # Misaligned storage would change what MKL computes (see cairn.alignment).
        tensor = torch.from_numpy(aligned(np.asarray(value)))
        tensors[name] = tensor if tensor.dtype == own[name].dtype else tensor.to(own[name].dtype)
    model.load_state_dict(tensors, strict=not tied, assign=True)  # names: checked above
    for name, source in tied.items():
        owner, _, attribute = name.rpartition(".")
        source_owner, _, source_attribute = source.rpartition(".")
        setattr(model.get_submodule(owner), attribute,
                getattr(model.get_submodule(source_owner), source_attribute))
