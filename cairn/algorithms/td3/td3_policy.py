"""TD3Policy: a deterministic tanh actor acting in a Box with Gaussian exploration noise, with
TD3's twin critics and target networks."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import gymnasium as gym
import torch

from cairn.algorithms.sac.distribution import (
    box_raw_actions,
    check_bounded_box_actions,
    follow_initial_random_steps,
)
from cairn.algorithms.td3.custom_model import CustomTD3Model
from cairn.algorithms.td3.distribution import GaussianActionNoise
from cairn.algorithms.td3.keras_model import keras_td3_model
from cairn.algorithms.td3.model import TD3Model, TD3ModelBase
from cairn.algorithms.td3.output_shapes import check_td3_outputs
from cairn.config.fields import number
from cairn.policy.custom_model import uses_custom_model
from cairn.policy.keras_config import model_framework
from cairn.policy.merge import deep_merge
from cairn.policy.mlp_actor_critic import DEFAULT_MODEL_CONFIG, builds_config_mlp, policy_encoder_description
from cairn.policy.policy import Policy
from cairn.registry import register_class

if TYPE_CHECKING:
    from cairn.policy.export_hook import ExportGraph

__all__ = ["TD3Policy", "OPTIMIZER_GROUPS", "check_exploration_noise"]

#: The parameter groups of the policy's optimizer, in order: TD3's two optimizers.
OPTIMIZER_GROUPS = ("actor", "critic")


#: The check of ``exploration_noise``, in the config (TD3Config's field) and in the policy.
check_exploration_noise = number(0.0, 10.0)


@register_class
class TD3Policy(Policy):
    """The policy of :class:`~cairn.algorithms.td3.TD3`, for a bounded Box action space.

    Acts with ``a = pi(s) = tanh(...)`` rescaled from [-1, 1] to the Box bounds; exploring,
    it adds ``exploration_noise * N(0, 1)`` in the [-1, 1] scale and clips
    (:class:`~cairn.algorithms.td3.distribution.GaussianActionNoise`). While its sampled
    timesteps are below ``initial_random_steps`` an exploring policy acts uniformly at random
    instead, as SB3's TD3 does before ``learning_starts``.

    Its model (:class:`~cairn.algorithms.td3.model.TD3Model`, or another
    :class:`~cairn.algorithms.td3.model.TD3ModelBase`) holds the actor, both critics
    and both targets; its optimizer is one Adam with a parameter group per TD3 optimizer
    (``actor``, ``critic``, :data:`OPTIMIZER_GROUPS`), both at ``lr`` (SB3's TD3 has one
    learning rate). Adam's state is per parameter and a group steps only when its parameters
    have gradients, so this is exactly two Adams, saved as one state tree.

    Config (merged over :attr:`DEFAULT_CONFIG`): ``model`` (``hidden``, ``activation``: both
    actor and critics; ``framework="keras"``: Keras networks,
    :class:`~cairn.algorithms.td3.keras_model.KerasTD3Model`; ``custom_model`` /
    ``custom_q_model``: a user's :class:`cairn.models.TD3ActorModel` /
    :class:`cairn.models.SACCriticModel`, :class:`~cairn.algorithms.td3.custom_model.CustomTD3Model`),
    ``lr``, ``exploration_noise``, ``initial_random_steps``, ``observation_filter``.

    >>> policy = TD3Policy(gym.spaces.Box(-1, 1, (3,)), gym.spaces.Box(-2, 2, (1,)), seed=0)
    >>> action = policy.compute_single_action([0.1, 0.2, 0.3], explore=False)
    >>> action.shape, bool(abs(action[0]) <= 2)
    ((1,), True)
    """

    #: Box actions are never masked, so :meth:`make_model`'s network is the model as it is.
    model: TD3ModelBase

    #: Off-policy: its learner never reads the behaviour log-probability of a row.
    wants_action_logp = False
    #: The actor (``custom_model``) and the critics (``custom_q_model``) may be a user's.
    model_class_keys = ("custom_model", "custom_q_model")

    DEFAULT_CONFIG: dict[str, Any] = {
        "model": {**DEFAULT_MODEL_CONFIG, "hidden": [400, 300], "activation": "relu"},
        "lr": 1e-3,
        "exploration_noise": 0.1,
        "initial_random_steps": 0,
        "observation_filter": "NoFilter",
    }

    def check_setup(self, action_space: gym.Space[Any], config: Mapping[str, Any]) -> None:
        check_bounded_box_actions("TD3", action_space)
        check_exploration_noise("exploration_noise", config["exploration_noise"])

    def make_distribution(self, action_space: gym.Space[Any]) -> GaussianActionNoise:
        box: gym.spaces.Box = action_space  # type: ignore[assignment]  # a Box: check_setup
        noisy = GaussianActionNoise(box, float(self.config["exploration_noise"]))
        self.action_size = noisy.size
        self.noisy_actions = noisy  # self.dist, typed
        return noisy

    @builds_config_mlp
    def make_model(self) -> TD3ModelBase:
        model_cfg = deep_merge(self.DEFAULT_CONFIG["model"], self.config["model"])
        encoder = policy_encoder_description(self.network_observation_space, self.config)
        if uses_custom_model(model_cfg) or uses_custom_model(model_cfg, "custom_q_model"):
            return CustomTD3Model(  # the user's cairn.models.TD3ActorModel / SACCriticModel
                model_cfg, self.network_observation_space, self.action_space, self.preprocessor.size,
                generator=self.generator, encoder=encoder)
        if model_framework(model_cfg) == "keras":  # Keras networks on the torch backend (docs/keras.md)
            return keras_td3_model(self.preprocessor.size, self.action_size, model_cfg, encoder=encoder)
        return TD3Model(self.preprocessor.size, self.action_size, hidden=list(model_cfg["hidden"]),
                        activation=model_cfg["activation"], encoder=encoder)

    def check_model_outputs(self) -> None:
        """TD3 reads the actor's action, ``[B, A]``, and each critic's ``Q(s, a)``, ``[B]``
        (:mod:`cairn.algorithms.td3.output_shapes`)."""
        check_td3_outputs(self.model, feature_size=self.preprocessor.size, action_size=self.action_size,
                          action_space=self.action_space, model_config=self.config["model"])

    def make_optimizer(self) -> torch.optim.Optimizer:
        """One Adam (torch's default eps, as SB3) with the ``actor`` and ``critic`` groups;
        ``fused`` steps each group's parameters in one kernel."""
        groups, lr = self.model.parameter_groups(), float(self.config["lr"])
        return torch.optim.Adam([{"params": groups[name], "lr": lr, "name": name}
                                 for name in OPTIMIZER_GROUPS], fused=True)

    def set_exploration_noise(self, noise_std: float) -> None:
        """Set ``config["exploration_noise"]`` and the noise the policy acts with."""
        check_exploration_noise("exploration_noise", noise_std)
        self.config["exploration_noise"] = float(noise_std)
        self.noisy_actions.noise_std = float(noise_std)

    def acting_settings(self) -> dict[str, Any]:
        """``exploration_noise``: remote env runners' copies act with the learner's policy's."""
        return {"exploration_noise": float(self.config["exploration_noise"])}

    def set_acting_settings(self, settings: Mapping[str, Any]) -> None:
        if "exploration_noise" in settings:
            self.set_exploration_noise(settings["exploration_noise"])

    def follow_config(self, config: Mapping[str, Any]) -> None:
        """The learning rate and the ``exploration_noise`` of ``config`` (a restore's
        ``config_overrides={"exploration_noise": ...}``)."""
        super().follow_config(config)
        if "exploration_noise" in config:
            self.set_exploration_noise(config["exploration_noise"])
        follow_initial_random_steps(self, config)  # a later learning start acts at random until then

    # ------------------------------------------------------------------------------- act
    compute_raw_actions = box_raw_actions  # uniform during the initial random steps

    def export_graph(self) -> ExportGraph:
        """The export hook: outputs ``action`` (``pi(s)`` rescaled to the Box bounds, as
        :meth:`compute_actions` with ``explore=False``). The critics and targets are not exported."""
        from cairn.algorithms.box_actor_export import box_actor_export_graph

        return box_actor_export_graph(self, GaussianActionNoise, actor=self.model.actor)
