"""TD3's networks as Keras 3 models on Keras' torch backend (``model.framework="keras"``).

:class:`KerasTD3Model` has :class:`~cairn.algorithms.td3.model.TD3Model`'s parts and interface
(:class:`~cairn.algorithms.td3.model.TD3ModelBase`), so TD3's torch losses and its one Adam with
two groups train it as they train the torch model:

* :class:`KerasDeterministicActor`: a Keras model ``obs -> pi(s)`` (Dense layers ``actor_<i>``
  and ``action_head``, whose activation is the ``tanh``), run layer by layer through each Keras
  layer's own ``call``;
* the twin critics: SAC's :class:`~cairn.algorithms.sac.keras_model.KerasTwinQ`, the same
  network TD3's torch model shares with SAC.

The targets are a second actor and a second twin Q with their own Keras variables. For image
observations each has the CNN/per-part encoder of :mod:`cairn.policy.keras_encoders` in front,
as TD3Model has. Variables are registered by name (``actor.variables.actor_0_kernel``,
``critic.variables.q1_out_bias``, Keras' ``[in, out]`` kernel layout) and initialised from the
policy's generator in TD3Model's order, so a Keras TD3 policy starts from the torch one's weights.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch

from cairn.algorithms.sac.keras_model import KerasTwinQ, keras_box_action, refuse_keras_model
from cairn.algorithms.td3.model import TD3ModelBase
from cairn.policy.keras_backend import builds_float32, import_keras
from cairn.policy.keras_encoders import KerasEncoder, build_keras_encoder
from cairn.policy.keras_model import (
    KERAS_ACTIVATIONS,
    KerasNetwork,
    KerasVariablesModule,
    torch_linear_init,
)
from cairn.policy.keras_user_model import register_keras_variables
from cairn.policy.target_network import frozen

__all__ = ["KerasDeterministicActor", "KerasTD3Model", "keras_td3_model"]


class KerasDeterministicActor(KerasNetwork):
    """``forward(obs) -> pi(s) = tanh(...)`` in [-1, 1] over a Keras model; ``encoder`` (an
    :func:`~cairn.policy.encoders.encoder_description`) puts the actor's own CNN in front."""

    keras_layers = ("trunk", "action_head", "encoder")
    trunk: tuple[Any, ...]  # Keras layers (not torch submodules), in call order
    action_head: Any
    encoder: KerasEncoder | None

    @builds_float32
    def __init__(self, obs_size: int, action_size: int, *, hidden: Sequence[int], activation: str,
                 encoder: Mapping[str, Any] | None = None) -> None:
        super().__init__()
        keras = import_keras()
        dense = keras.layers.Dense
        obs = keras.Input((obs_size,), name="obs", dtype="float32")
        act = KERAS_ACTIVATIONS[activation]
        trunk = tuple(dense(h, activation=act, name=f"actor_{i}") for i, h in enumerate(hidden))
        action_head = dense(action_size, activation="tanh", name="action_head")
        keras_encoder = None if encoder is None else build_keras_encoder(encoder, "encoder")
        x = obs if keras_encoder is None else keras_encoder(obs)
        for layer in trunk:
            x = layer(x)
        network = keras.Model(obs, action_head(x), name="cairn_td3_actor")
        register_keras_variables(self, network, by_layer=True)
        self.trunk, self.action_head, self.encoder = trunk, action_head, keras_encoder

    def reset_parameters(self, generator: torch.Generator) -> None:
        """DeterministicActor's initialisation (the encoder first, then each Dense layer as
        PyTorch's default Linear), from ``generator``."""
        torch_linear_init((*self.trunk, self.action_head), generator, self.encoder)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        x = obs if self.encoder is None else self.encoder.call(obs)
        for layer in self.trunk:
            x = layer.call(x)
        return self.action_head.call(x)  # type: ignore[no-any-return]


class KerasTD3Model(KerasVariablesModule, TD3ModelBase):
    """Everything TD3 learns, with Keras networks: ``actor``, ``critic``, ``target_actor``,
    ``target_critic``. ``network`` is the actor's Keras model (what exports serve)."""

    actor: KerasDeterministicActor
    critic: KerasTwinQ
    target_actor: KerasDeterministicActor
    target_critic: KerasTwinQ

    def __init__(self, obs_size: int, action_size: int, *, hidden: Sequence[int], activation: str,
                 encoder: Mapping[str, Any] | None = None) -> None:
        super().__init__()
        nets: dict[str, Any] = {"hidden": list(hidden), "activation": activation, "encoder": encoder}
        self.actor = KerasDeterministicActor(obs_size, action_size, **nets)
        self.critic = KerasTwinQ(obs_size, action_size, **nets)
        self.target_actor = frozen(KerasDeterministicActor(obs_size, action_size, **nets))
        self.target_critic = frozen(KerasTwinQ(obs_size, action_size, **nets))

    @property
    def network(self) -> Any:
        """The actor's Keras model ``processed obs -> pi(s)``."""
        return self.actor.network

    def keras_serving_outputs(self, processed_obs: Any, dist: Any) -> dict[str, Any]:
        """The export's one output in Keras ops on the processed observations (a KerasTensor):
        ``action``, ``pi(s)`` rescaled to the Box bounds and clipped, as ``dist.to_env`` of the
        deterministic action. ``dist`` is the policy's
        :class:`~cairn.algorithms.td3.distribution.GaussianActionNoise` (its ``bounds``)."""
        return {"action": keras_box_action(self.network(processed_obs), dist.bounds)}


def keras_td3_model(obs_size: int, action_size: int, model_config: Mapping[str, Any], *,
                    encoder: Mapping[str, Any] | None = None) -> KerasTD3Model:
    """TD3Policy.make_model's Keras model for a merged ``model_config``: MLP actor and critics,
    behind CNN/per-part encoders when ``encoder`` is given. ConfigError for a user's Keras model
    (``keras_model``), which Keras TD3 does not take.

    >>> model = keras_td3_model(3, 1, {"hidden": [8], "activation": "relu"})
    >>> model.action_inputs(torch.zeros(2, 3)).shape
    torch.Size([2, 1])
    """
    refuse_keras_model("TD3", model_config)
    return KerasTD3Model(obs_size, action_size, hidden=list(model_config["hidden"]),
                         activation=model_config["activation"], encoder=encoder)
