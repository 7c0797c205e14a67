"""The ``action_mask`` input of an exported masked policy.

A policy whose observations carry an ``"action_mask"`` (:mod:`cairn.policy.action_masking`)
exports a model with two inputs: ``obs``, the observation without the mask (the
:func:`~cairn.policy.observation_path.input_spec` of ``policy.network_observation_space``), and
``action_mask``, float32 ``[batch, mask_size]``. The model masks the logits or Q-values of
illegal actions as the policy does, so its ``action`` is always a legal one. Unmasked policies
keep their single ``obs`` input: every function here gives them nothing.
"""

from __future__ import annotations

import torch
from torch import nn

from cairn.policy.action_masking import (
    ACTION_MASK_KEY,
    MASKED_SCORE,
    MaskedActorCritic,
    MaskedQModel,
    action_sizes,
)
from cairn.policy.export_hook import BATCH, ExportedPolicy, TensorSpec

__all__ = ["ACTION_MASK_INPUT", "action_mask_inputs", "action_mask_examples", "network_name"]

ACTION_MASK_INPUT = "action_mask"
"""The name of a masked policy's second model input."""


def action_mask_inputs(policy: ExportedPolicy) -> tuple[TensorSpec, ...]:
    """``(action_mask spec,)`` for a masked policy, ``()`` for any other."""
    size = int(policy.action_mask_size)
    if not size:
        return ()
    sizes = list(action_sizes(policy.action_space))
    parts = "" if len(sizes) == 1 else f", the sub-actions' masks concatenated (sizes {sizes})"
    return (TensorSpec(
        ACTION_MASK_INPUT, "float32", (BATCH, size),
        f"The observation's {ACTION_MASK_KEY!r} flattened, as float32{parts}: entries > 0.5 are "
        f"legal actions. Illegal actions get the score {MASKED_SCORE:g} (-inf in a row with a legal score at "
        f"or below {MASKED_SCORE:g} + 1024), so the exported action is "
        "legal wherever each row (each sub-action) has a legal action.",
    ),)


def action_mask_examples(policy: ExportedPolicy, batch: int = 2) -> tuple[torch.Tensor, ...]:
    """A valid ``action_mask`` input of ``batch`` rows (every action legal), or ``()``."""
    size = int(policy.action_mask_size)
    return (torch.ones((batch, size), dtype=torch.float32),) if size else ()


def network_name(model: nn.Module) -> str:
    """The class name of the network inside ``model`` (a masked policy's model wraps it), for
    error messages: the user's own class for a custom model."""
    if isinstance(model, (MaskedActorCritic, MaskedQModel)):
        return type(model.net).__name__
    return type(model).__name__
