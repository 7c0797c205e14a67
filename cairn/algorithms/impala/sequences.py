"""A recurrent policy's train batch as sequences, for IMPALA's and APPO's learners: PPO's layout
(:mod:`cairn.algorithms.ppo.recurrent`), each sequence run from the state its first row was
acted from."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from cairn.algorithms.ppo.recurrent import bootstrap_values, padded_rows, sequence_starts
from cairn.env_runner.sample_batch import batch_states
from cairn.policy.recurrent_config import recurrent_settings

if TYPE_CHECKING:
    from cairn.policy.policy import Policy

__all__ = ["Sequences"]


class Sequences:
    """``batch`` (of recurrent ``policy``; ``obs``: its observations as a tensor on the
    learner's device) cut into sequences of at most ``max_seq_len`` steps at every piece end
    (episode and fragment ends), each starting from the recorded state of its first row; padded
    steps sit at the end of a sequence and are never read back."""

    def __init__(self, batch: Any, policy: Policy, obs: torch.Tensor) -> None:
        device = obs.device
        max_seq_len = int(recurrent_settings(policy.config["model"])["max_seq_len"])
        self.batch, self.obs = batch, obs
        self.starts, self.lengths = sequence_starts(batch["ends"], max_seq_len)
        rows, mask = padded_rows(self.starts, self.lengths, int(self.lengths.max()))
        self.rows = torch.from_numpy(rows).to(device)
        self.mask = torch.from_numpy(mask).to(device)
        self.states = [torch.from_numpy(s).to(device) for s in batch_states(batch)]

    def __len__(self) -> int:
        return len(self.starts)

    def forward(self, model: torch.nn.Module,
                seqs: np.ndarray | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(action inputs, values, rows)`` of ``model`` over sequences ``seqs`` (None: all, in
        order): one entry per real step, flattened sequence by sequence, and the batch row of
        each (for all sequences in order, rows 0..n-1)."""
        if seqs is None:
            seqs = np.arange(len(self.starts))
        steps = int(self.lengths[seqs].max())
        index = torch.from_numpy(seqs).to(self.obs.device)
        mask = self.mask[index, :steps]
        rows = self.rows[index, :steps]
        first = torch.from_numpy(self.starts[seqs]).to(self.obs.device)
        inputs, values, _ = model(self.obs[rows], [s[first] for s in self.states])
        return inputs[mask], values[mask], rows[mask]

    def logp(self, model: torch.nn.Module, dist: Any, actions: torch.Tensor) -> torch.Tensor:
        """``log pi(a_s|x_s)`` of every row's action (``actions``) under ``model`` (the policy's
        network or APPO's target network) and the policy's distribution ``dist``, no gradient."""
        with torch.no_grad():
            inputs, _, _ = self.forward(model)
            return dist.logp(inputs, actions)

    def values_and_next(self, model: torch.nn.Module) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(action inputs, V(x_s), V(x_(s+1)))`` of every row under ``model``, no gradient:
        the next value inside a piece is the next row's, at a bootstrapped piece end the value
        of ``next_obs`` from the state after the piece's last step, 0 past a termination."""
        with torch.no_grad():
            inputs, values, _ = self.forward(model)
            values_np = values.cpu().numpy()
            next_values = bootstrap_values(model, self.batch, self.obs, self.states, self.starts,
                                           self.lengths, values_np)
        return inputs, values, torch.from_numpy(next_values).to(values.device)
