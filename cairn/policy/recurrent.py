"""Acting with a recurrent policy: its initial state, and actions that take and return a state.

A policy is recurrent when its network is a :class:`cairn.models.RecurrentActorCriticModel`
(``model={"use_lstm": True}``, or a user's recurrent model). Its state is a list of arrays
(``[h, c]`` for an LSTM), one row per observation in a batch; :class:`~cairn.policy.Policy`'s
``get_initial_state``, ``compute_actions(..., state=...)`` and
``compute_single_action(..., state=...)`` call the functions here (docs/ppo.md, "Recurrent
policies"). Acting runs one step at a time: the built-in LSTM in numpy (its ``numpy_step``),
other recurrent models in torch.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from cairn.errors import ConfigError, ObservationSpaceError
from cairn.models import RecurrentActorCriticModel
from cairn.policy.acting import raw_actions, single_action
from cairn.policy.recurrent_config import recurrent_settings

__all__ = ["is_recurrent", "initial_state", "state_shapes", "recurrent_raw_actions", "recurrent_actions",
           "recurrent_single_action", "finish_recurrent_setup", "RecurrentState"]

#: A recurrent state: one array per component (``[h, c]``), batched (``[B, *shape]``) or not.
RecurrentState = list[np.ndarray]


def is_recurrent(policy: Any) -> bool:
    """Whether ``policy``'s network has memory (acts with a state)."""
    return isinstance(getattr(policy, "model", None), RecurrentActorCriticModel)


def finish_recurrent_setup(policy: Any) -> None:
    """Called once a policy's model exists: refuse (ConfigError) a policy that asks for
    ``use_lstm`` but built another network (DQN, SAC), or a recurrent one with an observation's
    ``action_mask``; with ``use_lstm``, write all three recurrent keys into the policy's
    ``config["model"]``, so that its spec (in every checkpoint) states the state's size as data."""
    recurrent = is_recurrent(policy)
    use_lstm = recurrent_settings(policy.config.get("model", {}))["use_lstm"]
    # A masked policy's network is wrapped (MaskedActorCritic): look at the wrapped one too.
    if policy.action_mask_size and (use_lstm or isinstance(getattr(policy.model, "net", None),
                                                           RecurrentActorCriticModel)):
        raise ConfigError(
            "A recurrent policy (model.use_lstm, or a RecurrentActorCriticModel) cannot read an "
            "observation's 'action_mask': action masking is for feed-forward policies. Drop the "
            "mask from the observation space, or use_lstm.")
    if use_lstm and not recurrent:
        raise ConfigError(
            f"Config 'model.use_lstm'=True is not supported by {type(policy).__name__}: only PPO "
            "(cairn.Policy's actor-critic) has recurrent policies. Drop use_lstm, or use PPO.")
    if use_lstm:
        policy.config["model"] = {**policy.config["model"], **recurrent_settings(policy.config["model"])}


def initial_state(policy: Any) -> RecurrentState:
    """The state at the start of an episode: float32 arrays, unbatched (``[cell]`` each)."""
    if not is_recurrent(policy):
        raise TypeError(f"{type(policy).__name__} with this model is not recurrent: it has no state.")
    return [t.detach().cpu().numpy().astype(np.float32) for t in policy.model.get_initial_state()]


def state_shapes(policy: Any) -> list[list[int]]:
    """The shape of each state component (unbatched), as data: ``[[cell], [cell]]`` for an LSTM."""
    return [list(s.shape) for s in initial_state(policy)]


def recurrent_raw_actions(policy: Any, processed_obs: np.ndarray, state: Sequence[np.ndarray], *,
                          explore: bool) -> tuple[np.ndarray, RecurrentState]:
    """Raw actions and the next state for processed observations ``[B, d]`` and a batched
    ``state`` (``[B, *shape]`` per component): through the model's ``numpy_step`` where it has
    one (the built-in LSTM), else its torch ``forward`` under ``inference_mode``."""
    numpy_step = getattr(policy.model, "numpy_step", None)
    if numpy_step is not None:
        inputs, out = numpy_step(processed_obs, [np.asarray(s, dtype=np.float32) for s in state])
        return raw_actions(policy.dist, inputs, policy.np_random, explore=explore), out
    with torch.inference_mode():
        tensors = [torch.as_tensor(np.asarray(s, dtype=np.float32)) for s in state]
        inputs, _, out = policy.model(torch.from_numpy(processed_obs).unsqueeze(1), tensors)
        raw = raw_actions(policy.dist, inputs[:, 0].numpy(), policy.np_random, explore=explore)
        return raw, [o.numpy().copy() for o in out]


def recurrent_actions(policy: Any, processed_obs: np.ndarray, state: Sequence[Any] | None, *,
                      explore: bool) -> tuple[np.ndarray, RecurrentState]:
    """``(actions ready for the environment, state_out)`` for a batch; ``state`` is a list of
    ``[B, *shape]`` arrays, one per component."""
    if not is_recurrent(policy):
        raise TypeError(f"{type(policy).__name__} with this model is not recurrent: call "
                        "compute_actions without state.")
    if state is None:
        raise TypeError("A recurrent policy acts with a state: pass state=[h, c] (each [B, cell]), "
                        "starting from policy.get_initial_state() stacked per row (docs/ppo.md).")
    batch = len(processed_obs)
    shapes = state_shapes(policy)
    arrays = [np.asarray(s, dtype=np.float32) for s in state]
    if len(arrays) != len(shapes) or any(a.shape != (batch, *shape) for a, shape in zip(arrays, shapes)):
        raise ObservationSpaceError(
            f"state has shapes {[a.shape for a in arrays]}, expected {[(batch, *s) for s in shapes]} "
            f"for {batch} observation(s): one row per observation.")
    raw, out = recurrent_raw_actions(policy, processed_obs, arrays, explore=explore)
    return policy.dist.to_env(raw), out


def recurrent_single_action(policy: Any, processed_obs: np.ndarray, state: Sequence[Any], *,
                            explore: bool) -> tuple[Any, RecurrentState]:
    """``(action, state_out)`` for one processed observation and an unbatched ``state``."""
    actions, out = recurrent_actions(policy, processed_obs, [np.asarray(s)[None] for s in state],
                                     explore=explore)
    return single_action(policy.action_space, actions[0]), [o[0] for o in out]
