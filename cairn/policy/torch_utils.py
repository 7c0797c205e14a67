"""Small torch helpers shared by the networks and the learners."""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING

import torch
from torch import nn
from torch.nn import functional as F

from cairn._compat.torch_internals import foreach_mul_, foreach_norm

if TYPE_CHECKING:
    from cairn.policy.policy import Policy

__all__ = ["TORCH_ACTIVATIONS", "uniform_fan_in_", "clip_grad_norm", "global_grad_norm", "non_finite_grads",
           "torch_threads", "SMALL_NETWORK_PARAMETERS"]

#: Below this many parameters per policy, ``torch_num_threads="auto"`` means one thread.
SMALL_NETWORK_PARAMETERS = 1_000_000


#: The activations of the built-in networks by config name, as functions (their ``forward``
#: calls them between functional matrix products).
TORCH_ACTIVATIONS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "tanh": torch.tanh, "relu": torch.relu, "elu": F.elu, "silu": F.silu}


def uniform_fan_in_(tensor: torch.Tensor, fan_in: int, generator: torch.Generator) -> None:
    """PyTorch's default ``nn.Linear`` initialisation of a weight or bias (what SB3's networks
    start from): uniform in ``±1/sqrt(fan_in)``, drawn from ``generator``."""
    bound = 1.0 / math.sqrt(fan_in)
    nn.init.uniform_(tensor, -bound, bound, generator=generator)


def clip_grad_norm(params: Sequence[torch.nn.Parameter], max_norm: float) -> torch.Tensor:
    """Scale gradients so that their global L2 norm is at most ``max_norm``; return the norm
    before scaling.

    The same maths as ``torch.nn.utils.clip_grad_norm_`` without its per-call grouping and
    checks, which cost more than the arithmetic for small networks updated hundreds of times
    per iteration.
    """
    grads = [p.grad for p in params if p.grad is not None]
    total = global_grad_norm(params)
    coef = max_norm / (float(total) + 1e-6)
    if grads and coef < 1.0:  # scaling by exactly 1 would change nothing; skip the operation
        foreach_mul_(grads, coef)
    return total


def global_grad_norm(params: Sequence[torch.nn.Parameter]) -> torch.Tensor:
    """The global L2 norm of the gradients of ``params`` (0 without any), as a tensor: one fused
    reduction. NaN or infinite when any entry is, or when the norm overflows the dtype."""
    grads = [p.grad for p in params if p.grad is not None]
    if not grads:
        return torch.zeros(())
    return torch.linalg.vector_norm(torch.stack(foreach_norm(grads))).detach()


def non_finite_grads(params: Sequence[torch.nn.Parameter]) -> list[torch.nn.Parameter]:
    """The parameters of ``params`` whose gradient holds a NaN or infinite entry (the slow,
    exact check, for an error message once the norm was found not finite)."""
    return [p for p in params if p.grad is not None and not bool(torch.isfinite(p.grad).all())]


@contextlib.contextmanager
def torch_threads(setting: int | str, policies: Iterable[Policy]) -> Iterator[None]:
    """Run the block with torch's intra-op threads set per ``config.torch_num_threads``.

    ``"auto"``: one thread when every policy has fewer than ``SMALL_NETWORK_PARAMETERS``
    parameters (splitting tiny matrix products across threads costs more than it saves, and
    collapses on a busy machine), else torch's own setting. The previous setting is restored.
    """
    wanted: int | None
    if setting == "auto":
        small = all(sum(p.numel() for p in policy.parameters()) < SMALL_NETWORK_PARAMETERS
                    for policy in policies)
        wanted = 1 if small else None
    else:
        wanted = int(setting)
    previous = torch.get_num_threads()
    if wanted is not None and wanted != previous:
        torch.set_num_threads(wanted)
    try:
        yield
    finally:
        if torch.get_num_threads() != previous:
            torch.set_num_threads(previous)
