"""How cairn's built-in networks act in numpy: one cache of views of their live parameters
(:class:`LiveViews`) and one forward pass (:func:`dense_stack`, :func:`affine`, :func:`lstm_cell`).

The sampling loop calls a network once per step on a few observations, where torch's
per-operator dispatch costs more than the matrix products (a 64x64 actor: ~60 us in torch,
~13 us in numpy). So the MLP, the LSTM, DQN's Q network, SAC's actor and the Keras MLP and SAC
actor act through this module, each checked against its torch forward in the tests. A user's
model acts in torch, as its ``forward`` is at that moment (``cairn.models``): nothing cheap can
prove a translation of arbitrary Python still equals it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Generic, TypeVar

import numpy as np
import torch
from torch import nn

from cairn._compat.torch_internals import own_tables

__all__ = ["NUMPY_ACTIVATIONS", "Dense", "LiveViews", "View", "affine", "dense_stack", "in_torch", "linear",
           "evaluating", "lstm_cell", "reduce_any", "reduce_max", "reduce_min", "reduce_sum",
           "row_means"]

NumpyFn = Callable[[np.ndarray], np.ndarray]

# The acting path reduces a few rows per call (mask checks, sampling), where numpy's fixed cost
# per operation is most of the time. These are the ufuncs' own ``reduce``: what ``ndarray.any`` /
# ``.max`` / ``.sum`` run after a Python wrapper (numpy/_core/_methods.py), the same reduction and
# the same bits without the wrapper (tests/policy/test_acting_reductions.py).
reduce_any = np.logical_or.reduce
reduce_max = np.maximum.reduce
reduce_min = np.minimum.reduce
reduce_sum = np.add.reduce
#: A dense layer as numpy views: ``(weight [in, out], bias [out])``.
Dense = tuple[np.ndarray, np.ndarray]
#: What :class:`LiveViews` hands a network's ``take``: a tensor's numpy view, recorded for the watch.
View = Callable[[torch.Tensor], np.ndarray]
V = TypeVar("V")
#: Watched entries: ``(table, key, tensor, its layout)`` and ``(table, key, submodule)``.
#: A layout is where a viewed tensor's elements are: its address, shape, strides and dtype. The same object
#: at the same address can still be a different array (``param.data = param.data.t()`` keeps the
#: address of a square weight and swaps its strides), so the whole layout is compared.
#: Each entry holds its table's ``get`` and the tensor's ``data_ptr`` and ``stride`` bound once, and
#: the check compares one tuple: the acting call runs it every step (bench/numpy_acting.py).
_Layout = tuple[int, torch.Size, tuple[int, ...], torch.dtype]
_Get = Callable[[str], Any]
_TensorSlot = tuple[_Get, str, torch.Tensor, Callable[[], int], Callable[[], tuple[int, ...]], _Layout]
_ModuleSlot = tuple[_Get, str, nn.Module]
#: A submodule table's ``__len__`` and its length when watched: an entry added is a change too.
_SizeSlot = tuple[Callable[[], int], int]

#: Activations by name, in numpy (the names of :data:`cairn.policy.mlp_actor_critic.ACTIVATIONS`).
NUMPY_ACTIVATIONS: dict[str, NumpyFn] = {
    "tanh": np.tanh,
    "relu": lambda x: np.maximum(x, 0.0),
    "elu": lambda x: np.where(x > 0, x, np.expm1(np.minimum(x, 0.0))),
    "silu": lambda x: x / (1.0 + np.exp(-x)),
}
#: The same ones writing into their argument, for :func:`dense_stack`'s fresh arrays: one allocation
#: less per layer on the acting path, the same ufunc and so the same bits.
_IN_PLACE: dict[str, NumpyFn] = {"tanh": lambda x: np.tanh(x, out=x),
                                 "relu": lambda x: np.maximum(x, 0.0, out=x)}

_EXACT_FLOAT32_COUNT = 1 << 24  # every count up to it is a float32 value


def row_means(x: np.ndarray) -> np.ndarray:
    """``x.mean(axis=1, keepdims=True)`` bit for bit, for the dueling head of a few rows, without
    ``mean``'s Python wrapper (numpy/_core/_methods.py), which costs more than the maths on one row.

    For float32 and float64 (dtype characters ``f``, ``d``) ``mean`` sums with the ufunc, then divides
    in place by the count as an ``intp``: float32 promotes to a float64 division rounded back to
    float32. Here the count is a Python int, so float32 divides in float32: the same bits, as a
    quotient of two float32 values computed in float64 (53 >= 2 * 24 + 2 bits) and rounded to float32
    is the correctly rounded float32 quotient, and a count up to 2**24 is exact in float32. Other
    dtypes (float16 sums in float32), empty rows and wider rows go through ``mean`` itself
    (tests/policy/test_acting_reductions.py)."""
    count = x.shape[1]
    if x.dtype.char not in "fd" or not 0 < count <= _EXACT_FLOAT32_COUNT:
        return x.mean(axis=1, keepdims=True)  # type: ignore[no-any-return]
    total = reduce_sum(x, axis=1, keepdims=True)
    total /= count
    return total  # type: ignore[no-any-return]


class LiveViews(Generic[V]):
    """Numpy views of the tensors a network acts with, taken again whenever one may be stale.

    ``take(module, view)`` builds the views (any structure) by calling ``view(tensor)`` on each
    parameter or buffer it reads. Views share memory with the tensors, so they see every
    in-place write (optimizer steps, ``load_state_dict``, ``param.data.copy_``). They cannot see
    a tensor replaced in its module (``load_state_dict(..., assign=True)``, a new
    ``nn.Parameter``), given other storage or another layout (``param.data = x``, ``.to()``,
    ``param.data = param.data.t()``), or a submodule on the way to it replaced
    (``model.action_head = nn.Linear(...)``), or a module beside it in a table on that path
    replaced, added or removed (``model.actor[1] = nn.ReLU()``). So :meth:`get` first checks that
    each table entry a viewed tensor was read from still holds that object with the address,
    shape, strides and dtype it had, and each submodule table on the path to it the same modules
    under the same names; else it takes the views again. The views keep the old storage alive, so
    no other tensor can reuse its address. A copy (deep copy, pickle) starts empty: views of the
    original's memory never serve it.
    """

    __slots__ = ("_modules", "_sizes", "_take", "_tensors", "_views")

    def __init__(self, take: Callable[[Any, View], V]) -> None:
        self._take = take
        self._views: V | None = None
        self._tensors: list[_TensorSlot] = []  # each viewed tensor's entry
        self._modules: list[_ModuleSlot] = []  # each entry of a submodule table on the way to one
        self._sizes: list[_SizeSlot] = []  # those tables' lengths

    def __deepcopy__(self, memo: dict[int, Any]) -> LiveViews[V]:
        return LiveViews(self._take)

    def __reduce__(self) -> tuple[Any, ...]:  # addresses from another process prove nothing
        return LiveViews, (self._take,)

    def stale(self) -> bool:
        """Whether a watched tensor or submodule was replaced or removed, or a tensor moved."""
        for get, key, tensor, data_ptr, stride, layout in self._tensors:
            if get(key) is not tensor or (data_ptr(), tensor.shape, stride(), tensor.dtype) != layout:
                return True
        for get, key, module in self._modules:
            if get(key) is not module:
                return True
        for size, watched in self._sizes:
            if size() != watched:
                return True
        return False

    def get(self, module: nn.Module) -> V:
        """The views of ``module``'s live tensors (taken again when :meth:`stale`)."""
        views = self._views
        if views is not None and not self.stale():
            return views
        # A failed take keeps nothing.
        self._views, self._tensors, self._modules, self._sizes = None, [], [], []
        tensors: list[torch.Tensor] = []

        def view(tensor: torch.Tensor) -> np.ndarray:
            tensors.append(tensor)
            return tensor.detach().numpy()  # type: ignore[no-any-return]

        views = self._take(module, view)
        self._tensors, self._modules, self._sizes = _watch(module, tensors)
        self._views = views
        return views


