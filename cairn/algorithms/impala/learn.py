"""IMPALA's and APPO's learn function: V-trace targets over one train batch of time-ordered
fragments, then the loss over minibatches, run by a learner alone or as one rank of the DDP
learners (:mod:`cairn.learners.sync` says how the work is shared)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from cairn.algorithms.impala.appo_policy import APPOPolicy
from cairn.algorithms.impala.config import APPOConfig, IMPALAConfig
from cairn.algorithms.impala.loss import appo_loss, impala_loss, update_kl_coeff
from cairn.algorithms.impala.vtrace import VTraceReturns, vtrace
from cairn.algorithms.ppo.learn import behaviour_logp, next_values, update_output
from cairn.algorithms.ppo.sequences import Sequences, minibatches
from cairn.env_runner.sample_batch import SampleBatch
from cairn.errors import ConfigError, NonFiniteLossError
from cairn.learners import GradientSync, LearnOutput
from cairn.numpy_acting import evaluating
from cairn.policy.policy import Policy
from cairn.policy.recurrent import is_recurrent

__all__ = ["vtrace_learn", "batch_vtrace", "target_logp", "BatchTensors", "kl_estimate",
           "after_train_batch", "require_target_network", "rows_loss", "explain_non_finite_loss"]


class BatchTensors:
    """A train batch's columns as tensors on the learner's device, made once per learn call."""

    def __init__(self, batch: SampleBatch, policy: Policy, device: torch.device) -> None:
        self.batch = batch
        self.obs = torch.from_numpy(batch["obs"]).to(device)
        self.actions = torch.from_numpy(batch["actions"]).to(device)
        self.behaviour_logp = behaviour_logp(batch, policy, device)
        self.rewards = torch.from_numpy(np.asarray(batch["rewards"], dtype=np.float32)).to(device)
        self.terminateds = torch.from_numpy(np.asarray(batch["terminateds"], dtype=bool)).to(device)
        self.ends = torch.from_numpy(np.asarray(batch["ends"], dtype=bool)).to(device)

    def whole_obs(self) -> torch.Tensor:
        """A copy of :attr:`obs` for a forward pass over the whole batch: a model may write into
        its input (``obs *= scale``), and :attr:`obs` is the rows every later pass and minibatch
        reads (on a CPU learner, the sample batch's own memory). A minibatch's ``obs[rows]`` is
        a copy already."""
        return self.obs.clone()


def target_logp(policy: APPOPolicy, data: BatchTensors, seqs: Sequences | None = None) -> torch.Tensor:
    """``log pi_target(a_s|x_s)`` of every row of ``data``: APPO's target network on the whole
    batch, in one forward pass (a recurrent policy's: over the batch's sequences ``seqs``).

    :func:`vtrace_learn` computes it once per call: the target network is frozen during a learn
    call (no optimizer holds its parameters, ``requires_grad`` is off, and only
    :func:`after_train_batch`, after the call, copies the network into it), so every epoch's
    V-trace and every minibatch's ratio read these rows instead of running the target again.
    A row's value is the target's on that row; a forward pass over fewer rows (a minibatch) may
    round differently in the last bits (tests/algorithms/impala/test_appo_target_once.py measures
    it)."""
    with torch.no_grad(), evaluating(policy.target_model):  # a target: as a deployed model gives it
        if seqs is not None:
            return seqs.logp(policy.target_model, policy.dist, data.actions)
        return policy.dist.logp(policy.target_model(data.whole_obs())[0], data.actions)


def batch_vtrace(config: IMPALAConfig, policy: Policy, data: BatchTensors, *,
                 target_logp_rows: torch.Tensor | None,
                 seqs: Sequences | None = None) -> tuple[VTraceReturns, np.ndarray]:
    """V-trace's targets and advantages of the whole batch under the policy's current weights,
    and the values ``V(x_s)`` they were computed from (numpy).

    The values ``V(x_s)`` are the network's; ``V(x_{s+1})`` at a piece's end is the value of
    the row's ``next_obs`` (a truncation or a fragment end bootstraps, as PPO's GAE does; a
    termination gets 0). The target policy is the network itself (``target_logp_rows`` None:
    IMPALA) or the one whose log-probabilities of the batch's actions ``target_logp_rows``
    holds (APPO's ``pi_target``: :func:`target_logp`). A recurrent policy's network runs over
    the batch's sequences ``seqs``
    (:meth:`~cairn.algorithms.ppo.sequences.Sequences.values_and_next`: the bootstrap values
    from the state after a piece's last step)."""
    model, dist = policy.model, policy.dist
    # Targets, as a deployed model gives them (as PPO's GAE values): eval mode, so that a user's
    # Dropout does not perturb them and a BatchNorm neither moves its statistics nor fails on
    # the one next_obs row a fragment may bootstrap from.
    with torch.no_grad(), evaluating(model):
        if seqs is not None:
            inputs, values, next_vals = seqs.values_and_next(model)
        elif target_logp_rows is None:  # IMPALA: the network is its own target policy
            inputs, values = model(data.whole_obs())
        else:  # only the values: the model contract makes value(obs) forward's value
            # An actor-critic's method (cairn.models.ActorCriticModel), unseen on torch.nn.Module.
            values = model.value(data.whole_obs())  # type: ignore[operator]
        if target_logp_rows is None:
            target_logp_rows = dist.logp(inputs, data.actions)
        values_np = values.cpu().numpy()
        if seqs is None:
            next_vals = torch.from_numpy(next_values(model, data.batch, values_np)).to(values.device)
    returns = vtrace(behaviour_logp=data.behaviour_logp, target_logp=target_logp_rows, rewards=data.rewards,
                     values=values, next_values=next_vals, terminateds=data.terminateds, ends=data.ends,
                     gamma=config.gamma, clip_rho_threshold=config.vtrace_clip_rho_threshold,
                     clip_pg_rho_threshold=config.vtrace_clip_pg_rho_threshold)
    return returns, values_np


def vtrace_learn(config: IMPALAConfig, policy: Policy, sync: GradientSync, *, batch: SampleBatch,
                 permutations: Sequence[np.ndarray], appo: bool) -> LearnOutput:
    """One IMPALA (``appo`` False) or APPO (``appo`` True, on an :class:`APPOPolicy`) update of
    ``policy`` on ``batch``: per
    array of ``permutations`` (the order of an epoch, drawn by the algorithm: of the batch's rows,
    or of a recurrent policy's sequences) V-trace over the whole batch, then minibatches of
    ``minibatch_size`` rows (None: the whole batch; see
    :func:`~cairn.algorithms.ppo.sequences.minibatches`).

    Each learner computes V-trace over the whole batch, then the loss of its shard of each
    minibatch only, scaled by its share of the minibatch's rows, so that the all-reduced
    gradients are the whole minibatch's (as PPO's learner); before each later epoch's V-trace
    every rank takes rank 0's buffers of the network (a user's BatchNorm statistics, which the
    epoch before moved by each rank's shards), so that every rank's targets are the same. APPO's
    target network and KL weight are read here and written by the algorithm afterwards
    (:func:`after_train_batch`).

    A recurrent policy (:mod:`cairn.algorithms.impala.recurrent`, docs/impala.md) learns over
    the batch's sequences (:class:`~cairn.algorithms.ppo.sequences.Sequences`) in one learner
    (DDP learners are refused by the config, and here); its statistics add ``num_sequences``."""
    model = policy.model
    device = next(model.parameters()).device
    data = BatchTensors(batch, policy, device)
    seqs = None
    if is_recurrent(policy):
        if sync.world_size > 1:
            raise ConfigError("recurrent policies learn in one learner: config.learners(num_learners=0).")
        seqs = Sequences(batch, policy, data.obs)
    old_logp = None
    if appo:
        # Once per call, not per epoch and minibatch: the target network does not change until
        # the call returns (target_logp says why).
        old_logp = target_logp(require_target_network(policy), data, seqs)
    n = len(batch)
    size = n if config.minibatch_size is None else min(config.minibatch_size, n)
    params = list(model.parameters())
    history: list[torch.Tensor] = []
    shares: list[float] = []  # this learner's share of each history row's minibatch
    num_minibatches = 0
    stats: dict[str, torch.Tensor] = {}
    returns: torch.Tensor | None = None
    values_np: np.ndarray | None = None
    for epoch, perm in enumerate(permutations):
        if epoch:
            # The epoch before moved a user's BatchNorm statistics by each rank's own shards:
            # the targets read rank 0's on every rank, as after the call (LearnerActor.update).
            sync.broadcast_buffers([model])
        targets, values_now = batch_vtrace(config, policy, data, target_logp_rows=old_logp, seqs=seqs)
        if returns is None:  # the first epoch's: the value function before this update
            returns, values_np = targets.vs, values_now
        for idx, rows, outputs in minibatches(model, data.obs, seqs, perm, size, sync):
            num_minibatches += 1
            loss = inputs = None
            if outputs is not None:
                inputs, values = outputs
                loss, stats = rows_loss(config, policy, data, targets, rows, old_logp, inputs, values)
                # The loss is a mean over rows: weighted by this shard's share, the learners'
                # gradients sum to the minibatch's (alone the weight is exactly 1).
                loss = loss * (len(rows) / len(idx))
            try:
                sync.optimizer_step(policy.optimizer, loss, params, grad_clip=config.grad_clip)
            except NonFiniteLossError as exc:  # explained by the inputs the step had
                step_inputs = None if inputs is None else inputs.detach()
                raise explain_non_finite_loss(exc, policy, data, rows, old_logp, step_inputs) from exc
            policy.num_grad_updates += 1
            if len(rows):
                history.append(torch.stack(list(stats.values())))
                shares.append(len(rows) / len(idx))
    assert returns is not None and values_np is not None  # num_epochs >= 1 (a positive_int field)
    output = update_output(list(stats), history, returns, values_np, policy, shares, num_minibatches)
    if seqs is not None:  # one learner (no shards): its statistics are the whole's
        return LearnOutput({**output.stats, "num_sequences": float(len(seqs))})
    return output


def require_target_network(policy: Policy) -> APPOPolicy:
    """``policy``, which APPO trains: ConfigError unless it is an :class:`APPOPolicy`."""
    if not isinstance(policy, APPOPolicy):
        raise ConfigError(
            f"APPO trains a {type(policy).__name__}, which has no target network: APPO's ratio is "
            "taken against one. Fix: leave the PolicySpec's policy_class unset (APPO's default is "
            "cairn.algorithms.impala.APPOPolicy) or name a subclass of APPOPolicy.")
    return policy


def rows_loss(config: IMPALAConfig, policy: Policy, data: BatchTensors, targets: VTraceReturns,
              rows: torch.Tensor, old_logp: torch.Tensor | None, inputs: torch.Tensor,
              values: torch.Tensor) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """The loss (a mean over ``rows``) and its statistics: IMPALA's, or APPO's when
    ``old_logp`` holds the target network's log-probabilities of the whole batch; given the
    network's action inputs and values of ``rows`` (in that order), however they were computed
    (a feed-forward pass, or sequences of a recurrent network)."""
    logp = policy.dist.logp(inputs, data.actions[rows])
    entropy = policy.dist.entropy(inputs)
    vs, pg_adv = targets.vs[rows], targets.pg_advantages[rows]
    if old_logp is None:
        return impala_loss(logp, values, entropy, vs, pg_adv, vf_loss_coeff=config.vf_loss_coeff,
                           entropy_coeff=config.entropy_coeff)
    assert isinstance(policy, APPOPolicy)  # the learn functions checked it
    assert isinstance(config, APPOConfig)  # APPO's own (Algorithm.__init__ checks config_class)
    behaviour, old = data.behaviour_logp[rows], old_logp[rows]
    kl = kl_estimate(old, logp, behaviour) if config.use_kl_loss else None
    loss, stats = appo_loss(logp, behaviour, old, values, entropy, vs, pg_adv, kl,
                            clip_param=config.clip_param, vf_loss_coeff=config.vf_loss_coeff,
                            entropy_coeff=config.entropy_coeff, kl_coeff=policy.kl_coeff,
                            target_worker_clipping=config.target_worker_clipping)
    return loss, dict(stats)


def explain_non_finite_loss(error: NonFiniteLossError, policy: Policy, data: BatchTensors, rows: torch.Tensor,
                            old_logp: torch.Tensor | None,
                            action_inputs: torch.Tensor | None) -> NonFiniteLossError:
    """``error`` (a learn step's non-finite loss on the batch ``rows``), or one that says what
    made it non-finite when a log-probability of an action the behaviour policy took is not
    finite: the network being learnt's (``action_inputs``: its inputs for ``rows``, as the step
    had them) or APPO's target network's (``old_logp``).
    A policy that calls a taken action impossible makes V-trace's ratio 0 and its policy-gradient
    term ``0 * -inf``, NaN (APPO's KL estimate infinite): nothing the environment did. Costs
    nothing until a step fails."""
    if not error.stat.startswith("loss") or action_inputs is None or not len(rows):
        return error
    with torch.no_grad():
        parts = [("the network being learnt", policy.dist.logp(action_inputs, data.actions[rows]))]
    if old_logp is not None:
        parts.append(("APPO's target network (pi_old)", old_logp[rows]))
    for who, logp in parts:
        bad = torch.nonzero(~torch.isfinite(logp)).flatten()
        if not len(bad):
            continue
        first = int(bad[0])
        detail = (
            f"{who.capitalize()} gives the action taken in {len(bad)} row(s) of the batch (row "
            f"{int(rows[first])} first: action {data.actions[rows][first].tolist()}) a log-probability of "
            f"{float(logp[first])}, where the behaviour policy (the weights that acted it) gave "
            f"{float(data.behaviour_logp[rows][first])}: it calls an action impossible that was "
            "taken, so V-trace's importance ratio is 0 there and the policy-gradient term 0 * log pi "
            "is NaN (APPO's KL estimate infinite); the environment is not at fault. Likely causes: a "
            "network that gives some actions a logit of -inf (log of a 0 probability, a mask of its "
            "own) where earlier weights did not, or weights that diverged until a logit overflowed. "
            "Fix: give such actions a large finite negative logit instead, or let cairn mask them "
            "(an 'action_mask' in the observation, docs/models.md); lower the learning rate or set "
            "config.training(grad_clip=...), and go on from a checkpoint saved before it diverged.")
        return NonFiniteLossError(error.stat, error.value, error.policy_id, detail=detail)
    return error


def kl_estimate(old_logp: torch.Tensor, logp: torch.Tensor, behaviour_logp: torch.Tensor) -> torch.Tensor:
    """Each row's estimate of ``KL(pi_target || pi)`` from the action the behaviour policy took:
    ``(pi_target / mu) ((r - 1) - log r)`` with ``r = pi / pi_target`` (Schulman's "k3"
    estimator, importance-weighted from ``mu``'s actions to ``pi_target``'s). Never negative,
    and its mean over actions drawn from ``mu`` is the KL itself, as is its gradient's: exact
    in expectation for every action space, with no closed form per distribution. The weight
    carries no gradient."""
    weight = torch.exp(old_logp - behaviour_logp).detach()
    log_r = logp - old_logp.detach()
    return weight * (torch.exp(log_r) - 1.0 - log_r)


def after_train_batch(config: APPOConfig, policy: APPOPolicy, batch: SampleBatch) -> dict[str, float]:
    """APPO's step after each train batch ``batch`` was learnt: count it, and every
    ``target_network_update_freq`` of them adapt ``kl_coeff`` to the KL measured over the whole
    batch (``use_kl_loss``) and copy the network into the target network. Run by the algorithm
    on the policy it owns (after the learners' loan ended, as DQN's target sync), so that it
    is the same with any number of learners. The batch becomes tensors only when the KL is
    measured (one forward pass of the network and one of the target network)."""
    policy.num_train_batches += 1
    if policy.num_train_batches % config.target_network_update_freq == 0:
        if config.use_kl_loss:
            data = BatchTensors(batch, policy, next(policy.model.parameters()).device)
            with torch.no_grad(), evaluating(policy.model), evaluating(policy.target_model):
                if is_recurrent(policy):  # both networks over the batch's sequences
                    seqs = Sequences(batch, policy, data.obs)
                    logp = seqs.logp(policy.model, policy.dist, data.actions)
                else:
                    seqs, logp = None, policy.dist.logp(policy.model(data.whole_obs())[0], data.actions)
                old = target_logp(policy, data, seqs)
                kl = float(kl_estimate(old, logp, data.behaviour_logp).mean())
            policy.kl_coeff = update_kl_coeff(policy.kl_coeff, kl, kl_target=config.kl_target)
        policy.update_target()
    return {"curr_kl_coeff": policy.kl_coeff, "num_train_batches": float(policy.num_train_batches)}
