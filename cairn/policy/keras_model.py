"""Keras 3 networks inside cairn's torch training loop: the actor-critic built from ``model``.

On Keras' torch backend a Keras model is a ``torch.nn.Module`` and its variables are
``torch.nn.Parameter``\\ s, so cairn's torch losses, autograd and optimizers train it as they
train a torch network. :class:`KerasActorCritic` gives a Keras model (``processed obs ->
[action_inputs, value]``) the interface cairn's actor-critic code calls (``forward``,
``action_inputs``, ``value``, ``reset_parameters``, ``numpy_action_inputs``).

The network is either built from the model config (:func:`build_actor_critic_mlp`: the same
layers, sizes and initialisation as :class:`~cairn.policy.mlp_actor_critic.ActorCriticMLP`, with Keras
``Dense`` layers, behind the CNN/per-part encoder of :mod:`cairn.policy.keras_encoders` for
image observations), or by the user's builder named in ``model["keras_model"]``
(``"package.module:builder"``, called as ``builder(obs_size, num_outputs, model_config)``
and returning a ``keras.Model`` from ``[batch, obs_size]`` float32 to ``[action_inputs
[batch, num_outputs], value [batch, 1] or [batch]]``).

Speed: Keras' ``Model.__call__`` walks its graph and runs ``Layer.__call__``'s bookkeeping
for every layer, about five times the cost of the maths for PPO's minibatches of 64. For the
MLP it builds itself, cairn therefore calls each Keras layer's own ``call`` in order
(:class:`MLPLayers`); acting uses numpy on views of the Keras variables, as the torch MLP does.
A user's model always runs through ``Model.__call__``.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import torch
from torch import nn

from cairn.errors import ConfigError
from cairn.numpy_acting import Dense, LiveViews, View, affine, dense_stack, in_torch
from cairn.policy.keras_backend import builds_float32, import_keras, import_tensorflow_quietly
from cairn.policy.keras_config import model_framework
from cairn.policy.keras_encoders import KerasEncoder, build_keras_encoder, keras_variable, layers_in
from cairn.policy.keras_user_model import build_user_keras_model, register_keras_variables
from cairn.policy.mlp_actor_critic import ActorCriticMLP

__all__ = ["KerasActorCritic", "KerasNetwork", "KerasVariablesModule", "MLPLayers", "actor_critic_network",
           "build_actor_critic_mlp", "keras_dense", "make_keras_actor_critic", "orthogonal_init",
           "torch_linear_init"]

#: cairn's activation names -> Keras' (the same functions).
KERAS_ACTIVATIONS = {"tanh": "tanh", "relu": "relu", "elu": "elu", "silu": "silu"}


@dataclass(frozen=True)
class MLPLayers:
    """The Keras layers of a network :func:`build_actor_critic_mlp` built, in call order.

    ``log_std`` is a ``Dense`` layer applied to zeros: its bias is the state-independent
    log-std of a Box policy (its kernel only ever sees zeros, so it gets no gradient), which
    keeps the whole network built-in Keras layers that ``keras.saving.load_model`` reads in
    safe mode without cairn. ``encoder`` (image observations) sits in front of the actor, and
    of the critic too when it shares the trunk; else the critic has its own ``critic_encoder``.
    """

    actor: tuple[Any, ...]
    action_head: Any
    critic: tuple[Any, ...] | None  # None: the critic shares the actor's trunk
    value_head: Any
    log_std: Any | None
    activation: str
    encoder: KerasEncoder | None = None
    critic_encoder: KerasEncoder | None = None


@builds_float32
def build_actor_critic_mlp(obs_size: int, num_outputs: int, *, hidden: Sequence[int], activation: str,
                           vf_share_layers: bool, free_log_std: bool, log_std_init: float,
                           encoder: Mapping[str, Any] | None = None) -> tuple[Any, MLPLayers]:
    """A Keras functional model ``obs -> [action_inputs, value [batch, 1]]`` and its layers,
    with :class:`~cairn.policy.mlp_actor_critic.ActorCriticMLP`'s layout (names ``actor_<i>``,
    ``action_head``, ``critic_<i>``, ``value_head``, ``log_std``; with an ``encoder``
    description, :mod:`cairn.policy.keras_encoders`' ``encoder_*`` layers in front, and
    ``critic_encoder_*`` for the critic unless ``vf_share_layers``)."""
    keras = import_keras()
    layers = keras.layers
    act = KERAS_ACTIVATIONS[activation]
    obs = keras.Input((obs_size,), name="obs", dtype="float32")
    actor = tuple(layers.Dense(h, activation=act, name=f"actor_{i}") for i, h in enumerate(hidden))
    head_outputs = num_outputs // 2 if free_log_std else num_outputs
    action_head = layers.Dense(head_outputs, name="action_head")
    critic = None if vf_share_layers else tuple(
        layers.Dense(h, activation=act, name=f"critic_{i}") for i, h in enumerate(hidden))
    value_head = layers.Dense(1, name="value_head")
    log_std = layers.Dense(head_outputs, kernel_initializer="zeros",
                           bias_initializer=keras.initializers.Constant(float(log_std_init)),
                           name="log_std") if free_log_std else None
    actor_encoder = None if encoder is None else build_keras_encoder(encoder, "encoder")
    critic_encoder = (None if encoder is None or vf_share_layers
                      else build_keras_encoder(encoder, "critic_encoder"))
    x = obs if actor_encoder is None else actor_encoder(obs)
    for layer in actor:
        x = layer(x)
    inputs = action_head(x)
    if log_std is not None:
        zeros = keras.ops.zeros_like(obs[:, :1])
        inputs = layers.Concatenate(name="action_inputs")([inputs, log_std(zeros)])
    y = x
    if critic is not None:
        y = obs if critic_encoder is None else critic_encoder(obs)
        for layer in critic:
            y = layer(y)
    value = value_head(y)
    model = keras.Model(obs, [inputs, value], name="cairn_actor_critic")
    return model, MLPLayers(actor, action_head, critic, value_head, log_std, activation,
                            actor_encoder, critic_encoder)


def orthogonal_init(kernel: torch.Tensor, gain: float, generator: torch.Generator) -> None:
    """``torch.nn.init.orthogonal_`` of the torch layer ``kernel`` stands for (``[out, in]``, the
    transpose of Keras' ``[in, out]``), so that the same generator gives the same weights."""
    nn.init.orthogonal_(kernel.T, gain=gain, generator=generator)


def torch_linear_init(layers: Iterable[Any], generator: torch.Generator,
                      encoder: KerasEncoder | None = None) -> None:
    """PyTorch's default initialisation of ``encoder`` (None: none), then of each Keras ``Dense``
    layer of ``layers`` as of an ``nn.Linear``: drawn in torch's ``[out, in]`` order (``uniform_``
    fills memory in order) and stored transposed in Keras' ``[in, out]`` kernel, so that the same
    generator gives the torch network's weights."""
    if encoder is not None:
        encoder.reset_parameters(generator, orthogonal=False)
    with torch.no_grad():
        for layer in layers:
            kernel, bias = keras_variable(layer, "kernel"), keras_variable(layer, "bias")
            bound = 1.0 / math.sqrt(kernel.shape[0])
            weight = torch.empty(kernel.shape[1], kernel.shape[0])  # torch's [out, in]
            kernel.copy_(weight.uniform_(-bound, bound, generator=generator).T)
            nn.init.uniform_(bias, -bound, bound, generator=generator)


class KerasVariablesModule(nn.Module):
    """A module whose parameters are Keras variables' tensors (a Keras network, or a model of
    several): :meth:`load_state_dict` copies into those tensors, never replaces them."""

    def load_state_dict(self, state_dict: Mapping[str, Any], strict: bool = True,
                        assign: bool = False) -> Any:
        """Copy into the Keras variables' tensors, never replace them (``assign`` is ignored):
        a Keras variable keeps the ``Parameter`` it was created with, so a replaced one would no
        longer be the variable Keras computes with and saves (a restore adopts arrays this way)."""
        return super().load_state_dict(state_dict, strict=strict, assign=False)


class KerasNetwork(KerasVariablesModule):
    """A module over a Keras model ``network`` whose variables are its parameters (registered by
    :func:`register_keras_variables`). ``keras_layers`` names the attributes that hold its Keras
    layers (plain attributes, no torch submodules: a layer, or a tuple, mapping or dataclass of
    them), which a copy finds again by name in its own Keras model."""

    network: Any  # the keras.Model
    keras_layers: ClassVar[tuple[str, ...]] = ()

    def __setattr__(self, name: str, value: Any) -> None:
        if name in self.keras_layers:  # Keras layers: the network's, no torch submodules
            object.__setattr__(self, name, value)
        else:
            super().__setattr__(name, value)

    def __deepcopy__(self, memo: dict[int, Any]) -> Any:
        """``copy.deepcopy``: Keras copies a variable's tensor without the memo, and its layers by
        config, so the copy's ``variables`` and ``keras_layers`` are re-pointed at the copied
        Keras variables and layers (else a target network would train, save and load tensors its
        Keras layers never read)."""
        import_tensorflow_quietly()  # Keras copies a model through its saving code, which imports it
        cls = type(self)
        new = cls.__new__(cls)
        memo[id(self)] = new
        for key, value in self.__dict__.items():
            object.__setattr__(new, key, copy.deepcopy(value, memo))
        names: list[str] = getattr(self, "variable_names")  # noqa: B009 - aligned with network.variables (ParameterDict keeps its own order)
        network: Any = new.__dict__["network"]  # set with object.__setattr__: no submodule
        tensors = [v.value for v in network.variables]
        new.variables = nn.ParameterDict(dict(zip(names, tensors, strict=True)))
        for name in self.keras_layers:
            setattr(new, name, layers_in(getattr(self, name), network))
        return new


class KerasActorCritic(KerasNetwork):
    """``forward(obs) -> (action_inputs, value)`` over a Keras model, whose variables are this
    module's parameters (``variables.<layer>_<variable>``, e.g. ``variables.actor_0_kernel``).

    ``layers`` (:class:`MLPLayers`, for the MLP cairn builds) enables the per-layer torch path
    and the numpy acting path; without it the Keras model is called as a whole.
    """

    keras_layers = ("mlp_layers",)

    def __init__(self, network: Any, layers: MLPLayers | None = None) -> None:
        super().__init__()
        register_keras_variables(self, network, by_layer=layers is not None)
        self.activation = layers.activation if layers is not None else None
        self.mlp_layers = layers
        self._numpy_views = LiveViews(_acting_views)

    # ------------------------------------------------------------------------------- init
    def reset_parameters(self, generator: torch.Generator) -> None:
        """:meth:`ActorCriticMLP.reset_parameters
        <cairn.policy.mlp_actor_critic.ActorCriticMLP.reset_parameters>`
        on the Keras layers, in the same order from the same generator: a Keras policy starts
        from the weights a torch policy with the same seed starts from (the encoders first, as
        ActorCriticMLP registers them first). A user's model keeps the initialisation its
        builder gave it."""
        layers: MLPLayers | None = self.mlp_layers  # type: ignore[assignment]
        if layers is None:
            return
        for encoder in (layers.encoder, layers.critic_encoder):
            if encoder is not None:
                encoder.reset_parameters(generator, orthogonal=True)
        order = [*((layer, 2**0.5) for layer in layers.actor), (layers.action_head, 0.01),
                 *((layer, 2**0.5) for layer in layers.critic or ()), (layers.value_head, 1.0)]
        with torch.no_grad():
            for layer, gain in order:
                orthogonal_init(keras_variable(layer, "kernel"), gain, generator)
                keras_variable(layer, "bias").zero_()

    # ---------------------------------------------------------------------------- compute
    def _run(self, layers: Sequence[Any], x: torch.Tensor,
             encoder: KerasEncoder | None = None) -> torch.Tensor:
        if encoder is not None:
            x = encoder.call(x)
        for layer in layers:
            x = layer.call(x)
        return x

    def _critic_features(self, layers: MLPLayers, obs: torch.Tensor) -> torch.Tensor:
        if layers.critic is None:  # vf_share_layers: the actor's encoder and trunk
            return self._run(layers.actor, obs, layers.encoder)
        return self._run(layers.critic, obs, layers.critic_encoder)

    def _log_std(self, layers: MLPLayers, out: torch.Tensor) -> torch.Tensor:
        log_std = keras_variable(layers.log_std, "bias")
        return torch.cat([out, log_std.expand_as(out)], dim=-1)

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        layers: MLPLayers | None = self.mlp_layers  # type: ignore[assignment]
        if layers is None:
            inputs, value = self.network(obs, training=self.training)
            return inputs, _batch_value(value)
        features = self._run(layers.actor, obs, layers.encoder)
        out = layers.action_head.call(features)
        if layers.log_std is not None:
            out = self._log_std(layers, out)
        trunk = features if layers.critic is None else self._critic_features(layers, obs)
        return out, layers.value_head.call(trunk).squeeze(-1)

    def action_inputs(self, obs: torch.Tensor) -> torch.Tensor:
        """The action distribution's inputs for a batch of processed observations."""
        layers: MLPLayers | None = self.mlp_layers  # type: ignore[assignment]
        if layers is None:
            return self.network(obs, training=self.training)[0]  # type: ignore[no-any-return]
        out = layers.action_head.call(self._run(layers.actor, obs, layers.encoder))
        return out if layers.log_std is None else self._log_std(layers, out)

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        """State-value estimates, shape ``[batch]``."""
        layers: MLPLayers | None = self.mlp_layers  # type: ignore[assignment]
        if layers is None:
            return _batch_value(self.network(obs, training=self.training)[1])
        return layers.value_head.call(self._critic_features(layers, obs)).squeeze(-1)  # type: ignore[no-any-return]

    def numpy_action_inputs(self, obs: np.ndarray) -> np.ndarray:
        """:meth:`action_inputs` in numpy on views of the Keras variables (cairn's MLP only:
        a user's model runs through Keras, see :meth:`action_inputs`; a CNN encoder runs in
        torch, where its convolutions, not the dispatch, dominate)."""
        layers: MLPLayers | None = self.mlp_layers  # type: ignore[assignment]
        if layers is None or layers.encoder is not None:
            return in_torch(self.action_inputs, obs, self)
        hidden, head, log_std = self._numpy_views.get(self)
        return affine(dense_stack(obs, hidden, layers.activation), head, log_std)


def _batch_value(value: torch.Tensor) -> torch.Tensor:
    """A user's value output ``[batch, 1]`` as ``[batch]``; any other shape as it is, for the
    output check to name (reshaping ``[batch, 2]`` raised torch's own error instead)."""
    return value.squeeze(-1) if value.dim() == 2 and value.shape[-1] == 1 else value


def keras_dense(layer: Any, view: View) -> Dense:
    """A Keras ``Dense`` layer's ``(kernel [in, out], bias)`` as numpy views."""
    return view(keras_variable(layer, "kernel")), view(keras_variable(layer, "bias"))


def _acting_views(model: KerasActorCritic, view: View) -> tuple[list[Dense], Dense, np.ndarray | None]:
    layers: MLPLayers = model.mlp_layers  # type: ignore[assignment]
    return ([keras_dense(layer, view) for layer in layers.actor], keras_dense(layers.action_head, view),
            None if layers.log_std is None else view(keras_variable(layers.log_std, "bias")))


def make_keras_actor_critic(obs_size: int, num_outputs: int, model_config: Mapping[str, Any], *,
                            free_log_std: bool, encoder: Mapping[str, Any] | None = None,
                            generator: torch.Generator | None = None) -> KerasActorCritic:
    """The :class:`KerasActorCritic` ``model_config`` describes: the user's builder
    (``keras_model``) when set, else the MLP of ``hidden``/``activation``/``vf_share_layers``
    behind the CNN/per-part ``encoder`` (an :func:`~cairn.policy.encoders.encoder_description`;
    None: the MLP reads the processed row). A user's model reads the processed row whatever
    the observations hold (images as raw values) and encodes them as it likes; its builder
    runs seeded from ``generator`` (the policy's) when given (:func:`build_user_keras_model`)."""
    reference = model_config.get("keras_model")
    if reference is None:
        network, layers = build_actor_critic_mlp(
            obs_size, num_outputs, hidden=list(model_config["hidden"]), activation=model_config["activation"],
            vf_share_layers=bool(model_config["vf_share_layers"]), free_log_std=free_log_std,
            log_std_init=float(model_config["log_std_init"]), encoder=encoder)
        return KerasActorCritic(network, layers)
    return KerasActorCritic(build_user_keras_model(
        reference, obs_size, num_outputs, model_config, outputs=2, generator=generator,
        expected=f"two outputs, [action_inputs [batch, {num_outputs}], value [batch, 1]]"))


def actor_critic_network(model_config: Mapping[str, Any],
                         generator: torch.Generator | None = None) -> Callable[..., nn.Module]:
    """What ``Policy.make_model`` builds for a merged model config: ActorCriticMLP, or for
    ``framework="keras"`` a :class:`KerasActorCritic` taking ActorCriticMLP's arguments (a user's
    Keras builder seeded from ``generator``, the policy's, when given)."""
    if model_framework(model_config) != "keras":
        return ActorCriticMLP

    def build(obs_size: int, num_outputs: int, *, hidden: Sequence[int], activation: str,
              vf_share_layers: bool, free_log_std: bool, log_std_init: float,
              encoder: Mapping[str, Any] | None = None, vf_stop_gradient: bool = False) -> KerasActorCritic:
        if vf_stop_gradient:  # refused by the config check first (check_value_sharing)
            raise ConfigError("Config 'model.vf_stop_gradient'=True is not supported by Keras networks: "
                              "they train shared layers with both losses. Drop vf_stop_gradient.")
        settings = {**model_config, "hidden": list(hidden), "activation": activation,
                    "vf_share_layers": vf_share_layers, "log_std_init": log_std_init}
        return make_keras_actor_critic(obs_size, num_outputs, settings, free_log_std=free_log_std,
                                       encoder=encoder, generator=generator)

    return build
