"""A batch of a recurrent policy cut into sequences (:class:`Sequences`), and the minibatches
PPO's, IMPALA's and APPO's learners walk (:func:`minibatches`: rows, or whole sequences); how the
recurrent learners use them is in :mod:`cairn.algorithms.ppo.recurrent`."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import torch
from torch import nn

from cairn.env_runner.sample_batch import SampleBatch, batch_states
from cairn.learners import GradientSync
from cairn.policy.distributions import ActionDistribution
from cairn.policy.policy import Policy
from cairn.policy.recurrent import is_recurrent
from cairn.policy.recurrent_config import recurrent_settings

__all__ = ["Sequences", "sequence_starts", "padded_rows", "bootstrap_values", "sequence_count",
           "epoch_permutations", "minibatches", "Minibatch"]


def sequence_starts(ends: np.ndarray, max_seq_len: int) -> tuple[np.ndarray, np.ndarray]:
    """``(starts, lengths)`` of the sequences that cut a batch's rows: a new sequence after each
    piece end (``ends``) and every ``max_seq_len`` steps within a piece.

    >>> sequence_starts(np.array([0, 0, 0, 1, 0, 1], bool), 2)
    (array([0, 2, 4]), array([2, 2, 2]))
    """
    n = len(ends)
    piece_start = np.concatenate([[0], np.flatnonzero(ends[:-1]) + 1])
    piece_id = np.zeros(n, dtype=np.int64)
    piece_id[piece_start[1:]] = 1
    piece_id = np.cumsum(piece_id)
    offset = np.arange(n) - piece_start[piece_id]
    starts = np.flatnonzero(offset % max_seq_len == 0)
    lengths = np.diff(np.concatenate([starts, [n]]))
    return starts, lengths


def padded_rows(starts: np.ndarray, lengths: np.ndarray, steps: int) -> tuple[np.ndarray, np.ndarray]:
    """``(rows [S, steps], mask [S, steps])``: the batch row of each step of each sequence, and
    which steps are real; padded steps point at the sequence's first row."""
    offsets = np.arange(steps)
    mask = offsets[None, :] < lengths[:, None]
    rows = np.where(mask, starts[:, None] + offsets[None, :], starts[:, None])
    return rows, mask


def bootstrap_values(model: nn.Module, batch: SampleBatch, obs: torch.Tensor, states: list[torch.Tensor],
                      starts: np.ndarray, lengths: np.ndarray, values: np.ndarray) -> np.ndarray:
    """``V(next_obs)`` of each row for GAE: the next row's value inside a piece, 0 at terminal
    steps, and at a truncated episode or fragment end the value of ``next_obs`` from the state
    after the piece's last step (its sequence run again with ``next_obs`` appended). The done
    columns are read as bools (:func:`cairn.algorithms.ppo.learn.next_values` says why)."""
    ends, terminateds = np.asarray(batch["ends"], dtype=bool), np.asarray(batch["terminateds"], dtype=bool)
    next_values = np.zeros_like(values)
    next_values[:-1] = values[1:]
    next_values[ends] = 0.0
    last_rows = starts + lengths - 1
    boot = np.flatnonzero(ends[last_rows] & ~terminateds[last_rows])  # sequences to bootstrap
    if boot.size:
        device = obs.device
        seq_len = int(lengths[boot].max()) + 1
        rows, _ = padded_rows(starts[boot], lengths[boot], seq_len)
        seq_obs = obs[torch.from_numpy(rows).to(device)].clone()
        at = (torch.arange(len(boot), device=device), torch.from_numpy(lengths[boot]).to(device))
        seq_obs[at] = torch.from_numpy(batch["next_obs"][last_rows[boot]]).to(device)
        _, seq_values, _ = model(seq_obs, [s[torch.from_numpy(starts[boot]).to(device)] for s in states])
        next_values[last_rows[boot]] = seq_values[at].cpu().numpy()
    return next_values