def _watch(root: nn.Module, tensors: Sequence[torch.Tensor]
           ) -> tuple[list[_TensorSlot], list[_ModuleSlot], list[_SizeSlot]]:
    """The table entries ``root`` reads ``tensors`` from, and every entry (and the length) of each
    submodule table on the way: a module beside a viewed layer (an activation between two layers of
    an ``nn.Sequential``) replaced, added or removed changes what ``forward`` runs too."""
    wanted = {id(t) for t in tensors}
    found: list[_TensorSlot] = []
    on_path: dict[tuple[int, str], tuple[dict[str, Any], str, nn.Module]] = {}

    def visit(module: nn.Module, path: list[tuple[dict[str, Any], str, nn.Module]]) -> None:
        parameters, buffers, submodules = own_tables(module)
        for table in (parameters, buffers):
            for key, tensor in table.items():
                if tensor is not None and id(tensor) in wanted:
                    layout = tensor.data_ptr(), tensor.shape, tensor.stride(), tensor.dtype
                    found.append((table.get, key, tensor, tensor.data_ptr, tensor.stride, layout))
                    on_path.update(((id(entry[0]), entry[1]), entry) for entry in path)
        for key, child in submodules.items():
            if child is not None:
                visit(child, [*path, (submodules, key, child)])

    visit(root, [])
    if {id(entry[2]) for entry in found} != wanted:
        raise TypeError(f"{type(root).__qualname__}'s numpy acting path reads a tensor that is not one of "
                        "its parameters or buffers, so it cannot be watched: view registered tensors only.")
    tables = {id(table): table for table, _, _ in on_path.values()}
    return (found, [(table.get, key, child) for table in tables.values() for key, child in table.items()],
            [(table.__len__, len(table)) for table in tables.values()])


