"""The default network: MLP actor and critic, separate or sharing a trunk, with a CNN encoder
in front when the observations hold images (:mod:`cairn.policy.encoders`, ``docs/models.md``)."""

from __future__ import annotations

import itertools
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from cairn.errors import ConfigError, ImageObservationWarning
from cairn.numpy_acting import Dense, LiveViews, View, affine, dense_stack, in_torch, linear
from cairn.policy.custom_model import CUSTOM_MODEL_KEYS, check_custom_model_settings
from cairn.policy.encoders import ObservationEncoder, check_conv_config, encoder_description, image_layout
from cairn.policy.keras_config import FRAMEWORK_MODEL_KEYS, check_framework_settings
from cairn.policy.recurrent_config import RECURRENT_MODEL_KEYS, check_recurrent_settings
from cairn.spaces import is_image_space
from cairn.validation import check_section

__all__ = ["ActorCriticMLP", "ACTIVATIONS", "DEFAULT_MODEL_CONFIG", "check_model_config",
           "VF_STOP_GRADIENT_NEEDS_SHARING", "check_value_sharing", "builds_config_mlp",
           "warn_if_image_observations", "policy_encoder_description", "mlp", "mlp_activation"]

ACTIVATIONS: dict[str, type[nn.Module]] = {
    "tanh": nn.Tanh,
    "relu": nn.ReLU,
    "elu": nn.ELU,
    "silu": nn.SiLU,
}

DEFAULT_MODEL_CONFIG: dict[str, Any] = {
    "hidden": [64, 64],
    "activation": "tanh",
    # PPO: False gives the critic its own layers (RLlib's meaning); True shares the actor's, and
    # vf_stop_gradient=True then keeps the value loss from training them (docs/models.md).
    "vf_share_layers": False,
    "vf_stop_gradient": False,
    "log_std_init": 0.0,
    # The CNN for image observations (cairn.policy.encoders): None is the Nature CNN
    # ([[32, 8, 4], [64, 4, 2], [64, 3, 1]] and a 512-unit dense layer), [] no CNN at all.
    "conv_filters": None,
    "conv_activation": "relu",
    "conv_dense": 512,
}


#: The ConfigError of ``vf_stop_gradient=True`` without ``vf_share_layers=True``.
VF_STOP_GRADIENT_NEEDS_SHARING = (
    "Config 'model.vf_stop_gradient'=True with model.vf_share_layers=False: the critic has its own "
    "layers, so there is no shared layer to stop the value loss's gradient at. Set "
    "vf_share_layers=True (the value head reads the actor's layers, trained by the policy loss "
    "only), or drop vf_stop_gradient.")


def check_model_config(model: Any) -> None:
    """Raise ConfigError for an invalid ``model`` config section."""
    check_section("model", dict(model) if isinstance(model, Mapping) else model,
                  [*DEFAULT_MODEL_CONFIG, *FRAMEWORK_MODEL_KEYS, *CUSTOM_MODEL_KEYS, *RECURRENT_MODEL_KEYS])
    check_framework_settings(model)  # framework / keras_model: optional keys (docs/keras.md)
    check_custom_model_settings(model)  # a user's torch network (cairn.models, docs/models.md)
    check_recurrent_settings(model)  # use_lstm, lstm_cell_size, max_seq_len (docs/ppo.md)
    check_value_sharing(model)
    if model.get("custom_model") is not None and model.get("framework", "torch") != "torch":
        raise ConfigError(
            f"Config 'model.custom_model'={model['custom_model']!r:.100} is a torch model, but "
            f"model.framework={model['framework']!r}: a Keras network is named by "
            "model.keras_model (docs/keras.md).")
    hidden = model.get("hidden", DEFAULT_MODEL_CONFIG["hidden"])
    if not (
        isinstance(hidden, (list, tuple))
        and all(isinstance(h, int) and not isinstance(h, bool) and h > 0 for h in hidden)
    ):
        raise ConfigError(
            f"Config 'model.hidden' must be a list of positive ints, got {hidden!r}."
        )
    activation = model.get("activation", "tanh")
    if not isinstance(activation, str) or activation not in ACTIVATIONS:
        raise ConfigError(
            f"Config 'model.activation'={activation!r} is not supported; choose one of "
            f"{sorted(ACTIVATIONS)}."
        )
    check_conv_config(model)


def check_value_sharing(model: Mapping[str, Any]) -> None:
    """Raise ConfigError unless ``vf_share_layers`` and ``vf_stop_gradient`` are booleans that
    fit together and fit the network: ``vf_stop_gradient`` needs shared layers, and is a setting
    of the built-in torch networks (a Keras or custom network decides its gradients itself)."""
    for key in ("vf_share_layers", "vf_stop_gradient"):
        if not isinstance(model.get(key, False), bool):
            raise ConfigError(f"Config 'model.{key}' must be True or False, got {model[key]!r:.60}.")
    if not model.get("vf_stop_gradient", False):
        return
    if not model.get("vf_share_layers", False):
        raise ConfigError(VF_STOP_GRADIENT_NEEDS_SHARING)
    if model.get("framework", "torch") != "torch":
        raise ConfigError(
            f"Config 'model.vf_stop_gradient'=True with model.framework={model['framework']!r}: the "
            "Keras networks train shared layers with both losses. Drop vf_stop_gradient, or set "
            "framework='torch'.")
    if model.get("custom_model") is not None:
        raise ConfigError(
            f"Config 'model.vf_stop_gradient'=True with model.custom_model="
            f"{model['custom_model']!r:.100}: it is a setting of the built-in networks; a network of "
            "your own stops gradients in its forward (e.g. value_head(features.detach())). Drop "
            "vf_stop_gradient.")


