"""The shapes TD3 reads from its model, checked once when a TD3Policy is built or restored
(:mod:`cairn.policy.output_shapes`): the actor's deterministic action, ``[B, A]``, and the
critics' Q-values as SAC's (:func:`~cairn.algorithms.sac.output_shapes.check_twin_q_outputs`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import gymnasium as gym
import torch

from cairn.algorithms.sac.output_shapes import check_twin_q_outputs
from cairn.algorithms.td3.custom_model import TanhActor
from cairn.algorithms.td3.model import TD3ModelBase
from cairn.policy.output_shapes import SAMPLE_BATCHES, network_name, quiet_forward, require_shape, sample_rows

__all__ = ["check_td3_outputs"]


def check_td3_outputs(model: TD3ModelBase, *, feature_size: int, action_size: int,
                      action_space: gym.Space[Any], model_config: Mapping[str, Any]) -> None:
    """ConfigError naming the network, the output and both shapes unless the actor gives one
    action tensor of ``[B, action_size]`` and the critics ``Q(s, a)`` of ``[B]`` each. A user's
    actor is checked before TD3's ``tanh`` (:class:`~cairn.algorithms.td3.custom_model.TanhActor`),
    on what its own ``forward`` returns; the targets are copies of the actor and the critics."""
    actor = model.actor.net if isinstance(model.actor, TanhActor) else model.actor
    for batch in SAMPLE_BATCHES:
        features, _ = sample_rows(feature_size, batch=batch)
        actions = torch.zeros(batch, action_size)
        with quiet_forward(model):
            require_shape(actor(features), (batch, action_size), network=network_name(actor, model_config),
                          output="action", reads=f"[batch, action_size={action_size}] for {action_space}",
                          fix=f"return one tensor of shape [batch, num_outputs] (num_outputs={action_size}, "
                              "the constructor's third argument: one per action dimension), before any tanh.",
                          rows=batch)
            check_twin_q_outputs(model.critic, features, actions, model_config)