class Sequences:
    """``batch`` (of recurrent ``policy``; ``obs``: its observations as a tensor on the
    learner's device) cut into sequences of at most ``max_seq_len`` steps at every piece end
    (episode and fragment ends), each starting from the recorded state of its first row (or
    from the model's initial state, with its gradient, where it opens an episode); padded
    steps sit at the end of a sequence and are never read back. PPO's learner and IMPALA's and
    APPO's (:mod:`cairn.algorithms.impala.recurrent`) run their networks through it."""

    def __init__(self, batch: SampleBatch, policy: Policy, obs: torch.Tensor) -> None:
        device = obs.device
        max_seq_len = int(recurrent_settings(policy.config["model"])["max_seq_len"])
        self.batch, self.obs = batch, obs
        self.starts, self.lengths = sequence_starts(batch["ends"], max_seq_len)
        rows, mask = padded_rows(self.starts, self.lengths, int(self.lengths.max()))
        self.rows = torch.from_numpy(rows).to(device)
        self.mask = torch.from_numpy(mask).to(device)
        self.states = [torch.from_numpy(s).to(device) for s in batch_states(batch)]
        # The sequences that open an episode (``firsts``; a batch without the column: none). They
        # run from the model's initial state as it is now, not the one recorded with their first
        # row: the same numbers for a constant initial state (zeros), and for one computed from
        # the model's weights (a learned ``h0``) the gradient reaches those weights, which a
        # recorded copy would cut off (they would never learn).
        firsts = batch.get("firsts")
        fresh = np.zeros(len(self.starts), bool) if firsts is None else np.asarray(firsts, bool)[self.starts]
        self.fresh = torch.from_numpy(fresh).to(device)

    def __len__(self) -> int:
        return len(self.starts)

    def forward(self, model: nn.Module,
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
        inputs, values, _ = model(self.obs[rows], self.start_states(model, seqs))
        return inputs[mask], values[mask], rows[mask]

    def start_states(self, model: nn.Module, seqs: np.ndarray) -> list[torch.Tensor]:
        """The state each of sequences ``seqs`` starts from under ``model``: the recorded state
        of its first row, or for a sequence that opens an episode the model's initial state now
        (with its gradient)."""
        device = self.obs.device
        index = torch.from_numpy(seqs).to(device)
        recorded = [s[torch.from_numpy(self.starts[seqs]).to(device)] for s in self.states]
        fresh = self.fresh[index]
        if not bool(fresh.any()):
            return recorded
        initial = model.get_initial_state()  # type: ignore[operator]  # a RecurrentActorCriticModel's
        return [torch.where(fresh.reshape(-1, *[1] * (s.dim() - 1)), i.to(device=device, dtype=s.dtype), s)
                for s, i in zip(recorded, initial, strict=True)]

    def logp(self, model: nn.Module, dist: ActionDistribution, actions: torch.Tensor) -> torch.Tensor:
        """``log pi(a_s|x_s)`` of every row's action (``actions``) under ``model`` (the policy's
        network or APPO's target network) and the policy's distribution ``dist``, no gradient."""
        with torch.no_grad():
            inputs, _, _ = self.forward(model)
            return dist.logp(inputs, actions)

    def values_and_next(self, model: nn.Module) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(action inputs, V(x_s), V(x_(s+1)))`` of every row under ``model``, no gradient:
        the next value inside a piece is the next row's, at a bootstrapped piece end the value
        of ``next_obs`` from the state after the piece's last step, 0 past a termination."""
        with torch.no_grad():
            inputs, values, _ = self.forward(model)
            values_np = values.cpu().numpy()
            states = [s.clone() for s in self.states]  # each sequence's first row: its start state
            for s, start in zip(states, self.start_states(model, np.arange(len(self.starts))), strict=True):
                s[torch.from_numpy(self.starts).to(s.device)] = start
            next_values = bootstrap_values(model, self.batch, self.obs, states, self.starts,
                                           self.lengths, values_np)
        return inputs, values, torch.from_numpy(next_values).to(values.device)

    def minibatches(self, perm: np.ndarray, size: int) -> Iterator[np.ndarray]:
        """The sequences of each minibatch of an epoch whose sequence order is ``perm``: about
        ``size`` env steps each, a sequence joining the minibatch its first step falls in (so
        ``size`` need not be a multiple of ``max_seq_len``)."""
        group = (np.cumsum(self.lengths[perm]) - self.lengths[perm]) // size
        for g in range(int(group[-1]) + 1):
            seqs = perm[group == g]
            if len(seqs):  # a sequence longer than size fills more than one group
                yield seqs


def sequence_count(batch: SampleBatch, policy: Policy) -> int:
    """How many sequences the learner (:func:`~cairn.algorithms.ppo.learn.ppo_learn`) cuts
    ``batch`` of ``policy`` into (the algorithm draws a permutation of them per epoch)."""
    max_seq_len = int(recurrent_settings(policy.config["model"])["max_seq_len"])
    return len(sequence_starts(batch["ends"], max_seq_len)[0])


def epoch_permutations(rng: np.random.Generator, batch: SampleBatch, policy: Policy,
                       num_epochs: int) -> list[np.ndarray]:
    """The order of each of ``num_epochs`` epochs over ``batch`` (of its rows; of a recurrent
    policy's sequences, :func:`sequence_count`), drawn by the algorithm from its generator
    ``rng`` so that every learner (one, or each DDP rank) walks the same minibatches."""
    n = sequence_count(batch, policy) if is_recurrent(policy) else len(batch)
    return [rng.permutation(n) for _ in range(num_epochs)]


#: A minibatch: its batch rows (the whole minibatch's), this learner's rows of them, and the
#: network's action inputs and values of this learner's rows (None for an empty shard).
Minibatch = tuple[torch.Tensor, torch.Tensor, "tuple[torch.Tensor, torch.Tensor] | None"]


def minibatches(model: nn.Module, obs: torch.Tensor, seqs: Sequences | None, perm: np.ndarray, size: int,
                sync: GradientSync) -> Iterator[Minibatch]:
    """The minibatches of an epoch whose order is ``perm`` (of the batch's rows, or of the
    sequences ``seqs``), each a :data:`Minibatch` whose network outputs (of the rows of
    ``obs``) are computed as the minibatch is reached: PPO's, IMPALA's and APPO's learners walk
    them. Feed-forward: ``size`` rows each, this learner's shard of them (``sync``); recurrent:
    whole sequences of about ``size`` env steps, a sequence joining the minibatch its first step
    falls in, padded steps left out (:meth:`Sequences.minibatches`), all of them this
    learner's (recurrent policies learn in one learner)."""
    if seqs is not None:
        for part in seqs.minibatches(perm, size):
            inputs, values, rows = seqs.forward(model, part)
            yield rows, rows, (inputs, values)
        return
    order = torch.from_numpy(perm).to(obs.device)
    for start in range(0, len(order), size):
        idx = order[start:start + size]
        rows = idx[sync.shard(len(idx))]
        yield idx, rows, (model(obs[rows]) if len(rows) else None)