def in_torch(fn: Callable[[torch.Tensor], Any], obs: np.ndarray, module: nn.Module) -> np.ndarray:
    """``fn(obs)`` in torch under ``inference_mode``, as numpy: the slow path the numpy one equals,
    and how users' models (their code as it is now, never a translation) and CNN encoders act.

    ``module`` (the network ``fn`` runs) acts in eval mode, as an exported model does: a user's
    ``Dropout`` or ``BatchNorm`` would otherwise make greedy actions random or batch-dependent and
    move running statistics while acting. A user's network rests in eval mode (a learner switches it
    to training mode for its learn function only: :attr:`cairn.policy.policy.Policy.switches_modes`),
    so acting switches nothing; a module found in training mode is put back in it afterwards. For
    one without mode-dependent layers both modes compute the same.

    ``fn`` gets its own copy of ``obs``: a model may write into its input (``obs *= scale`` is legal
    torch, and the learner's rows are the model's to change), and a tensor sharing ``obs``' memory
    would write into the caller's observations, the rows a runner stores for learning.
    """
    with torch.inference_mode(), evaluating(module):
        return fn(torch.from_numpy(obs.copy())).numpy()  # type: ignore[no-any-return]


@contextmanager
def evaluating(module: nn.Module) -> Iterator[None]:
    """``module`` in eval mode for the block, and back in training mode after it if it was in
    it: acting, and the learners' no-gradient targets (PPO's values for GAE, as SB3 takes them
    while collecting), run a user's Dropout and BatchNorm as a deployed model does."""
    if not module.training:
        yield
        return
    module.train(False)
    try:
        yield
    finally:
        module.train(True)


def dense_stack(x: np.ndarray, layers: Sequence[Dense], activation: str,
                outputs: list[np.ndarray] | None = None) -> np.ndarray:
    """``x`` through dense layers, each followed by the activation named ``activation``;
    ``outputs`` (if given) collects each layer's activated output (what a backward pass needs)."""
    act = _IN_PLACE.get(activation) or NUMPY_ACTIVATIONS[activation]
    for w, b in layers:
        x = x @ w
        x += b  # in place: x is the product's fresh array
        x = act(x)
        if outputs is not None:
            outputs.append(x)
    return x


def affine(x: np.ndarray, layer: Dense, log_std: np.ndarray | None = None) -> np.ndarray:
    """A head: one dense layer without activation, and a state-independent ``log_std`` vector
    appended to each row when given."""
    w, b = layer
    out = x @ w
    out += b
    return out if log_std is None else np.concatenate([out, np.broadcast_to(log_std, out.shape)], axis=-1)


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(0.5 * x))  # type: ignore[no-any-return]  # no overflow for large |x|


def lstm_cell(x: np.ndarray, state: Sequence[np.ndarray], w_ih: np.ndarray, w_hh: np.ndarray,
              b_ih: np.ndarray, b_hh: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """One step of ``torch.nn.LSTM``'s cell: ``(h, c)`` from ``x`` and ``state = [h, c]``, with
    the weights ``[in, 4 * cell]`` in torch's gate order (input, forget, cell, output)."""
    gates = x @ w_ih + state[0] @ w_hh + (b_ih + b_hh)
    i, f, g, o = np.split(gates, 4, axis=-1)
    c = _sigmoid(f) * state[1] + _sigmoid(i) * np.tanh(g)
    return _sigmoid(o) * np.tanh(c), c


def linear(layer: Any, view: View) -> Dense:
    """A ``torch.nn.Linear``'s views in :data:`Dense`'s ``[in, out]`` layout."""
    return view(layer.weight).T, view(layer.bias)
