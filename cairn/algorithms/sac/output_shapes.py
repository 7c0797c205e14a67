"""The shapes SAC reads from its model, checked once when a SACPolicy is built or restored
(:mod:`cairn.policy.output_shapes`): the actor's ``(mean, log_std)``, ``[B, A]`` each, and each
critic's Q-values, ``[B]`` for one of a user's critics and ``[2, B]`` for a twin-Q module
(:func:`check_twin_q_outputs`, which TD3's check shares)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import gymnasium as gym
import torch
from torch import nn

from cairn.algorithms.sac.custom_model import TwinCritic
from cairn.algorithms.sac.model_base import SACModelBase
from cairn.policy.output_shapes import (
    SAMPLE_BATCHES,
    network_name,
    quiet_forward,
    require_shape,
    sample_rows,
    unpack_outputs,
)

__all__ = ["check_sac_outputs", "check_twin_q_outputs"]


def check_sac_outputs(model: SACModelBase, *, feature_size: int, action_size: int,
                      action_space: gym.Space[Any], model_config: Mapping[str, Any]) -> None:
    """ConfigError naming the network, the output and both shapes unless the actor gives
    ``(mean, log_std)`` of ``[B, action_size]`` each and the critics ``Q(s, a)`` of ``[B]`` each.
    The target critics are copies of the critics (same class and weights' shapes)."""
    actor = network_name(model.actor, model_config)
    reads = f"[batch, action_size={action_size}] for {action_space}"
    for batch in SAMPLE_BATCHES:
        features, _ = sample_rows(feature_size, batch=batch)
        actions = torch.zeros(batch, action_size)
        with quiet_forward(model):
            mean, log_std = unpack_outputs(model.actor(features), 2, network=actor, call="forward(obs)",
                                           names="(mean [batch, action_size], log_std [batch, action_size])")
            for output, value in (("mean", mean), ("log_std", log_std)):
                require_shape(value, (batch, action_size), network=actor, output=output, reads=reads,
                              fix=f"return {output} of shape [batch, num_outputs] "
                                  f"(num_outputs={action_size}, the constructor's third argument: one per "
                                  "action dimension).", rows=batch)
            check_twin_q_outputs(model.critic, features, actions, model_config)


def check_twin_q_outputs(critic: nn.Module, features: torch.Tensor, actions: torch.Tensor,
                         model_config: Mapping[str, Any]) -> None:
    """SAC's and TD3's critics on sample ``features`` and ``actions`` (run inside
    :func:`~cairn.policy.output_shapes.quiet_forward`): each of a user's critics gives ``Q(s, a)``
    of ``[B]``, a built-in twin Q ``[2, B]``; else ConfigError naming the network."""
    batch = features.shape[0]
    if isinstance(critic, TwinCritic):  # a user's critics, each Q(s, a) -> [B]
        for one in (critic.q1, critic.q2):
            require_shape(one(features, actions), (batch,),
                          network=network_name(one, model_config, "custom_q_model"), output="q",
                          reads="[batch], one Q-value per (observation, action)",
                          fix="return Q-values of shape [batch] (a [batch, 1] head needs .squeeze(-1)).",
                          rows=batch)
    else:
        require_shape(critic(features, actions), (2, batch), network=network_name(critic, {}),
                      output="twin q", reads="[2, batch], both critics' Q-values",
                      fix="stack both critics' [batch] Q-values.", rows=batch)