def policy_encoder_description(network_observation_space: gym.Space[Any],
                               config: Mapping[str, Any]) -> dict[str, Any] | None:
    """The :func:`~cairn.policy.encoders.encoder_description` of the observation space a policy's
    network reads, under the policy's ``config["model"]``; images are scaled to [0, 1] only when no
    observation filter normalises them (``config["observation_filter"] == "NoFilter"``)."""
    model_cfg = {**DEFAULT_MODEL_CONFIG, **config["model"]}
    return encoder_description(network_observation_space, model_cfg,
                               scale_images=config.get("observation_filter", "NoFilter") == "NoFilter")


MakeModel = TypeVar("MakeModel", bound=Callable[..., Any])


def builds_config_mlp(make_model: MakeModel) -> MakeModel:
    """Mark a ``Policy.make_model`` that builds an MLP from ``config["model"]["hidden"]``.

    The checkpoint reader then bounds the network's size from the stored spec before building
    it (a hostile spec could ask for a billion units); an override without the mark gets only
    generic checks.
    """
    make_model.builds_config_mlp = True  # type: ignore[attr-defined]
    return make_model


def _unread_images(space: Any) -> list[Any]:
    if isinstance(space, (gym.spaces.Dict, gym.spaces.Tuple)):
        subs = space.spaces.values() if isinstance(space, gym.spaces.Dict) else space.spaces
        return [image for sub in subs for image in _unread_images(sub)]
    return [space] if is_image_space(space) and image_layout(space.shape) is None else []


def warn_if_image_observations(observation_space: Any, model_config: Mapping[str, Any] | None = None, *,
                               stacklevel: int = 2) -> None:
    """Warn (:class:`~cairn.errors.ImageObservationWarning`) when an MLP is about to read images.

    The CNN encoder reads images of rank 2 and 3 (``H x W``, ``H x W x C``, ``C x H x W``);
    an image space (see :func:`cairn.spaces.is_image_space`) of another rank, alone or inside
    a Dict/Tuple, is flattened into one MLP input per pixel and channel, which trains slowly and
    rarely learns. ``model_config={"conv_filters": []}`` (no CNN, on purpose) does not warn.
    Policies call this when they build a new network, not when they are restored (the user saw
    the warning when the policy was first made).
    """
    if model_config is not None and model_config.get("conv_filters") == []:
        return
    unread = _unread_images(observation_space)
    if not unread:
        return
    space = unread[0]
    size = int(np.prod(space.shape))
    warnings.warn(
        f"The observation space {observation_space} holds images {space} that the CNN encoder "
        f"does not read (it reads rank 2 and 3 images), so this policy's MLP flattens each one "
        f"into {size} inputs, and an MLP on raw pixels rarely learns. Fix: merge the stacked "
        "frames into the channel axis (e.g. grey-scale before gymnasium.wrappers."
        "FrameStackObservation), or set model={'conv_filters': []} to flatten them on purpose.",
        ImageObservationWarning,
        stacklevel=stacklevel + 1,
    )


def mlp(sizes: Sequence[int], activation: str) -> nn.Sequential:
    """Linear layers of ``sizes`` (input first), each followed by ``activation``."""
    layers: list[nn.Module] = []
    for fan_in, fan_out in itertools.pairwise(sizes):
        layers += [nn.Linear(fan_in, fan_out), ACTIVATIONS[activation]()]
    return nn.Sequential(*layers)


def mlp_activation(trunk: nn.Sequential, default: str) -> str | None:
    """The name of the activation ``trunk`` runs if it still is what :func:`mlp` builds (a
    ``Linear``, then an activation module of :data:`ACTIVATIONS` with its default settings,
    repeated), ``default`` for an empty trunk, None for any other: the numpy acting path computes
    exactly those, and a module replaced, added or removed since the network was built
    (``model.actor[1] = nn.ReLU()``) leaves a trunk that only torch runs as it is."""
    modules = list(trunk)
    if not modules:
        return default
    names = {cls: name for name, cls in ACTIVATIONS.items()}
    name = names.get(type(modules[1])) if len(modules) % 2 == 0 else None
    if name is None:
        return None
    act = ACTIVATIONS[name]
    settings = act().extra_repr()
    plain = all(type(m) is nn.Linear if i % 2 == 0 else (type(m) is act and m.extra_repr() == settings)
                for i, m in enumerate(modules))
    return name if plain else None


