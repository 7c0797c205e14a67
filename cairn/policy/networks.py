"""Which network an actor-critic policy builds: the user's (``model.custom_model``, a
:class:`cairn.models.ActorCriticModel`), the Keras twin (``framework="keras"``, docs/keras.md) or
the built-in :class:`~cairn.policy.model.ActorCriticMLP` (with a CNN encoder for images), or with
``use_lstm`` the built-in :class:`~cairn.policy.recurrent_model.LSTMActorCritic`."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
from torch import nn

from cairn.models import ActorCriticModel
from cairn.policy.custom_model import build_custom_model, uses_custom_model
from cairn.policy.keras_model import actor_critic_network
from cairn.policy.merge import deep_merge
from cairn.policy.model import DEFAULT_MODEL_CONFIG, policy_encoder_description
from cairn.policy.recurrent_config import recurrent_settings
from cairn.policy.recurrent_model import LSTMActorCritic

__all__ = ["actor_critic_model"]


def actor_critic_model(policy: Any) -> nn.Module:
    """The network of ``policy`` (a :class:`~cairn.Policy` being set up) from its
    ``config["model"]``, its spaces, its distribution's input count and its generator."""
    model_cfg = deep_merge(DEFAULT_MODEL_CONFIG, policy.config["model"])
    if uses_custom_model(model_cfg):
        return build_custom_model(
            model_cfg, ActorCriticModel, observation_space=policy.network_observation_space,
            action_space=policy.action_space, num_outputs=policy.dist.num_inputs, generator=policy.generator)
    recurrent = recurrent_settings(model_cfg)
    if recurrent["use_lstm"]:  # encoder + MLP, then an LSTM, then the heads (docs/ppo.md)
        return LSTMActorCritic(
            policy.network_observation_space, policy.action_space, policy.dist.num_inputs,
            obs_size=policy.preprocessor.size, hidden=list(model_cfg["hidden"]),
            activation=model_cfg["activation"], cell_size=recurrent["lstm_cell_size"],
            vf_share_layers=bool(model_cfg["vf_share_layers"]),
            free_log_std=isinstance(policy.action_space, gym.spaces.Box),
            log_std_init=float(model_cfg["log_std_init"]), encoder=policy_encoder_description(policy))
    return actor_critic_network(model_cfg)(  # type: ignore[no-any-return]
        policy.preprocessor.size,
        policy.dist.num_inputs,
        hidden=list(model_cfg["hidden"]),
        activation=model_cfg["activation"],
        vf_share_layers=bool(model_cfg["vf_share_layers"]),
        free_log_std=isinstance(policy.action_space, gym.spaces.Box),
        log_std_init=float(model_cfg["log_std_init"]),
        encoder=policy_encoder_description(policy),
    )
