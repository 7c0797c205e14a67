"""DQN's Q-network as a Keras 3 model on Keras' torch backend (``model.framework="keras"``).

:class:`KerasQNetwork` has :class:`~cairn.algorithms.dqn.model.QNetwork`'s layout (hidden
``trunk_<i>`` Dense layers, an ``advantage_head`` and, dueling, a ``value_head`` combined as
``Q = V + A - mean_a A`` with ``keras.ops``; for image observations the CNN/per-part encoder
of :mod:`cairn.policy.keras_encoders` in front), its initialisation from the policy's generator,
and its interface (``forward``, ``action_inputs``, ``numpy_q_values``, ``reset_parameters``),
so DQN's torch loss and Adam train it as they train the torch network (through the torch
update: the numpy update covers the torch QNetwork only). Like the actor-critic
(:mod:`cairn.policy.keras_model`), the Keras variables are registered by name and cairn's MLP
is run layer by layer (each Keras layer's own ``call``); a user's Keras model
(``model.keras_model``, one output: the Q-values) runs through ``Model.__call__``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from cairn.numpy_acting import in_torch
from cairn.policy.keras_backend import builds_float32, import_keras
from cairn.policy.keras_encoders import KerasEncoder, build_keras_encoder
from cairn.policy.keras_model import (
    KERAS_ACTIVATIONS,
    KerasNetwork,
    torch_linear_init,
)
from cairn.policy.keras_user_model import build_user_keras_model, register_keras_variables

__all__ = ["KerasQNetwork", "QLayers", "build_q_mlp", "keras_q_network"]


@dataclass(frozen=True)
class QLayers:
    """The Keras layers of the Q-network :func:`build_q_mlp` built, in call order."""

    trunk: tuple[Any, ...]
    advantage_head: Any  # the Q head when not dueling
    value_head: Any | None  # None: plain (not dueling) head
    encoder: KerasEncoder | None = None  # image observations: in front of the trunk

    @property
    def dense(self) -> tuple[Any, ...]:
        """Every Dense layer, in QNetwork's initialisation order."""
        return (*self.trunk, self.advantage_head, *(() if self.value_head is None else (self.value_head,)))


@builds_float32
def build_q_mlp(obs_size: int, num_actions: int, *, hidden: Sequence[int], activation: str,
                dueling: bool, encoder: Mapping[str, Any] | None = None) -> tuple[Any, QLayers]:
    """A Keras functional model ``obs -> Q [batch, num_actions]`` with QNetwork's layout,
    behind the ``encoder_*`` layers of :mod:`cairn.policy.keras_encoders` when ``encoder``
    (an :func:`~cairn.policy.encoders.encoder_description`) is given."""
    keras = import_keras()
    layers, ops = keras.layers, keras.ops
    obs = keras.Input((obs_size,), name="obs", dtype="float32")
    trunk = tuple(layers.Dense(h, activation=KERAS_ACTIVATIONS[activation], name=f"trunk_{i}")
                  for i, h in enumerate(hidden))
    advantage_head = layers.Dense(num_actions, name="advantage_head")
    value_head = layers.Dense(1, name="value_head") if dueling else None
    keras_encoder = None if encoder is None else build_keras_encoder(encoder, "encoder")
    x = obs if keras_encoder is None else keras_encoder(obs)
    for layer in trunk:
        x = layer(x)
    q = advantage_head(x)
    if value_head is not None:
        q = ops.subtract(ops.add(value_head(x), q), ops.mean(q, axis=1, keepdims=True))
    q_layers = QLayers(trunk, advantage_head, value_head, keras_encoder)
    return keras.Model(obs, q, name="cairn_q_network"), q_layers


class KerasQNetwork(KerasNetwork):
    """``forward(obs) -> Q(obs, .)`` over a Keras model whose variables are this module's
    parameters (``variables.<layer>_<variable>`` for cairn's MLP, ``variables.variable_<i>``
    for a user's model, as in :class:`~cairn.policy.keras_model.KerasActorCritic`).

    ``layers`` (:class:`QLayers`, for the MLP cairn builds) enables the layer-by-layer path and
    QNetwork's initialisation; without it the Keras model is called as a whole.
    """

    keras_layers = ("q_layers",)

    def __init__(self, network: Any, layers: QLayers | None = None) -> None:
        super().__init__()
        register_keras_variables(self, network, by_layer=layers is not None)
        self.q_layers = layers

    def reset_parameters(self, generator: torch.Generator) -> None:
        """QNetwork's initialisation (PyTorch's default Linear init) from the same generator,
        in the same order (the encoder first, as QNetwork does): a Keras DQN policy starts from
        the torch one's weights. A user's model keeps the initialisation its builder gave it."""
        layers: QLayers | None = self.q_layers  # type: ignore[assignment]
        if layers is None:
            return
        torch_linear_init(layers.dense, generator, layers.encoder)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        layers: QLayers | None = self.q_layers  # type: ignore[assignment]
        if layers is None:
            return self.network(obs, training=self.training)  # type: ignore[no-any-return]
        x = obs if layers.encoder is None else layers.encoder.call(obs)
        for layer in layers.trunk:
            x = layer.call(x)
        advantages = layers.advantage_head.call(x)
        if layers.value_head is None:
            return advantages  # type: ignore[no-any-return]
        return layers.value_head.call(x) + advantages - advantages.mean(dim=1, keepdim=True)  # type: ignore[no-any-return]

    def action_inputs(self, obs: torch.Tensor) -> torch.Tensor:
        """Q-values, read as the logits of a Categorical whose mode is the greedy action."""
        return self(obs)  # type: ignore[no-any-return]

    def numpy_q_values(self, obs: np.ndarray) -> np.ndarray:
        """:meth:`forward` for numpy observations (acting and the learner's targets)."""
        return in_torch(self, np.ascontiguousarray(obs, dtype=np.float32), self)


def keras_q_network(obs_size: int, num_actions: int, model_config: Mapping[str, Any], *, dueling: bool,
                    encoder: Mapping[str, Any] | None = None,
                    generator: torch.Generator | None = None) -> KerasQNetwork:
    """DQNPolicy.make_model's Keras network: the user's builder (``model.keras_model``) when
    set, called as ``builder(obs_size, num_actions, model_config)`` and returning a
    ``keras.Model`` from ``[batch, obs_size]`` to Q-values ``[batch, num_actions]`` (``dueling``
    and any encoding of images, which it reads as raw values, are then the model's own
    business), else QNetwork's MLP of ``hidden``/``activation`` behind the CNN/per-part
    ``encoder`` (an :func:`~cairn.policy.encoders.encoder_description`, or None)."""
    reference = model_config.get("keras_model")
    if reference is None:
        network, layers = build_q_mlp(obs_size, num_actions, hidden=list(model_config["hidden"]),
                                      activation=model_config["activation"], dueling=dueling, encoder=encoder)
        return KerasQNetwork(network, layers)
    return KerasQNetwork(build_user_keras_model(
        reference, obs_size, num_actions, model_config, outputs=1,
        expected=f"one output for DQN, the Q-values [batch, {num_actions}]", generator=generator))
