"""PPO's learn function: minibatch epochs over one train batch, run by a learner alone or as
one rank of the DDP learners (:mod:`cairn.learners.sync` says how the work is shared)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from torch import nn

from cairn.algorithms.ppo.config import PPOConfig
from cairn.algorithms.ppo.loss import compute_gae, ppo_loss
from cairn.algorithms.ppo.sequences import Sequences, minibatches
from cairn.env_runner.sample_batch import ACTION_LOGP, SampleBatch
from cairn.errors import ConfigError
from cairn.learners import GradientSync, LearnOutput
from cairn.numpy_acting import evaluating
from cairn.policy.policy import Policy
from cairn.policy.recurrent import is_recurrent

__all__ = ["ppo_learn", "behaviour_logp", "next_values", "update_output", "update_stats"]


def ppo_learn(config: PPOConfig, policy: Policy, sync: GradientSync, *, batch: SampleBatch,
              rewards: np.ndarray, permutations: Sequence[np.ndarray]) -> LearnOutput:
    """One PPO update of ``policy`` on ``batch`` (``rewards``: the learner's, maybe normalised):
    one epoch per array of ``permutations`` (the order of that epoch, drawn by the algorithm: of
    the batch's rows, or of a recurrent policy's sequences), minibatches of ``minibatch_size``
    (:func:`~cairn.algorithms.ppo.sequences.minibatches`).

    The ratio's denominator is the batch's ``action_logp`` column (:func:`behaviour_logp`): the
    log-probability each action had under the weights that acted it. Each learner computes
    values and GAE over the whole batch and the
    advantage statistics over the whole minibatch, then takes the loss of its shard only,
    scaled by its share of the minibatch's rows, so that the all-reduced gradients are the
    whole minibatch's (exact alone; up to float reassociation across learners). The batch
    moves to the policy's device once per call. The loss statistics are this learner's parts
    of the whole minibatches' (:func:`update_output`).

    A recurrent policy (:mod:`cairn.algorithms.ppo.recurrent`, docs/ppo.md) learns over its
    batch's sequences (:class:`~cairn.algorithms.ppo.sequences.Sequences`: the values and GAE's
    bootstrap values from the network run over them) in one learner, wherever that runs
    (``config.learners``: in the driver, or on its device); DDP learners (``sync`` of several
    ranks) are refused by the config, and here. Its statistics add ``num_sequences``.
    """
    model, dist = policy.model, policy.dist
    device = next(model.parameters()).device
    obs = torch.from_numpy(batch["obs"]).to(device)
    actions = torch.from_numpy(batch["actions"]).to(device)
    seqs = None
    if is_recurrent(policy):
        if sync.world_size > 1:
            raise ConfigError("recurrent policies learn in one learner: config.learners(num_learners=0).")
        seqs = Sequences(batch, policy, obs)
    old_logp = behaviour_logp(batch, policy, device)  # as the rows were acted (docs/ppo.md)
    with torch.no_grad(), evaluating(model):  # GAE's values: targets, as a deployed model gives them
        if seqs is not None:
            _, values, next_values_t = seqs.values_and_next(model)
            values_np, next_vals = values.cpu().numpy(), next_values_t.cpu().numpy()
        else:
            # Its own copy: a model may write into its input (``obs *= scale``), and ``obs`` is
            # the rows every minibatch reads (on a CPU learner, the sample batch's own memory).
            _, values = model(obs.clone())
            values_np = values.cpu().numpy()
            next_vals = next_values(model, batch, values_np)
    advantages = compute_gae(
        rewards, values_np, next_vals, batch["terminateds"],
        batch["ends"], gamma=config.gamma, lambda_=config.lambda_,
    )
    adv_t = torch.from_numpy(advantages).to(device)
    returns = adv_t + values
    size = min(config.minibatch_size, len(batch))
    params = list(model.parameters())
    history: list[torch.Tensor] = []
    shares: list[float] = []  # this learner's share of each history row's minibatch
    num_minibatches = 0
    stats: dict[str, torch.Tensor] = {}
    for perm in permutations:
        for idx, rows, outputs in minibatches(model, obs, seqs, perm, size, sync):
            num_minibatches += 1
            mb_adv = adv_t[idx]
            if config.normalize_advantages and len(idx) > 1:
                # Normalisation makes no sense for a single sample (std undefined).
                mb_adv = (mb_adv - mb_adv.mean()) / (mb_adv.std() + 1e-8)
            mb_adv = mb_adv[sync.shard(len(idx))]  # this learner's rows
            loss = None
            if outputs is not None:
                mb_inputs, mb_values = outputs
                loss, stats = ppo_loss(
                    dist.logp(mb_inputs, actions[rows]), old_logp[rows], mb_adv, mb_values,
                    values[rows], returns[rows], dist.entropy(mb_inputs),
                    clip_param=config.clip_param, vf_coeff=config.vf_coeff,
                    entropy_coeff=config.entropy_coeff, vf_clip_param=config.vf_clip_param,
                )
                # The loss is a mean over rows: weighted by this shard's share, the learners'
                # gradients sum to the minibatch's (alone the weight is exactly 1).
                loss = loss * (len(rows) / len(idx))
            grad_norm = sync.optimizer_step(policy.optimizer, loss, params, grad_clip=config.grad_clip)
            if grad_norm is not None and stats:
                stats["grad_norm"] = grad_norm
            policy.num_grad_updates += 1
            if len(rows):
                history.append(torch.stack(list(stats.values())))
                shares.append(len(rows) / len(idx))
    output = update_output(list(stats), history, returns, values_np, policy, shares, num_minibatches)
    if seqs is not None:  # one learner (no shards): its statistics are the whole's
        return LearnOutput({**output.stats, "num_sequences": float(len(seqs))})
    return output


def behaviour_logp(batch: SampleBatch, policy: Policy, device: torch.device) -> torch.Tensor:
    """The batch's ``action_logp`` column on ``device``: each action's log-probability under the
    weights that acted it, recorded by the env runner (docs/ppo.md, "Behaviour log-probabilities").

    Not recomputed here: a row acted by older weights (a turn-based move carried over from the
    previous iteration) must keep the probability it was drawn with. A batch without the
    column (a policy class whose ``wants_action_logp`` is False) is refused rather than
    treated as on-policy."""
    if ACTION_LOGP not in batch:
        raise ConfigError(
            f"PPO's batch for a {type(policy).__name__} has no {ACTION_LOGP!r} column (columns: "
            f"{sorted(batch)}): PPO's ratio needs each action's behaviour log-probability. Fix: train "
            f"PPO with a policy class whose wants_action_logp is True (cairn.Policy's default), so "
            "that env runners record it.")
    return torch.from_numpy(np.asarray(batch[ACTION_LOGP], dtype=np.float32)).to(device)


def update_stats(names: Sequence[str], history: Sequence[torch.Tensor], returns: torch.Tensor,
                 values: np.ndarray, policy: Policy) -> dict[str, float]:
    """A PPO update's statistics: the loss statistics ``names`` averaged over the minibatches'
    ``history`` (one stacked row each), the value function's explained variance of the
    ``returns`` (``values``: its predictions before the update), and the policy's
    ``num_grad_updates``."""
    out: dict[str, float] = {}
    if history:
        out = dict(zip(names, torch.stack(list(history)).mean(dim=0).tolist()))
    returns_np = returns.cpu().numpy()
    var_y = float(np.var(returns_np))
    out["vf_explained_var"] = float("nan") if var_y == 0 else 1.0 - float(np.var(returns_np - values)) / var_y
    out["num_grad_updates"] = float(policy.num_grad_updates)
    return out


#: Statistics that are not a mean over the minibatch's rows: the gradient norm (every learner's,
#: computed after the all-reduce).
GLOBAL_STATS = frozenset({"grad_norm"})


def update_output(names: Sequence[str], history: Sequence[torch.Tensor], returns: torch.Tensor,
                  values: np.ndarray, policy: Policy, shares: Sequence[float],
                  num_minibatches: int) -> LearnOutput:
    """:func:`update_stats` of one learner of a group: the minibatches' loss statistics ``names``
    of its ``history`` rows (of its non-empty shards) weighted by its ``shares`` of their
    minibatches' rows, summed and divided by all ``num_minibatches``, so that the learners'
    parts sum to the mean over the minibatches of the whole minibatches' statistics (the
    learner group sums them: :func:`cairn.learners.sync.join_outputs`). Alone every share is 1
    and this is :func:`update_stats` exactly. ``grad_norm`` is every learner's already: its
    mean is not weighted (rank 0's shards are never empty, so its mean is over every
    minibatch)."""
    weighted = list(history)
    if history:
        weights = torch.tensor([[1.0 if name in GLOBAL_STATS else share for name in names]
                                for share in shares], dtype=history[0].dtype, device=history[0].device)
        weighted = list(torch.stack(list(history)) * weights)
    out = update_stats(names, weighted, returns, values, policy)
    scale = len(history) / num_minibatches  # 1 unless some of this learner's shards were empty
    summed = [name for name in names if name not in GLOBAL_STATS]
    if scale != 1.0:
        for name in summed:
            out[name] *= scale
    return LearnOutput(out, summed=summed)


def next_values(model: nn.Module, batch: SampleBatch, values: np.ndarray) -> np.ndarray:
    """``V(next_obs)`` of each row, for GAE.

    Inside a piece of a trajectory a row's next observation is the next row's observation, so
    its value is already in ``values``; only the piece ends that bootstrap (truncated episodes,
    fragment ends) need a forward pass. For a CNN that saves a pass over the whole batch.
    Terminal rows get 0 (GAE multiplies their next value by 0). The done columns are read as
    bools: a caller's 0/1 integers (IMPALA's ``learn_on_fragments`` takes its fragments from
    anyone) would otherwise index rows 0 and 1 instead of masking the piece ends.
    """
    ends, terminateds = np.asarray(batch["ends"], dtype=bool), np.asarray(batch["terminateds"], dtype=bool)
    next_vals = np.zeros_like(values)
    next_vals[:-1] = values[1:]
    next_vals[ends] = 0.0
    bootstrap = np.flatnonzero(ends & ~terminateds)
    if bootstrap.size:
        device = next(model.parameters()).device
        next_obs = torch.from_numpy(batch["next_obs"][bootstrap]).to(device)
        # An actor-critic's method (cairn.models.ActorCriticModel), unseen on torch.nn.Module.
        next_vals[bootstrap] = model.value(next_obs).cpu().numpy()  # type: ignore[operator]
    return next_vals
