"""The native PyTorch form: a ``torch.export`` program (``model.pt2``) and its weights.

``model.pt2`` is written by :func:`torch.export.save` and loads with :func:`torch.export.load`
alone: it holds the graph and the weights, and names no cairn class. ``model.safetensors``
holds the same weights and constants under the program's state-dict names, for tools that read
weights without running the program.
"""

from __future__ import annotations

import contextlib
import inspect
import io
import logging
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

from cairn.checkpoint.safetensors_io import new_hasher, write_safetensors
from cairn.errors import ExportError
from cairn.export.conventions import BATCH
from cairn.export.summary import short_reason
from cairn.policy.export_hook import ExportGraph
from cairn.policy.observation_path import may_write_into_inputs

__all__ = ["PROGRAM_FILE", "WEIGHTS_FILE", "trace_program", "program_output_dtypes", "save_program",
           "load_program"]

PROGRAM_FILE = "model.pt2"
WEIGHTS_FILE = "model.safetensors"
# A model torch.export cannot trace makes it log guard details and print the partial graph
# (dozens of lines) on stderr before the exception that says why; the ExportError carries the
# why, and the rest goes to this module's logger at DEBUG level.
_TRACER_LOGGERS = ("torch.fx.experimental.symbolic_shapes", "torch._export", "torch.export",
                   "torch._dynamo")
_log = logging.getLogger(__name__)


@contextlib.contextmanager
def _quiet_tracer() -> Iterator[None]:
    loggers = [logging.getLogger(name) for name in _TRACER_LOGGERS]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.CRITICAL)
    captured = io.StringIO()
    failed = False
    try:
        with contextlib.redirect_stderr(captured), warnings.catch_warnings():
            # nn.LSTM keeps its weights in a list (_flat_weights) that torch.export sees being
            # reassigned; the program reads the registered parameters, so the warning is noise.
            warnings.filterwarnings("ignore", message=r"The tensor attributes .*_flat_weights")
            yield
    except BaseException:
        failed = True
        raise
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            logger.setLevel(level)
        text = captured.getvalue()
        if text and failed:
            _log.debug("torch.export's output before it failed:\n%s", text)
        elif text:
            sys.stderr.write(text)  # a successful trace hides nothing


def _dynamic_batch(graph: ExportGraph, batch: Any) -> Any:
    """Dynamic shapes for ``graph.examples``: the first dimension of each is ``batch``.

    Keyed by the module's own parameter names (it may name its inputs as it likes); a
    ``*inputs`` parameter gets one entry per input it receives.
    """
    try:
        bound = inspect.signature(graph.module.forward).bind(*graph.examples)
    except (TypeError, ValueError) as exc:
        raise ExportError(
            f"The {graph.network_name} export graph has inputs {[s.name for s in graph.inputs]}, "
            f"but its module's forward does not take them positionally ({exc}). Fix the "
            "policy's export_graph(): forward must take one tensor per input, in order."
        ) from exc
    return {name: (tuple({0: batch} for _ in value) if isinstance(value, tuple) else {0: batch})
            for name, value in bound.arguments.items()}


def trace_program(graph: ExportGraph) -> torch.export.ExportedProgram:
    """Trace the policy's export graph with a dynamic batch dimension; raise ExportError,
    naming the network and the reason, if torch.export cannot.

    A module that may write into its inputs (``may_write_into_inputs``: one holding a class
    that is not cairn's or torch.nn's, such as a user's own ``export_graph()`` module built
    without ObservationPath) and does so (``obs.mul_(2)``, which torch.export keeps as a write
    into the caller's tensor) is traced again on copies of the inputs it writes into, as the
    policy acts on copies: the program never writes into the tensors it is called with, and a
    second call on the same array computes what the first did.
    """
    batch = torch.export.Dim(BATCH)
    shapes = _dynamic_batch(graph, batch)
    try:
        with torch.no_grad(), _quiet_tracer():
            program = torch.export.export(graph.module, graph.examples, dynamic_shapes=shapes)
            # A graph with fewer outputs holds its module as selected_from (not a submodule).
            source = getattr(graph.module, "selected_from", graph.module)
            written = _inputs_written(program) if may_write_into_inputs(source) else ()
            if not written:
                return program
            copies = graph.module.register_forward_pre_hook(
                lambda module, inputs: tuple(x.clone() if i in written else x for i, x in enumerate(inputs)))
            try:
                return torch.export.export(graph.module, graph.examples, dynamic_shapes=shapes)
            finally:
                copies.remove()
    except Exception as exc:  # torch.export raises many error types; all mean "not exportable"
        name, reason = graph.network_name, short_reason(exc, lines=1).rstrip(".")
        raise ExportError(
            f"torch.export could not trace the model {name}: {reason}. Make {name}'s forward "
            "traceable: no Python control flow on tensor values (`if x.sum() > 0:`; use torch.where or "
            "torch.cond), no .item(), .tolist() or numpy calls on tensors (use torch "
            "operations); or override the policy's export_graph() with a graph that is."
        ) from exc


def program_output_dtypes(program: torch.export.ExportedProgram) -> list[torch.dtype]:
    """The dtype of each output of ``program``, in order, as traced."""
    (output,) = program.graph.find_nodes(op="output")
    return [node.meta["val"].dtype for node in output.args[0]]


def _inputs_written(program: torch.export.ExportedProgram) -> tuple[int, ...]:
    """The positions of the inputs ``program`` writes into. The traced graph keeps an in-place
    op as it is (its ``user_inputs_to_mutate`` is empty); functionalizing it (no
    decompositions) records each write into an input, through views too."""
    signature = program.run_decompositions({}).graph_signature
    names = list(signature.user_inputs)
    return tuple(sorted({names.index(name) for name in signature.user_inputs_to_mutate.values()}))


def save_program(program: torch.export.ExportedProgram, directory: Path) -> list[str]:
    """Write ``model.pt2`` and ``model.safetensors`` into ``directory``; return their names."""
    directory.mkdir(parents=True, exist_ok=True)
    torch.export.save(program, directory / PROGRAM_FILE)
    arrays = {
        name: tensor.detach().cpu().contiguous().numpy()
        for name, tensor in program.state_dict.items()
    }
    with open(directory / WEIGHTS_FILE, "wb") as f:
        write_safetensors(f, arrays, new_hasher())
    return [PROGRAM_FILE, WEIGHTS_FILE]


def load_program(directory: Path) -> torch.export.ExportedProgram:
    """Read back ``model.pt2`` (as a user would, with plain torch)."""
    return torch.export.load(directory / PROGRAM_FILE)
