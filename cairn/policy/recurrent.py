"""Acting with a recurrent policy: its initial state, and actions that take and return a state.

A policy is recurrent when its network is a :class:`cairn.models.RecurrentActorCriticModel`
(``model={"use_lstm": True}``, or a user's recurrent model). Its state is a list of arrays
(``[h, c]`` for an LSTM), one row per observation in a batch; :class:`~cairn.policy.Policy`'s
``get_initial_state``, ``compute_actions(..., state=...)`` and
``compute_single_action(..., state=...)`` act through its :class:`RecurrentActing` (docs/ppo.md, "Recurrent
policies"). Acting runs one step at a time: the built-in LSTM in numpy (its ``numpy_step``),
other recurrent models in torch.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import numpy as np
import torch

from cairn.errors import ConfigError, ObservationSpaceError
from cairn.models import RecurrentActorCriticModel
from cairn.numpy_acting import evaluating
from cairn.policy.acting import raw_actions, raw_actions_and_logp
from cairn.policy.distributions import ActionDistribution
from cairn.policy.recurrent_config import recurrent_settings

__all__ = ["BATCH_STATISTICS_LAYERS", "MaybeRecurrent", "RecurrentActing", "RecurrentState", "is_recurrent",
           "recurrent_acting", "refuse_batch_statistics"]

#: A recurrent state: one array per component (``[h, c]``), batched (``[B, *shape]``) or not.
RecurrentState = list[np.ndarray]


class MaybeRecurrent(Protocol):
    """A policy, as :func:`is_recurrent` sees it (a Policy's ``recurrent`` part)."""

    @property
    def recurrent(self) -> RecurrentActing | None: ...


def is_recurrent(policy: MaybeRecurrent) -> bool:
    """Whether ``policy``'s network has memory (acts with a state)."""
    return policy.recurrent is not None


def recurrent_acting(model: torch.nn.Module, dist: ActionDistribution, model_config: Mapping[str, Any], *,
                     action_mask_size: int, policy_class: str) -> RecurrentActing | None:
    """Called once a policy's ``model`` exists: its recurrent acting path (None for a feed-forward
    network). Refuses (ConfigError) a policy that asks for ``use_lstm`` but built another network
    (DQN, SAC), or a recurrent one with an observation's ``action_mask``."""
    use_lstm = recurrent_settings(model_config)["use_lstm"]
    # A masked policy's network is wrapped (MaskedActorCritic): look at the wrapped one too.
    if action_mask_size and (use_lstm or isinstance(getattr(model, "net", None), RecurrentActorCriticModel)):
        raise ConfigError(
            "A recurrent policy (model.use_lstm, or a RecurrentActorCriticModel) cannot read an "
            "observation's 'action_mask': action masking is for feed-forward policies. Drop the "
            "mask from the observation space, or use_lstm.")
    if use_lstm and not isinstance(model, RecurrentActorCriticModel):
        raise ConfigError(
            f"Config 'model.use_lstm'=True is not supported by {policy_class}: only PPO, IMPALA "
            "and APPO (cairn.Policy's actor-critic) have recurrent policies. Drop use_lstm, or "
            "use one of them.")
    if not isinstance(model, RecurrentActorCriticModel):
        return None
    refuse_batch_statistics(model)
    return RecurrentActing(model, dist)


#: Layers that normalise by statistics of the whole batch in training mode.
BATCH_STATISTICS_LAYERS: tuple[type[torch.nn.Module], ...] = (
    torch.nn.BatchNorm1d, torch.nn.BatchNorm2d, torch.nn.BatchNorm3d, torch.nn.LazyBatchNorm1d,
    torch.nn.LazyBatchNorm2d, torch.nn.LazyBatchNorm3d, torch.nn.SyncBatchNorm)


def refuse_batch_statistics(model: RecurrentActorCriticModel) -> None:
    """ConfigError when the recurrent ``model`` holds a layer that normalises by batch statistics
    (``BatchNorm``): the learners run it over sequences padded at their end to the longest one
    (:mod:`cairn.algorithms.ppo.recurrent`), so the padded steps would enter the batch's mean and
    variance, and so every real step's output and the running statistics, with no error."""
    for name, module in model.named_modules():
        if isinstance(module, BATCH_STATISTICS_LAYERS):
            raise ConfigError(
                f"{type(model).__qualname__} (model.custom_model) is recurrent and holds "
                f"{type(module).__name__} at {name!r}: the learners run a recurrent model over sequences "
                "padded at their end, and the padded steps would enter its batch statistics (a model gets "
                "no mask to leave them out). Fix: normalise per step instead (nn.LayerNorm), or drop the "
                "batch normalisation.")


class RecurrentActing:
    """The acting path of a policy whose network is a :class:`~cairn.models.RecurrentActorCriticModel`:
    its initial state, and actions that take a state and return the next one."""

    def __init__(self, model: RecurrentActorCriticModel, dist: ActionDistribution) -> None:
        self.model = model
        self.dist = dist

    def initial_state(self) -> RecurrentState:
        """The state at the start of an episode: float32 arrays, unbatched (``[cell]`` each)."""
        return [t.detach().cpu().numpy().astype(np.float32) for t in self.model.get_initial_state()]

    def state_shapes(self) -> list[list[int]]:
        """The shape of each state component (unbatched), as data: ``[[cell], [cell]]`` for an LSTM."""
        return [list(s.shape) for s in self.initial_state()]

    def raw_actions(self, processed_obs: np.ndarray, state: Sequence[np.ndarray], rng: np.random.Generator, *,
                    explore: bool) -> tuple[np.ndarray, RecurrentState]:
        """Raw actions and the next state for processed observations ``[B, d]`` and a batched
        ``state`` (``[B, *shape]`` per component): through the model's ``numpy_step`` where it has
        one (the built-in LSTM), else its torch ``forward`` under ``inference_mode``, in eval mode."""
        inputs, out = self._step(processed_obs, state)
        return raw_actions(self.dist, inputs, rng, explore=explore), out

    def raw_actions_and_logp(self, processed_obs: np.ndarray, state: Sequence[np.ndarray],
                             rng: np.random.Generator, *,
                             explore: bool) -> tuple[np.ndarray, np.ndarray, RecurrentState]:
        """:meth:`raw_actions` with each action's log-probability (float32 ``[B]``) under the
        distribution it was drawn from: ``(raw, logp, state_out)``."""
        inputs, out = self._step(processed_obs, state)
        raw, logp = raw_actions_and_logp(self.dist, inputs, rng, explore=explore)
        return raw, logp, out

    def _step(self, processed_obs: np.ndarray,
              state: Sequence[np.ndarray]) -> tuple[np.ndarray, RecurrentState]:
        """``(action inputs [B, num_inputs], state_out)`` of one step."""
        numpy_step = getattr(self.model, "numpy_step", None)
        if numpy_step is not None:
            inputs, out = numpy_step(processed_obs, [np.asarray(s, dtype=np.float32) for s in state])
            return inputs, out
        # In eval mode, as in_torch runs feed-forward users' models (docs/models.md): a Dropout
        # would make greedy actions and the next state random. Copies of the observations and the
        # state, as in_torch gives: a model may write into its inputs, and these are the caller's
        # arrays (a runner's stored rows and state column).
        with torch.inference_mode(), evaluating(self.model):
            tensors = [torch.from_numpy(np.array(s, dtype=np.float32)) for s in state]
            inputs_t, _, out_t = self.model(torch.from_numpy(processed_obs.copy()).unsqueeze(1), tensors)
            return inputs_t[:, 0].numpy(), [o.numpy().copy() for o in out_t]

    def actions(self, processed_obs: np.ndarray, state: Sequence[Any] | None, rng: np.random.Generator, *,
                explore: bool) -> tuple[np.ndarray, RecurrentState]:
        """``(actions ready for the environment, state_out)`` for a batch; ``state`` is a list of
        ``[B, *shape]`` arrays, one per component."""
        if state is None:
            raise TypeError("A recurrent policy acts with a state: pass it, starting each episode from "
                            "policy.get_initial_state(): compute_single_action(obs, state=state) takes "
                            "and returns it as it is, compute_actions(obs_batch, state=[h, c]) stacked per "
                            "row ([B, size] each) (docs/ppo.md).")
        batch = len(processed_obs)
        shapes = self.state_shapes()
        arrays = [np.asarray(s, dtype=np.float32) for s in state]
        if len(arrays) != len(shapes) or any(a.shape != (batch, *shape) for a, shape in zip(arrays, shapes)):
            raise ObservationSpaceError(
                f"state has shapes {[a.shape for a in arrays]}, expected {[(batch, *s) for s in shapes]} "
                f"for {batch} observation(s): one row per observation.")
        raw, out = self.raw_actions(processed_obs, arrays, rng, explore=explore)
        return self.dist.to_env(raw), out
