"""SAC's networks as Keras 3 models on Keras' torch backend (``model.framework="keras"``).

:class:`KerasSACModel` has :class:`~cairn.algorithms.sac.model.SACModel`'s parts and interface
(``actor``, ``critic``, ``target_critic``, ``log_alpha``, ``parameter_groups``,
``update_targets``, ``action_inputs``, ``numpy_action_inputs``, ``reset_parameters``), so SAC's
torch losses and its one Adam with three groups train it as they train the torch model:

* :class:`KerasSquashedGaussianActor`: a Keras model ``obs -> [mean, log_std]`` (Dense layers
  ``actor_<i>``, ``mean_head``, ``log_std_head``; the log-std clipped to its bounds), run layer
  by layer through each Keras layer's own ``call``, and acting in numpy on views of its variables;
* :class:`KerasTwinQ`: a Keras model ``[obs, action] -> [q_0, q_1]`` (Dense layers
  ``q<i>_<k>`` and ``q<i>_out``). cairn runs each Dense layer as one ``addmm`` on its Keras
  variables followed by the layer's own activation, as the torch ``TwinQ`` runs its layers,
  which also lets the actor loss read the critics detached (gradients to the actions only;
  ``Dense.call`` would always reach the variables).

For image observations each has the CNN/per-part encoder of :mod:`cairn.policy.keras_encoders`
in front, as SACModel has: the actor its own, the twin critics one they share (the actor loss
reads it without gradients), the target critics a Polyak-averaged copy.

Variables are registered by name in an ``nn.ParameterDict`` (``actor.variables.actor_0_kernel``,
``critic.variables.q1_out_bias``, Keras' ``[in, out]`` kernel layout) and initialised from the
policy's generator in SACModel's order, so a Keras SAC policy starts from the torch one's
weights. The target critics are a second :class:`KerasTwinQ` with their own Keras variables.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch
from torch import nn

from cairn.algorithms.sac.model_base import SACModelBase, numpy_actor_inputs
from cairn.errors import ConfigError
from cairn.numpy_acting import Dense, LiveViews, View, in_torch
from cairn.policy.keras_backend import builds_float32, import_keras
from cairn.policy.keras_encoders import KerasEncoder, build_keras_encoder, keras_variable
from cairn.policy.keras_model import (
    KERAS_ACTIVATIONS,
    KerasNetwork,
    KerasVariablesModule,
    keras_dense,
    torch_linear_init,
)
from cairn.policy.keras_user_model import register_keras_variables
from cairn.policy.target_network import frozen
from cairn.policy.torch_utils import uniform_fan_in_

__all__ = ["KerasSACModel", "KerasSquashedGaussianActor", "KerasTwinQ", "keras_box_action", "keras_sac_model",
           "refuse_keras_model"]


class KerasSquashedGaussianActor(KerasNetwork):
    """``forward(obs) -> (mean, log_std)`` over a Keras model whose log-std is clipped to
    ``log_std_bounds`` (SACModel's ``[LOG_STD_MIN, LOG_STD_MAX]``); ``encoder`` (an
    :func:`~cairn.policy.encoders.encoder_description`) puts the actor's own CNN in front."""

    keras_layers = ("trunk", "mean_head", "log_std_head", "encoder")
    trunk: tuple[Any, ...]  # Keras layers (not torch submodules), in call order
    mean_head: Any
    log_std_head: Any
    encoder: KerasEncoder | None

    @builds_float32
    def __init__(self, obs_size: int, action_size: int, *, hidden: Sequence[int], activation: str,
                 log_std_bounds: tuple[float, float], encoder: Mapping[str, Any] | None = None) -> None:
        super().__init__()
        keras = import_keras()
        dense = keras.layers.Dense
        obs = keras.Input((obs_size,), name="obs", dtype="float32")
        act = KERAS_ACTIVATIONS[activation]
        trunk = tuple(dense(h, activation=act, name=f"actor_{i}") for i, h in enumerate(hidden))
        mean_head = dense(action_size, name="mean_head")
        log_std_head = dense(action_size, name="log_std_head")
        keras_encoder = None if encoder is None else build_keras_encoder(encoder, "encoder")
        x = obs if keras_encoder is None else keras_encoder(obs)
        for layer in trunk:
            x = layer(x)
        low, high = (float(b) for b in log_std_bounds)
        log_std = keras.ops.clip(log_std_head(x), low, high)
        network = keras.Model(obs, [mean_head(x), log_std], name="cairn_sac_actor")
        register_keras_variables(self, network, by_layer=True)
        self.trunk, self.mean_head, self.log_std_head = trunk, mean_head, log_std_head
        self.encoder = keras_encoder
        self.activation = activation
        self.log_std_bounds = (low, high)
        self._numpy_views = LiveViews(_acting_views)

    def reset_parameters(self, generator: torch.Generator) -> None:
        """SquashedGaussianActor's initialisation (as SACModel draws it: the encoder first),
        layer by layer, from ``generator``."""
        torch_linear_init((*self.trunk, self.mean_head, self.log_std_head), generator, self.encoder)

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x = obs if self.encoder is None else self.encoder.call(obs)
        for layer in self.trunk:
            x = layer.call(x)
        low, high = self.log_std_bounds
        return self.mean_head.call(x), self.log_std_head.call(x).clamp(low, high)

    def numpy_forward(self, obs: np.ndarray) -> np.ndarray:
        """``[mean, log_std]`` concatenated, in numpy on views of the Keras variables
        (:mod:`cairn.numpy_acting`; an encoder's convolutions in torch)."""
        if self.encoder is not None:
            return in_torch(lambda x: torch.cat(self(x), dim=-1), obs, self)
        return numpy_actor_inputs(self._numpy_views.get(self), obs, self.activation, self.log_std_bounds)


