"""How a learn function shares its work: alone (:data:`LOCAL_SYNC`) or as one rank of a
``torch.distributed`` group (:class:`DistributedGradientSync`).

A learn function (PPO's, DQN's, SAC's) computes everything that is not per-row (advantages,
targets, the minibatch's advantage statistics) over the whole minibatch, takes the rows of
``sync.shard(n)``, scales its loss by ``shard_rows / n`` (the losses are means over rows, so the
ranks' scaled gradients sum to the full minibatch's gradient), steps each
optimizer group with :meth:`GradientSync.optimizer_step` (backward, all-reduce, clip, step). Alone, the
shard is the whole minibatch, the scale is exactly 1 and the all-reduce does nothing: the
same lines run in the driver and in every learner actor.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from cairn.errors import NonFiniteLossError
from cairn.policy.torch_utils import clip_grad_norm, global_grad_norm, non_finite_grads

__all__ = ["GradientSync", "DistributedGradientSync", "LOCAL_SYNC", "LearnOutput", "ShardedSample",
           "join_outputs", "shard_bounds"]


@dataclass
class LearnOutput:
    """What a learn function returns: ``stats`` (a dict, or a list), optionally ``rows``, a
    per-row array of this rank's shard (TD errors for prioritized replay), which the learner
    group joins in rank order into the whole minibatch's, and ``summed``: the keys of ``stats``
    (a list's indices) that hold this rank's part of a mean over rows (each minibatch's mean
    over its shard times the shard's share of the minibatch's rows), which the learner group
    sums over the ranks into the whole's (:func:`join_outputs`). A learner alone has every
    row, so its parts are the whole. Every other stat is reported as rank 0 has it."""

    stats: Any
    rows: np.ndarray | None = None
    summed: Sequence[Any] = ()


def join_outputs(outputs: Sequence[LearnOutput]) -> LearnOutput:
    """The ranks' ``outputs`` (in rank order) as one learner's: the ``rows`` joined in rank
    order, rank 0's ``stats`` with each of its ``summed`` keys the sum of the ranks' parts (a
    rank whose shards were all empty has none: its part is 0)."""
    rows = [o.rows for o in outputs if o.rows is not None]
    first = outputs[0]
    stats = first.stats
    if first.summed:
        stats = dict(stats) if isinstance(stats, Mapping) else list(stats)
        for key in first.summed:
            stats[key] = sum(float(o.stats[key]) for o in outputs if _has(o.stats, key))
    return LearnOutput(stats, np.concatenate(rows) if rows else None)


def _has(stats: Any, key: Any) -> bool:
    return key in stats if isinstance(stats, Mapping) else 0 <= key < len(stats)


def shard_bounds(n: int, rank: int, world_size: int) -> tuple[int, int]:
    """``[start, stop)`` of rank ``rank``'s contiguous share of ``n`` rows (sizes differ by at
    most one; the first ranks take the extra rows, so rank 0's share is empty only when
    ``n == 0``)."""
    base, extra = divmod(n, world_size)
    start = rank * base + min(rank, extra)
    return start, start + base + (1 if rank < extra else 0)


class ShardedSample:
    """This learner's shard of a replayed minibatch ``sample`` (DQN's, SAC's, TD3's learn
    functions): ``n`` rows in all, ``rows`` the shard's slice, ``share`` its share of the ``n``
    (the weight of its losses), ``empty`` whether it has none; calling it gives a column's rows
    as a tensor on ``device``."""

    def __init__(self, sync: GradientSync, sample: Mapping[str, np.ndarray], device: torch.device) -> None:
        self.sample, self.device = sample, device
        self.n = len(sample["rewards"])
        self.rows = sync.shard(self.n)
        self.share = (self.rows.stop - self.rows.start) / self.n
        self.empty = self.rows.stop == self.rows.start

    def __call__(self, name: str) -> torch.Tensor:
        """Column ``name``'s rows of the shard, as a tensor on the device."""
        return torch.from_numpy(np.ascontiguousarray(self.sample[name][self.rows])).to(self.device)

    def weights(self) -> torch.Tensor | None:
        """The shard's importance weights (prioritized replay's ``weights``), None without them."""
        return self("weights") if self.sample.get("weights") is not None else None

    def discounts(self, gamma: float) -> torch.Tensor:
        """``gamma ** n_steps`` of each of the shard's rows (float32): its n-step target's discount."""
        return torch.from_numpy(gamma ** self.sample["n_steps"][self.rows].astype(np.float32)).to(self.device)


