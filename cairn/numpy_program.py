"""A user's torch network as a numpy function, for acting on a few observations at a time.

The sampling loop calls a policy's network once per step on a handful of observations, where
torch's per-module dispatch costs more than the matrix products (a 64x64 actor: ~60 us in torch,
~13 us in numpy). cairn's built-in networks therefore act in numpy; :func:`numpy_program` gives a
user's :class:`cairn.models.ActorCriticModel` the same path when it can: it traces ``fn`` with
``torch.fx`` and, when every step is one this module knows (``nn.Linear``, the common
activations, ``F.linear``, ``torch.cat``, indexing, ``squeeze``/``unsqueeze``, arithmetic), returns
a numpy function on *views* of the live parameters (in-place optimizer steps are seen at once).
Anything else (data-dependent Python, other modules, tracing errors) gives None and the model
acts through torch, as before. A program is checked against torch on random inputs before use.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
from torch import fx, nn
from torch.nn import functional as F

__all__ = ["numpy_program", "NUMPY_ACTIVATIONS", "StorageWatch"]

NumpyFn = Callable[[np.ndarray], np.ndarray]

#: Activations by name, in numpy: the built-in networks' numpy forward passes
#: (``cairn.policy.model`` re-exports them) and the translated torch programs.
NUMPY_ACTIVATIONS: dict[str, NumpyFn] = {
    "tanh": np.tanh,
    "relu": lambda x: np.maximum(x, 0.0),
    "elu": lambda x: np.where(x > 0, x, np.expm1(np.minimum(x, 0.0))),
    "silu": lambda x: x / (1.0 + np.exp(-x)),
    "sigmoid": lambda x: 1.0 / (1.0 + np.exp(-x)),
    "identity": lambda x: x,
}
_ACTIVATIONS: dict[Any, NumpyFn] = {
    fn: NUMPY_ACTIVATIONS[name] for name, fns in {
        "tanh": (torch.tanh, F.tanh), "relu": (torch.relu, F.relu), "sigmoid": (torch.sigmoid,),
        "silu": (F.silu,), "elu": (F.elu,)}.items() for fn in fns}
_MODULE_ACTIVATIONS: dict[type, NumpyFn] = {
    nn.Tanh: NUMPY_ACTIVATIONS["tanh"], nn.ReLU: NUMPY_ACTIVATIONS["relu"],
    nn.Sigmoid: NUMPY_ACTIVATIONS["sigmoid"], nn.SiLU: NUMPY_ACTIVATIONS["silu"],
    nn.ELU: NUMPY_ACTIVATIONS["elu"], nn.Identity: NUMPY_ACTIVATIONS["identity"],
}
_METHOD_ACTIVATIONS = {"tanh": NUMPY_ACTIVATIONS["tanh"], "relu": NUMPY_ACTIVATIONS["relu"]}
_ARITHMETIC = {operator.add: np.add, operator.sub: np.subtract, operator.mul: np.multiply,
               torch.add: np.add, torch.mul: np.multiply}


class _Unsupported(Exception):
    pass


#: A module's own parameters and buffers by name: torch exposes the tables a tensor is
#: registered in (which ``load_state_dict(assign=True)`` and attribute assignment update) only so.
_own_tables = operator.attrgetter("_parameters", "_buffers")


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
                for table in _own_tables(sub):
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


class _Wrapper(nn.Module):
    """``forward(obs) = fn(obs)``, so that fx traces a bound method such as ``action_inputs``."""

    def __init__(self, model: nn.Module, fn: Callable[[torch.Tensor], torch.Tensor]) -> None:
        super().__init__()
        self.model = model
        self.fn = fn

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.fn(obs)


def _linear(module: nn.Linear) -> NumpyFn:
    weight = module.weight.detach().numpy().T  # views: optimizer steps are seen at once
    bias = None if module.bias is None else module.bias.detach().numpy()
    if bias is None:
        return lambda x: x @ weight
    return lambda x: x @ weight + bias


def _step(node: fx.Node, modules: dict[str, nn.Module],
          params: dict[str, Any]) -> Callable[[dict[str, Any]], Any]:
    """The numpy evaluation of one graph node, reading its inputs from a value table."""
    def value(arg: Any) -> Callable[[dict[str, Any]], Any]:
        if isinstance(arg, fx.Node):
            name: str = arg.name
            return lambda values: values[name]
        if isinstance(arg, (tuple, list)):
            parts = [value(a) for a in arg]
            return lambda values: [p(values) for p in parts]
        if arg is None or isinstance(arg, (int, float, slice)):
            return lambda values: arg
        raise _Unsupported(f"argument {arg!r}")

    args = [value(a) for a in node.args]
    if node.op == "call_module":
        module = modules[str(node.target)]
        if node.kwargs or len(args) != 1:
            raise _Unsupported(str(node.target))
        if type(module) is nn.Linear:
            linear = _linear(module)
            return lambda values: linear(args[0](values))
        module_activation: Any = _MODULE_ACTIVATIONS.get(type(module))
        if module_activation is None:
            raise _Unsupported(type(module).__name__)
        return lambda values: module_activation(args[0](values))
    if node.op == "get_attr":
        target = params.get(str(node.target))
        if target is None:
            raise _Unsupported(str(node.target))
        return lambda values: target
    if node.op == "call_function":
        fn: Any = node.target
        if fn in _ACTIVATIONS and not node.kwargs and len(args) == 1:
            function_activation: Any = _ACTIVATIONS[fn]
            return lambda values: function_activation(args[0](values))
        if fn in _ARITHMETIC and not node.kwargs and len(args) == 2:
            op: Any = _ARITHMETIC[fn]
            return lambda values: op(args[0](values), args[1](values))
        if fn is F.linear and not node.kwargs and len(args) in (2, 3):
            bias = args[2] if len(args) == 3 else (lambda values: None)
            return lambda values: _affine(args[0](values), args[1](values), bias(values))
        if fn is operator.getitem and len(args) == 2:
            return lambda values: args[0](values)[_index(args[1](values))]
        if fn in (torch.clamp, torch.clip):
            return _clamp(args, node)
        if fn is torch.cat:
            axis: Any = node.kwargs.get("dim", node.args[1] if len(node.args) > 1 else 0)
            if not isinstance(axis, int) or set(node.kwargs) - {"dim"}:
                raise _Unsupported("cat")
            return lambda values: np.concatenate(args[0](values), axis=axis)
        raise _Unsupported(getattr(fn, "__name__", repr(fn)))
    if node.op == "call_method":
        method = str(node.target)
        if method in _METHOD_ACTIVATIONS and len(args) == 1 and not node.kwargs:
            method_activation: Any = _METHOD_ACTIVATIONS[method]
            return lambda values: method_activation(args[0](values))
        if method in ("clamp", "clip"):
            return _clamp(args, node)
        if method == "chunk" and set(node.kwargs) <= {"dim"}:
            dim = node.kwargs.get("dim", node.args[2] if len(node.args) > 2 else 0)
            pieces = node.args[1] if len(node.args) > 1 else None
            if not isinstance(dim, int) or not isinstance(pieces, int):
                raise _Unsupported("chunk")
            return lambda values: _chunk(args[0](values), pieces, dim)
        if method in ("squeeze", "unsqueeze") and len(args) == 2 and not node.kwargs:
            numpy_fn = np.squeeze if method == "squeeze" else np.expand_dims
            return lambda values: numpy_fn(args[0](values), axis=args[1](values))
        raise _Unsupported(f".{method}()")
    raise _Unsupported(node.op)


def _clamp(args: list[Callable[[dict[str, Any]], Any]], node: fx.Node) -> Callable[[dict[str, Any]], Any]:
    """``clamp(x, min, max)`` (positional or keyword bounds, numbers or None) as ``np.clip``."""
    if set(node.kwargs) - {"min", "max"} or len(node.args) > 3:
        raise _Unsupported("clamp")
    low: Any = node.kwargs.get("min", node.args[1] if len(node.args) > 1 else None)
    high: Any = node.kwargs.get("max", node.args[2] if len(node.args) > 2 else None)
    if not all(b is None or isinstance(b, (int, float)) for b in (low, high)):
        raise _Unsupported("clamp")
    return lambda values: np.clip(args[0](values), low, high)


def _chunk(x: np.ndarray, pieces: int, dim: int) -> list[np.ndarray]:
    """``torch.chunk``: pieces of ``ceil(size / pieces)`` along ``dim`` (the last smaller)."""
    size = x.shape[dim]
    step = -(-size // pieces)
    return np.split(x, list(range(step, size, step)), axis=dim)


def _affine(x: np.ndarray, weight: np.ndarray, bias: np.ndarray | None) -> np.ndarray:
    """``F.linear``: ``x @ weight.T + bias``."""
    out = x @ weight.T
    return out if bias is None else out + bias


def _index(key: Any) -> Any:
    return tuple(key) if isinstance(key, list) else key


def numpy_program(model: nn.Module, fn: Callable[[torch.Tensor], torch.Tensor], *,
                  input_size: int) -> NumpyFn | None:
    """``fn`` (a method of ``model`` taking and returning one float32 tensor ``[B, ...]``) as a
    numpy function on views of ``model``'s parameters, or None when it is not one this module
    can run (see the module doc). The program is checked against ``fn`` on random inputs."""
    try:
        graph_module = fx.symbolic_trace(_Wrapper(model, fn))
        modules = dict(graph_module.named_modules())
        params = {name: p.detach().numpy() for name, p in graph_module.named_parameters()}
        params.update({name: b.detach().numpy() for name, b in graph_module.named_buffers()})
        steps: list[tuple[str, Callable[[dict[str, Any]], Any]]] = []
        placeholder = output = None
        for node in graph_module.graph.nodes:
            if node.op == "placeholder":
                if placeholder is not None:
                    return None
                placeholder = node.name
            elif node.op == "output":
                output = node.args[0]
            else:
                steps.append((node.name, _step(node, modules, params)))
        if placeholder is None or not isinstance(output, fx.Node):
            return None
    except Exception:
        return None
    result_name = output.name

    def run(obs: np.ndarray) -> np.ndarray:
        values: dict[str, Any] = {placeholder: obs}
        for name, step in steps:
            values[name] = step(values)
        return np.asarray(values[result_name], dtype=np.float32)

    sample = np.random.default_rng(0).standard_normal((4, input_size)).astype(np.float32)
    try:
        with torch.inference_mode():
            expected = fn(torch.from_numpy(sample)).numpy()
        got = run(sample)
    except Exception:
        return None
    if got.shape != expected.shape or not np.allclose(got, expected, rtol=1e-4, atol=1e-5):
        return None
    return run