def _acting_views(actor: KerasSquashedGaussianActor, view: View) -> tuple[list[Dense], Dense, Dense]:
    return ([keras_dense(layer, view) for layer in actor.trunk], keras_dense(actor.mean_head, view),
            keras_dense(actor.log_std_head, view))


class KerasTwinQ(KerasNetwork):
    """``forward(obs, actions) -> [2, batch]``: two Keras Q-networks, evaluated as one ensemble;
    ``encoder`` (an :func:`~cairn.policy.encoders.encoder_description`) puts one CNN in front
    that both critics read, as SB3's critic has."""

    network: Any  # the keras.Model [obs, action] -> [q_0, q_1]
    keras_layers = ("critics", "encoder")
    critics: tuple[tuple[Any, ...], ...]  # each critic's Dense layers, in call order
    encoder: KerasEncoder | None

    @builds_float32
    def __init__(self, obs_size: int, action_size: int, *, hidden: Sequence[int], activation: str,
                 encoder: Mapping[str, Any] | None = None) -> None:
        super().__init__()
        keras = import_keras()
        obs = keras.Input((obs_size,), name="obs", dtype="float32")
        action = keras.Input((action_size,), name="action", dtype="float32")
        keras_encoder = None if encoder is None else build_keras_encoder(encoder, "encoder")
        features = obs if keras_encoder is None else keras_encoder(obs)
        joined = keras.layers.Concatenate(name="obs_action")([features, action])
        act = KERAS_ACTIVATIONS[activation]
        critics, outputs = [], []
        for i in range(2):
            layers = [keras.layers.Dense(h, activation=act, name=f"q{i}_{k}") for k, h in enumerate(hidden)]
            layers.append(keras.layers.Dense(1, name=f"q{i}_out"))
            x = joined
            for layer in layers:
                x = layer(x)
            critics.append(layers)
            outputs.append(x)
        network = keras.Model([obs, action], outputs, name="cairn_sac_critic")
        register_keras_variables(self, network, by_layer=True)
        self.critics, self.encoder = tuple(tuple(layers) for layers in critics), keras_encoder

    def reset_parameters(self, generator: torch.Generator) -> None:
        """TwinQ's initialisation: the encoder, then per layer critic 0's kernel and bias, then
        critic 1's (Keras' ``[in, out]`` kernel is TwinQ's layout, so the draws fill it directly)."""
        if self.encoder is not None:
            self.encoder.reset_parameters(generator, orthogonal=False)
        with torch.no_grad():
            for pair in zip(*self.critics, strict=True):
                for layer in pair:
                    fan_in = keras_variable(layer, "kernel").shape[0]
                    uniform_fan_in_(keras_variable(layer, "kernel"), fan_in, generator)
                    uniform_fan_in_(keras_variable(layer, "bias"), fan_in, generator)

    def forward(self, obs: torch.Tensor, actions: torch.Tensor, *, detach: bool = False) -> torch.Tensor:
        """``[2, batch]``: both critics' ``Q(obs, action)``, the Keras model's outputs.
        ``detach``: gradients reach the actions but not the critics' variables (the actor loss)."""
        if self.encoder is not None:
            with torch.no_grad() if detach else contextlib.nullcontext():
                obs = self.encoder.call(obs)
        x = torch.cat([obs, actions], dim=-1)
        q_values = []
        for layers in self.critics:
            h = x
            for layer in layers:
                kernel, bias = keras_variable(layer, "kernel"), keras_variable(layer, "bias")
                if detach:
                    kernel, bias = kernel.detach(), bias.detach()
                h = layer.activation(torch.addmm(bias, h, kernel))  # Keras' own activation (linear last)
            q_values.append(h.squeeze(-1))
        return torch.stack(q_values)

    def first_q(self, obs: torch.Tensor, actions: torch.Tensor, *, detach: bool = False) -> torch.Tensor:
        """``[batch]``: ``Q_1(obs, action)``, what TD3's actor loss reads (here both critics run
        and the first row is taken; the built-in ``TwinQ`` computes ``Q_1`` alone)."""
        return self(obs, actions, detach=detach)[0]  # type: ignore[no-any-return]