class GradientSync:
    """A learner alone: its shard is every row and there is nothing to reduce."""

    rank = 0
    world_size = 1

    def shard(self, n: int) -> slice:
        """This learner's rows of a minibatch of ``n`` rows."""
        start, stop = shard_bounds(n, self.rank, self.world_size)
        return slice(start, stop)

    def all_reduce_grads(self, params: Sequence[torch.nn.Parameter]) -> None:
        """Sum the gradients of ``params`` over the learners (alone: nothing to do)."""

    def broadcast_buffers(self, networks: Sequence[torch.nn.Module]) -> None:
        """Give every learner rank 0's buffers of ``networks`` (alone: nothing to do)."""

    def optimizer_step(self, optimizer: torch.optim.Optimizer, loss: torch.Tensor | None,
                       params: Sequence[torch.nn.Parameter], *, grad_clip: float | None,
                       also_reduce: Sequence[torch.nn.Parameter] = ()) -> torch.Tensor | None:
        """One step of ``optimizer`` on ``params`` (one optimizer group, or a whole model).

        Clears the gradients of every parameter ``optimizer`` holds (its step would apply
        another group's stale ones) and of ``params``, backpropagates ``loss`` (this learner's
        share of the minibatch's loss; None when its shard is empty, which still joins the
        all-reduce), sums the gradients of ``params`` and ``also_reduce`` over the learners,
        clips those of ``params`` to the global norm ``grad_clip`` (None: no clipping), steps.
        Returns the norm before clipping (None without ``grad_clip``).

        A loss that is not finite on any learner, or a gradient that is not finite (its global
        norm over ``params`` and ``also_reduce``, after the all-reduce), raises
        :class:`~cairn.errors.NonFiniteLossError` on every learner before the optimizer steps:
        the weights and optimizer state stay those before this step (a NaN gradient would make
        every weight NaN, silently; an infinite one Adam's state). The check reads the loss as one
        float, and the gradients' global norm as one more: the norm clipping computes anyway,
        else one fused reduction. Every rank reaches the same decision: the loss flags travel
        with the gradients' all-reduce, and every rank checks the same summed gradients.
        """
        for group in optimizer.param_groups:
            for param in group["params"]:
                param.grad = None
        for param in params:
            param.grad = None
        loss_value = 0.0
        if loss is not None:
            loss_value = float(loss.detach())
            loss.backward()
        reduced = [*params, *also_reduce]
        if self.reduce_and_check(reduced, finite=math.isfinite(loss_value)):
            grad_norm = None if grad_clip is None else clip_grad_norm(params, grad_clip)
            # The norm of what is stepped: clipping's norm covers ``params``, not ``also_reduce``.
            unchecked = reduced if grad_norm is None else also_reduce
            norm = 0.0 if grad_norm is None else float(grad_norm)
            if unchecked:
                norm = math.hypot(norm, float(global_grad_norm(unchecked)))
            if math.isfinite(norm):
                optimizer.step()
                return grad_norm
            bad = NonFiniteLossError("gradient norm", norm, parameters=non_finite_grads(reduced))
        elif not math.isfinite(loss_value):
            bad = NonFiniteLossError("loss", loss_value)
        else:  # another learner's loss: every rank raises, none steps
            bad = NonFiniteLossError("loss on another learner", float("nan"))
        for param in [*reduced, *(p for group in optimizer.param_groups for p in group["params"])]:
            param.grad = None  # no NaN gradient left behind for anyone to step
        raise bad

    def reduce_and_check(self, params: Sequence[torch.nn.Parameter], *, finite: bool) -> bool:
        """:meth:`all_reduce_grads` of ``params``, and whether every learner's ``finite`` flag
        (its loss was finite) is True (alone: ``finite`` itself)."""
        self.all_reduce_grads(params)
        return finite


#: The sync of a learner that is alone (``num_learners=0``).
LOCAL_SYNC = GradientSync()


class DistributedGradientSync(GradientSync):
    """One rank of an initialised ``torch.distributed`` process group.

    The gradients of all ``params`` travel in one flat buffer per call, with one flag per
    parameter saying whether it had a gradient: a parameter no rank's loss reached keeps
    ``grad=None`` (so Adam skips it, as it would alone); one that some rank's loss reached gets
    the sum, zeros standing in for ranks whose shard was empty.
    """

    def __init__(self, rank: int, world_size: int) -> None:
        self.rank = rank
        self.world_size = world_size

    def broadcast_buffers(self, networks: Sequence[torch.nn.Module]) -> None:
        """Overwrite this rank's buffers of ``networks`` (a user's ``BatchNorm`` running
        statistics) with rank 0's, as torch's DistributedDataParallel does: each rank's
        training-mode forward moved them by its own shard, and rank 0's are the ones that come
        back to the driver. Without it a rank's eval-mode targets (DQN's, V-trace's) would read
        statistics the driver never sees. cairn's own networks hold no buffer: nothing travels."""
        import torch.distributed as dist

        for network in networks:
            for buffer in network.buffers():
                dist.broadcast(buffer.data, src=0)

    def all_reduce_grads(self, params: Sequence[torch.nn.Parameter]) -> None:
        self.reduce_and_check(params, finite=True)

    def reduce_and_check(self, params: Sequence[torch.nn.Parameter], *, finite: bool) -> bool:
        """The gradients' all-reduce, carrying one more flag: how many ranks' losses were not
        finite (so that every rank raises, or none: a rank raising alone would leave its peers
        waiting in the next collective)."""
        import torch.distributed as dist

        if not params:
            return finite
        device = params[0].device
        parts = [p.grad.reshape(-1) if p.grad is not None else torch.zeros(p.numel(), device=device)
                 for p in params]
        flags = torch.tensor([0.0 if p.grad is None else 1.0 for p in params] + [0.0 if finite else 1.0],
                             device=device)
        flat = torch.cat([*parts, flags])
        dist.all_reduce(flat, op=dist.ReduceOp.SUM)
        offset = 0
        reached = flat[-len(params) - 1:-1]
        for i, param in enumerate(params):
            size = param.numel()
            if reached[i] > 0:
                param.grad = flat[offset:offset + size].view_as(param).clone()
            offset += size
        return bool(flat[-1] == 0)
