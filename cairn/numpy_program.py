"""What the built-in networks' numpy acting paths share: their activations and
:class:`StorageWatch`.

The sampling loop calls a policy's network once per step on a handful of observations, where
torch's per-module dispatch costs more than the matrix products (a 64x64 actor: ~60 us in torch,
~13 us in numpy). cairn's own networks (the MLP, the LSTM, DQN's Q network, SAC's actor, the
Keras MLP) therefore act in numpy on views of their live parameters, each checked against its
torch forward in the tests. A user's model acts in torch, as its ``forward`` is at that moment
(``cairn.models``): a translation of arbitrary Python (a torch.fx trace, as this module held
until issue 36) bakes the model's Python attributes and branches in as they were when it was
made, and nothing cheap can prove it still equals ``forward``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from torch import nn

from cairn._compat.torch_internals import own_tensor_tables

__all__ = ["NUMPY_ACTIVATIONS", "StorageWatch"]

NumpyFn = Callable[[np.ndarray], np.ndarray]

#: Activations by name, in numpy: the built-in networks' numpy forward passes
#: (``cairn.policy.model`` re-exports them).
NUMPY_ACTIVATIONS: dict[str, NumpyFn] = {
    "tanh": np.tanh,
    "relu": lambda x: np.maximum(x, 0.0),
    "elu": lambda x: np.where(x > 0, x, np.expm1(np.minimum(x, 0.0))),
    "silu": lambda x: x / (1.0 + np.exp(-x)),
    "sigmoid": lambda x: 1.0 / (1.0 + np.exp(-x)),
    "identity": lambda x: x,
}

class StorageWatch:
    """Whether the parameters and buffers of some modules still live where they did when the
    watch was made.

    Numpy views of parameters (how the networks act in numpy) see every in-place change:
    optimizer steps, ``load_state_dict``, ``set_weights``. They do not see a tensor replaced in
    its module (``load_state_dict(..., assign=True)``, a new ``nn.Parameter`` assigned) or given
    other storage (``param.data = x``): the views would keep reading the old memory. A cache of
    views asks :meth:`moved` before each use and takes its views again when it says so (about
    0.1 us per tensor: the sampling loop asks once per step). ``recurse=False`` watches only the
    modules' own tensors, not their submodules'.

    >>> layer = nn.Linear(2, 2)
    >>> watch = StorageWatch([layer])
    >>> layer.weight.data = torch.zeros(2, 2)
    >>> watch.moved()
    True
    """

    __slots__ = ("_addresses", "_slots")

    def __init__(self, modules: Sequence[nn.Module], *, recurse: bool = True) -> None:
        slots: list[tuple[dict[str, Any], str]] = []
        for module in modules:
            for sub in module.modules() if recurse else (module,):
                for table in own_tensor_tables(sub):
                    slots += [(table, key) for key, tensor in table.items() if tensor is not None]
        self._slots = slots
        self._addresses = [table[key].data_ptr() for table, key in slots]

    def moved(self) -> bool:
        """Whether one of the watched tensors was replaced, removed or given other storage."""
        for (table, key), address in zip(self._slots, self._addresses):
            tensor = table.get(key)
            if tensor is None or tensor.data_ptr() != address:
                return True
        return False