class KerasSACModel(KerasVariablesModule, SACModelBase):
    """Everything SAC learns, with Keras actor and critics: ``actor``, ``critic``,
    ``target_critic`` and ``log_alpha``. ``network`` is the actor's Keras model (what exports
    serve); :meth:`keras_serving_outputs` adds the deterministic action to it."""

    actor: KerasSquashedGaussianActor
    critic: KerasTwinQ
    target_critic: KerasTwinQ

    def __init__(self, obs_size: int, action_size: int, *, hidden: Sequence[int], activation: str,
                 initial_alpha: float, log_std_bounds: tuple[float, float],
                 encoder: Mapping[str, Any] | None = None) -> None:
        super().__init__()
        nets = {"hidden": list(hidden), "activation": activation, "encoder": encoder}
        self.actor = KerasSquashedGaussianActor(obs_size, action_size, log_std_bounds=log_std_bounds, **nets)  # type: ignore[arg-type]
        self.critic = KerasTwinQ(obs_size, action_size, **nets)  # type: ignore[arg-type]
        self.target_critic = frozen(KerasTwinQ(obs_size, action_size, **nets))  # type: ignore[arg-type]
        # On the CPU whatever device the policy builds under: a restore copies into it.
        self.log_alpha = nn.Parameter(torch.tensor([math.log(initial_alpha)], device="cpu"))
        self.initial_alpha = initial_alpha

    @property
    def network(self) -> Any:
        """The actor's Keras model ``processed obs -> [mean, log_std]``."""
        return self.actor.network

    def keras_serving_outputs(self, processed_obs: Any, dist: Any) -> dict[str, Any]:
        """The export outputs in Keras ops on the processed observations (a KerasTensor):
        ``action`` (``low + (tanh(mean) + 1) * half_range``, clipped to the bounds, as
        ``dist.to_env`` of the deterministic action), ``mean`` and ``log_std``. ``dist`` is the
        policy's squashed Gaussian (``low``, ``high``, ``half_range``, ``shape``, ``env_dtype``)."""
        ops = import_keras("Keras export").ops
        mean, log_std = self.network(processed_obs)
        return {"action": keras_box_action(ops.tanh(mean), dist), "mean": mean, "log_std": log_std}


def keras_box_action(raw: Any, bounds: Any) -> Any:
    """A raw action in [-1, 1] (a KerasTensor: SAC's ``tanh(mean)``, TD3's ``pi(s)``) as
    ``bounds.to_env`` makes it, in Keras ops: ``low + (raw + 1) * half_range``, clipped to the
    bounds, reshaped to the Box and cast to its dtype. ``bounds`` is a
    :class:`~cairn.algorithms.sac.distribution.SquashedGaussian` (``low``, ``high``,
    ``half_range``, ``shape``, ``env_dtype``)."""
    ops = import_keras("Keras export").ops
    low, high = (np.asarray(b, np.float32) for b in (bounds.low, bounds.high))
    half_range = np.asarray(bounds.half_range, np.float32)
    scaled = ops.add(low, ops.multiply(ops.add(raw, 1.0), half_range))
    action = ops.minimum(ops.maximum(scaled, low), high)
    if tuple(bounds.shape) != (int(low.size),):
        action = ops.reshape(action, (-1, *bounds.shape))
    return ops.cast(action, np.dtype(bounds.env_dtype).name)


def refuse_keras_model(algorithm: str, model_config: Mapping[str, Any]) -> None:
    """ConfigError when ``model_config`` names a user's Keras model (``keras_model``): SAC's and
    TD3's Keras networks are built from ``hidden``/``activation`` only."""
    if model_config.get("keras_model"):
        raise ConfigError(
            f"Config 'model.keras_model'={model_config['keras_model']!r} is not supported by {algorithm}: "
            "its Keras actor and critics are built from model.hidden/activation only. Remove keras_model "
            "(the user-model builder is PPO's actor-critic), or use framework='torch'.")


def keras_sac_model(obs_size: int, action_size: int, model_config: Mapping[str, Any], *,
                    initial_alpha: float, log_std_bounds: tuple[float, float],
                    encoder: Mapping[str, Any] | None = None) -> KerasSACModel:
    """SACPolicy.make_model's Keras model for a merged ``model_config``: MLP actor and critics,
    behind CNN/per-part encoders when ``encoder`` (observations holding images,
    :func:`~cairn.policy.mlp_actor_critic.policy_encoder_description`) is given.

    Raises ConfigError when the config names a user's model (``keras_model``), which Keras SAC
    does not take.

    >>> model = keras_sac_model(3, 1, {"hidden": [8], "activation": "relu"}, initial_alpha=1.0,
    ...                         log_std_bounds=(-20.0, 2.0))
    >>> model.action_inputs(torch.zeros(2, 3)).shape
    torch.Size([2, 2])
    """
    refuse_keras_model("SAC", model_config)
    return KerasSACModel(obs_size, action_size, hidden=list(model_config["hidden"]),
                         activation=model_config["activation"], initial_alpha=initial_alpha,
                         log_std_bounds=log_std_bounds, encoder=encoder)