class ActorCriticMLP(nn.Module):
    """``forward(obs) -> (action_inputs, value)`` with a state-independent log-std for Box.

    ``num_outputs`` is the number of distribution inputs the network computes itself; with
    ``free_log_std`` the second half of the inputs (log-std) is a learned vector instead.
    ``encoder`` (an :func:`~cairn.policy.encoders.encoder_description`) puts a CNN encoder in
    front of the MLP: one (``encoder.*``) shared by actor and critic with ``vf_share_layers``,
    else the actor's and the critic's own (``critic_encoder.*``). With ``vf_share_layers`` and
    ``vf_stop_gradient`` the value head reads the shared features with their gradient stopped,
    so only the policy loss trains the shared layers.
    """

    def __init__(
        self,
        obs_size: int,
        num_outputs: int,
        *,
        hidden: Sequence[int] = (64, 64),
        activation: str = "tanh",
        vf_share_layers: bool = False,
        vf_stop_gradient: bool = False,
        free_log_std: bool = False,
        log_std_init: float = 0.0,
        encoder: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__()
        if vf_stop_gradient and not vf_share_layers:
            raise ConfigError(VF_STOP_GRADIENT_NEEDS_SHARING)
        self.vf_stop_gradient = vf_stop_gradient
        self.encoder = None if encoder is None else ObservationEncoder(encoder)
        self.critic_encoder = None if encoder is None or vf_share_layers else ObservationEncoder(encoder)
        sizes = [obs_size if encoder is None else int(encoder["output_size"]), *hidden]
        last = sizes[-1]
        head_outputs = num_outputs // 2 if free_log_std else num_outputs
        self.vf_share_layers = vf_share_layers
        self.activation = activation
        self._numpy_views = LiveViews(_acting_views)
        self.actor = mlp(sizes, activation)
        self.action_head = nn.Linear(last, head_outputs)
        self.critic = None if vf_share_layers else mlp(sizes, activation)
        self.value_head = nn.Linear(last, 1)
        self.log_std = (
            nn.Parameter(torch.full((head_outputs,), float(log_std_init))) if free_log_std else None
        )

    def reset_parameters(self, generator: torch.Generator) -> None:
        """Orthogonal initialisation as in PPO implementations that learn reliably.

        Hidden layers get gain sqrt(2), the action head 0.01 (near-uniform first policy) and
        the value head 1; biases start at zero.
        """
        heads: dict[nn.Module, float] = {self.action_head: 0.01, self.value_head: 1.0}
        for module in self.modules():
            if isinstance(module, (nn.Linear, nn.Conv2d)) and module.bias is not None:
                gain = heads.get(module, 2**0.5)
                nn.init.orthogonal_(module.weight, gain=gain, generator=generator)
                nn.init.zeros_(module.bias)

    def numpy_action_inputs(self, obs: np.ndarray) -> np.ndarray:
        """:meth:`action_inputs` in numpy on views of the live parameters
        (:mod:`cairn.numpy_acting`); a CNN encoder runs in torch (its convolutions dominate,
        not the dispatch)."""
        if self.encoder is not None:
            return in_torch(self.action_inputs, obs, self)
        views = self._numpy_views.get(self)
        if views is None:  # an actor changed since it was built (mlp_activation): torch runs it
            return in_torch(self.action_inputs, obs, self)
        hidden, head, log_std, activation = views
        return affine(dense_stack(obs, hidden, activation), head, log_std)

    def action_inputs(self, obs: torch.Tensor) -> torch.Tensor:
        """The action distribution's inputs for a batch of processed observations."""
        if self.encoder is not None:
            obs = self.encoder(obs)
        out = self.action_head(self.actor(obs))
        if self.log_std is not None:
            out = torch.cat([out, self.log_std.expand_as(out)], dim=-1)
        return out

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        """State-value estimates, shape ``[batch]``."""
        trunk = self.actor if self.critic is None else self.critic
        encoder = self.encoder if self.critic_encoder is None else self.critic_encoder
        if encoder is not None:
            obs = encoder(obs)
        features = trunk(obs)
        return self.value_head(features.detach() if self.vf_stop_gradient else features).squeeze(-1)

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if self.critic is None:
            features = self.actor(obs if self.encoder is None else self.encoder(obs))
            out = self.action_head(features)
            if self.log_std is not None:
                out = torch.cat([out, self.log_std.expand_as(out)], dim=-1)
            value = self.value_head(features.detach() if self.vf_stop_gradient else features)
            return out, value.squeeze(-1)
        return self.action_inputs(obs), self.value(obs)


def _acting_views(model: ActorCriticMLP, view: View
                  ) -> tuple[list[Dense], Dense, np.ndarray | None, str] | None:
    activation = mlp_activation(model.actor, model.activation)  # what the actor's modules run
    if activation is None:
        return None
    hidden = [linear(m, view) for m in model.actor if isinstance(m, nn.Linear)]
    return (hidden, linear(model.action_head, view), None if model.log_std is None else view(model.log_std),
            activation)
