"""The native PyTorch form: a ``torch.export`` program (``model.pt2``) and its weights.

``model.pt2`` is written by :func:`torch.export.save` and loads with :func:`torch.export.load`
alone: it holds the graph and the weights, and names no cairn class. ``model.safetensors``
holds the same weights and constants under the program's state-dict names, for tools that read
weights without running the program.
"""

from __future__ import annotations

from pathlib import Path

import torch

from cairn.checkpoint.safetensors_io import new_hasher, write_safetensors
from cairn.errors import ExportError
from cairn.export.conventions import BATCH
from cairn.export.summary import short_reason
from cairn.policy.export_hook import ExportGraph

__all__ = ["PROGRAM_FILE", "WEIGHTS_FILE", "trace_program", "save_program", "load_program"]

PROGRAM_FILE = "model.pt2"
WEIGHTS_FILE = "model.safetensors"


def trace_program(graph: ExportGraph) -> torch.export.ExportedProgram:
    """Trace the policy's export graph with a dynamic batch dimension; raise ExportError if
    torch.export cannot."""
    batch = torch.export.Dim(BATCH)
    try:
        with torch.no_grad():
            # Positional dynamic shapes: the module's forward may name its input as it likes.
            return torch.export.export(graph.module, (graph.example,), dynamic_shapes=({0: batch},))
    except Exception as exc:  # torch.export raises many error types; all mean "not exportable"
        raise ExportError(
            f"torch.export could not trace the model {graph.network_name}: "
            f"{short_reason(exc)}. Exported models need a graph without data-dependent Python "
            "control flow (use torch.where/torch.cond instead of `if tensor:`)."
        ) from exc


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
