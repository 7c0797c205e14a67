"""torch's internals that cairn relies on.

Touches:

* ``Module._parameters``, ``Module._buffers`` and ``Module._modules``, the tables a module's own
  tensors and submodules are registered in (what ``load_state_dict(assign=True)`` and attribute
  assignment update): the public ``named_parameters()`` yields the tensors, not the tables, so
  the numpy acting path's watch of which tensors a network reads
  (:class:`cairn.numpy_acting.LiveViews`) reads them.
* ``torch._foreach_norm``, ``torch._foreach_mul_`` and ``torch._foreach_lerp_``: the
  multi-tensor kernels torch's own optimizers and ``clip_grad_norm_`` use, called directly to
  skip those functions' per-call grouping and checks on small networks.

Supported: ``torch>=2.4,<3`` (pyproject.toml; constraints.txt pins the version tested here). All
of these have kept their names and meaning through torch 2.x; a new major version is checked
before the range is widened.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

__all__ = ["foreach_lerp_", "foreach_mul_", "foreach_norm", "own_tables"]

foreach_norm = torch._foreach_norm
foreach_mul_ = torch._foreach_mul_
foreach_lerp_ = torch._foreach_lerp_


def own_tables(module: nn.Module) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """The tables ``module``'s own parameters, buffers and direct submodules are registered in,
    by name: ``(module._parameters, module._buffers, module._modules)``, the live dicts themselves."""
    return module._parameters, module._buffers, module._modules
