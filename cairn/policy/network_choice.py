"""Which network an actor-critic policy builds: the user's (``model.custom_model``, a
:class:`cairn.models.ActorCriticModel`), the Keras twin (``framework="keras"``, docs/keras.md) or
the built-in :class:`~cairn.policy.mlp_actor_critic.ActorCriticMLP` (with a CNN encoder for images), or with
``use_lstm`` the built-in :class:`~cairn.policy.lstm_actor_critic.LSTMActorCritic`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import gymnasium as gym
import torch
from torch import nn

from cairn.models import ActorCriticModel
from cairn.policy.custom_model import build_custom_model, uses_custom_model
from cairn.policy.keras_model import actor_critic_network
from cairn.policy.lstm_actor_critic import LSTMActorCritic
from cairn.policy.merge import deep_merge
from cairn.policy.mlp_actor_critic import DEFAULT_MODEL_CONFIG, policy_encoder_description
from cairn.policy.recurrent_config import recurrent_settings

__all__ = ["actor_critic_model"]


def actor_critic_model(config: Mapping[str, Any], *, network_observation_space: gym.Space[Any],
                       action_space: gym.Space[Any], obs_size: int, num_outputs: int,
                       generator: torch.Generator) -> nn.Module:
    """The network of an actor-critic policy from its ``config`` (``model``, ``observation_filter``),
    the observation space its network reads (``obs_size`` numbers per row), its action space, its
    distribution's input count and its torch generator."""
    model_cfg = deep_merge(DEFAULT_MODEL_CONFIG, config["model"])
    if uses_custom_model(model_cfg):
        return build_custom_model(
            model_cfg, ActorCriticModel, observation_space=network_observation_space,
            action_space=action_space, num_outputs=num_outputs, generator=generator)
    encoder = policy_encoder_description(network_observation_space, config)
    settings = {"hidden": list(model_cfg["hidden"]), "activation": model_cfg["activation"],
                "vf_share_layers": bool(model_cfg["vf_share_layers"]),
                "vf_stop_gradient": bool(model_cfg["vf_stop_gradient"]),
                "free_log_std": isinstance(action_space, gym.spaces.Box),
                "log_std_init": float(model_cfg["log_std_init"]), "encoder": encoder}
    recurrent = recurrent_settings(model_cfg)
    if recurrent["use_lstm"]:  # encoder + MLP, then an LSTM, then the heads (docs/ppo.md)
        return LSTMActorCritic(network_observation_space, action_space, num_outputs, obs_size=obs_size,
                               cell_size=recurrent["lstm_cell_size"], **settings)
    return actor_critic_network(model_cfg, generator)(obs_size, num_outputs, **settings)  # type: ignore[no-any-return]
