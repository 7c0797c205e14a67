"""The model input of an exported policy, and the observation path that reads it.

The model's input (see :func:`input_spec`) is the raw observation, flattened where the space
is not an array, so the graph repeats the policy's numpy preprocessing in torch with the same
constants: flatten / one-hot, then the observation filter's current mean, inverse std and
clip (:class:`ObservationPath`, which every export graph starts with). A masked policy's model
reads ``policy.network_observation_space`` (the observation without its action mask) as
``obs`` and the mask as a second input (:mod:`cairn.policy.action_mask_input`).
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import torch
from torch import nn

from cairn.policy.action_mask_input import action_mask_examples, action_mask_inputs
from cairn.policy.export_hook import BATCH, ExportedPolicy, ExportGraph, TensorSpec
from cairn.policy.filters import MeanStdFilter

__all__ = ["input_spec", "example_input", "filter_description", "ObservationPath", "policy_export_graph",
           "may_write_into_inputs"]


def input_spec(observation_space: gym.Space[Any]) -> TensorSpec:
    """The ``obs`` input for observations from ``observation_space``.

    * Box and MultiBinary: float32 ``[batch, *space.shape]``;
    * Discrete: int64 ``[batch]`` (the raw values, ``start`` included);
    * Dict, Tuple and MultiDiscrete: float32 ``[batch, flatdim]``, each row the
      :func:`gymnasium.spaces.flatten` of one observation.
    """
    if isinstance(observation_space, (gym.spaces.Box, gym.spaces.MultiBinary)):
        return TensorSpec(
            "obs", "float32", (BATCH, *observation_space.shape),
            "Raw observations cast to float32 (no normalisation: the model applies the "
            "policy's observation filter itself).",
        )
    if isinstance(observation_space, gym.spaces.Discrete):
        return TensorSpec(
            "obs", "int64", (BATCH,),
            f"Raw Discrete observations in [{observation_space.start}, "
            f"{observation_space.start + observation_space.n}); the model one-hot encodes them.",
        )
    return TensorSpec(
        "obs", "float32", (BATCH, int(gym.spaces.flatdim(observation_space))),
        "Observations flattened with gymnasium.spaces.flatten(observation_space, obs), as "
        "float32 (Discrete parts one-hot, in the space's key/index order).",
    )


def example_input(policy: ExportedPolicy, batch: int = 2) -> torch.Tensor:
    """A valid ``obs`` input of ``batch`` rows (2+ rows keeps the batch dynamic when traced)."""
    space = policy.network_observation_space
    if isinstance(space, gym.spaces.Discrete):
        return torch.full((batch,), int(space.start), dtype=torch.int64)
    if isinstance(space, (gym.spaces.Box, gym.spaces.MultiBinary)):
        return torch.zeros((batch, *space.shape), dtype=torch.float32)
    return torch.zeros((batch, int(policy.preprocessor.size)), dtype=torch.float32)


def policy_export_graph(policy: ExportedPolicy, module: nn.Module, **fields: Any) -> ExportGraph:
    """The :class:`ExportGraph` of ``module`` (and ``fields``: outputs, reference, ...) whose
    inputs are ``policy``'s raw observations (spec, example, the filter in the metadata) and,
    for a masked policy, its action mask."""
    return ExportGraph(module=module, input=input_spec(policy.network_observation_space),
                       example=example_input(policy),
                       metadata={"observation_filter": filter_description(policy)},
                       extra_inputs=action_mask_inputs(policy), extra_examples=action_mask_examples(policy),
                       **fields)


def filter_description(policy: ExportedPolicy) -> dict[str, Any]:
    """The observation filter as ``signature.json`` describes it."""
    obs_filter = policy.observation_filter
    if isinstance(obs_filter, MeanStdFilter):
        return {
            "name": obs_filter.name,
            "count": int(obs_filter.count),
            "clip": float(obs_filter.clip),
            "epsilon": float(obs_filter.epsilon),
            "note": "applied inside the model: clip((x - mean) / (std + epsilon), -clip, clip) "
                    "with the statistics at export time (obs_mean, obs_inv_std in the weights)",
        }
    return {"name": obs_filter.name}


def may_write_into_inputs(network: nn.Module | None) -> bool:
    """Whether the export module must give ``network`` copies of its inputs.

    torch.export keeps a network's writes into its inputs (``obs.mul_(2)``, legal torch) as
    writes into the tensors the caller passes to the program, whereas the policy always acts on
    copies. cairn's own networks (every module inside them a cairn or torch.nn class) never
    write into their inputs (tests/export/test_program_input_writes.py checks the traced
    programs' record of input writes), so they read the inputs as given; a user's network, or
    an unknown one (None), gets copies.
    """
    if network is None or not type(network).__module__.startswith("cairn."):
        return True
    return not all(type(m).__module__.startswith(("cairn.", "torch.nn.")) for m in network.modules())


class ObservationPath(nn.Module):
    """``forward(obs) -> float32 [batch, obs_size]``: :meth:`cairn.Policy.process_observations`
    in torch (flatten or one-hot, then the observation filter with its current constants).

    A masked policy's path is ``forward(obs, action_mask) -> [features | action_mask]``, the rows
    its (masking) model reads, as ``process_observations`` gives them.

    The rows are never the caller's ``obs`` memory when ``network`` (the network that reads
    them) may write into its inputs (:func:`may_write_into_inputs`): a float32, unfiltered,
    unmasked ``obs`` is then cloned (every other path computes new rows).
    """

    obs_mean: torch.Tensor
    obs_inv_std: torch.Tensor

    def __init__(self, policy: ExportedPolicy, network: nn.Module | None = None) -> None:
        super().__init__()
        self.copy_input = may_write_into_inputs(network)
        space = policy.network_observation_space
        self.obs_size = int(policy.preprocessor.size)
        self.obs_discrete = isinstance(space, gym.spaces.Discrete)
        self.obs_start = int(space.start) if isinstance(space, gym.spaces.Discrete) else 0
        # A [batch, obs_size] float32 input needs no reshape: leave that node out of the graph.
        shape = (tuple(space.shape or ()) if isinstance(space, (gym.spaces.Box, gym.spaces.MultiBinary))
                 else None)
        self.obs_flat = shape is None or shape == (self.obs_size,)
        # A Box of shape () gives obs [batch]: one column, which flatten(1) cannot make.
        self.obs_scalar = shape == ()
        obs_filter = policy.observation_filter
        self.filtered = isinstance(obs_filter, MeanStdFilter)
        self.clip = 0.0
        if isinstance(obs_filter, MeanStdFilter):
            # The very arrays MeanStdFilter.apply uses, so that the results agree bit for bit.
            mean, inv_std = obs_filter.constants()
            self.register_buffer("obs_mean", torch.from_numpy(mean.copy()))
            self.register_buffer("obs_inv_std", torch.from_numpy(inv_std.copy()))
            self.clip = float(obs_filter.clip)

    def forward(self, obs: torch.Tensor, action_mask: torch.Tensor | None = None) -> torch.Tensor:
        x = self.features(obs)
        if action_mask is not None:
            return torch.cat([x, action_mask], dim=1)  # new rows: neither input's memory
        if self.copy_input and not (self.obs_discrete or self.filtered) and obs.dtype == torch.float32:
            return x.clone()  # x is obs, or a view of it (flatten, unsqueeze)
        return x

    def features(self, obs: torch.Tensor) -> torch.Tensor:
        """The network input of ``obs``: preprocessed and filtered."""
        if self.obs_discrete:
            # Comparing with arange one-hot encodes without one_hot's data-dependent checks.
            categories = torch.arange(self.obs_size, dtype=obs.dtype, device=obs.device)
            shifted = obs - self.obs_start if self.obs_start else obs
            x = (shifted.unsqueeze(-1) == categories).to(torch.float32)
        else:
            x = obs if obs.dtype == torch.float32 else obs.to(torch.float32)
            if self.obs_scalar:
                x = x.unsqueeze(1)
            elif not self.obs_flat:
                x = x.flatten(1)
        if self.filtered:
            x = torch.clamp((x - self.obs_mean) * self.obs_inv_std, -self.clip, self.clip)
        return x
