"""SACPolicy: a squashed-Gaussian actor acting in a Box, with SAC's critics, targets and alpha."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import gymnasium as gym
import numpy as np
import torch

from cairn.algorithms.sac.custom_model import CustomSACModel
from cairn.algorithms.sac.distribution import (
    SquashedGaussian,
    box_raw_actions,
    check_bounded_box_actions,
    follow_initial_random_steps,
)
from cairn.algorithms.sac.keras_model import keras_sac_model
from cairn.algorithms.sac.model import LOG_STD_MAX, LOG_STD_MIN, SACModel
from cairn.algorithms.sac.model_base import SACModelBase
from cairn.algorithms.sac.output_shapes import check_sac_outputs
from cairn.errors import ConfigError
from cairn.policy.custom_model import uses_custom_model
from cairn.policy.keras_config import model_framework
from cairn.policy.merge import deep_merge
from cairn.policy.mlp_actor_critic import DEFAULT_MODEL_CONFIG, builds_config_mlp, policy_encoder_description
from cairn.policy.policy import Policy
from cairn.registry import register_class

if TYPE_CHECKING:
    from cairn.policy.export_hook import ExportGraph

__all__ = ["SACPolicy", "check_target_entropy", "OPTIMIZER_GROUPS"]

#: The parameter groups of the policy's optimizer, in order: SAC's three optimizers.
OPTIMIZER_GROUPS = ("actor", "critic", "alpha")


def check_target_entropy(key: str, value: Any) -> None:
    """``"auto"`` or a real number."""
    if value != "auto" and (not isinstance(value, (int, float)) or isinstance(value, bool)
                            or not np.isfinite(value)):
        raise ConfigError(
            f"Config {key!r}={value!r} is invalid: expected 'auto' (minus the number of action "
            "dimensions) or a finite number, e.g. -1.0."
        )


@register_class
class SACPolicy(Policy):
    """The policy of :class:`~cairn.algorithms.sac.SAC`, for a bounded Box action space.

    Acts with ``a = tanh(u)``, ``u ~ N(mean(s), std(s))``, rescaled from [-1, 1] to the Box
    bounds (``explore=False``: ``tanh(mean)``); raw actions (what replay stores and the critics
    read) are the squashed values in [-1, 1]. While its sampled timesteps are below
    ``initial_random_steps`` an exploring policy acts uniformly at random instead, as SB3's
    SAC does before ``learning_starts``.

    Its model (:class:`~cairn.algorithms.sac.model.SACModel`) holds the actor, both critics,
    both target critics and ``log_alpha``; its optimizer is one Adam with a parameter group
    per SAC optimizer (``actor``, ``critic``, ``alpha``, see :data:`OPTIMIZER_GROUPS`), each
    with its own learning rate. Adam's state is per parameter and a group steps only when its
    parameters have gradients, so this is exactly three Adams, saved as one state tree.

    Config (merged over :attr:`DEFAULT_CONFIG`): ``model`` (``hidden``, ``activation``: both
    actor and critics), ``lr`` (the learning rate of every group whose own is None),
    ``actor_lr``, ``critic_lr``, ``alpha_lr``, ``initial_alpha``, ``target_entropy``
    (``"auto"``: minus the action dimensions), ``initial_random_steps``,
    ``observation_filter``.

    >>> policy = SACPolicy(gym.spaces.Box(-1, 1, (3,)), gym.spaces.Box(-2, 2, (1,)), seed=0)
    >>> action = policy.compute_single_action([0.1, 0.2, 0.3], explore=False)
    >>> action.shape, bool(abs(action[0]) <= 2)
    ((1,), True)
    """

    #: Box actions are never masked, so :meth:`make_model`'s network is the model as it is.
    model: SACModelBase

    #: Off-policy: its learner never reads the behaviour log-probability of a row.
    wants_action_logp = False
    #: The actor (``custom_model``) and the critics (``custom_q_model``) may be a user's.
    model_class_keys = ("custom_model", "custom_q_model")

    DEFAULT_CONFIG: dict[str, Any] = {
        "model": {**DEFAULT_MODEL_CONFIG, "hidden": [256, 256], "activation": "relu"},
        "lr": 3e-4,
        "actor_lr": None,
        "critic_lr": None,
        "alpha_lr": None,
        "initial_alpha": 1.0,
        "target_entropy": "auto",
        "initial_random_steps": 0,
        "observation_filter": "NoFilter",
    }

    def check_setup(self, action_space: gym.Space[Any], config: Mapping[str, Any]) -> None:
        check_bounded_box_actions("SAC", action_space)
        check_target_entropy("target_entropy", config["target_entropy"])
        alpha = config["initial_alpha"]
        if not isinstance(alpha, (int, float)) or isinstance(alpha, bool) or not 0 < alpha < float("inf"):
            raise ConfigError(f"Config 'initial_alpha'={alpha!r} is invalid: "
                              "expected a number > 0, e.g. 1.0.")

    def make_distribution(self, action_space: gym.Space[Any]) -> SquashedGaussian:
        squashed = SquashedGaussian(action_space)  # type: ignore[arg-type]  # a Box: check_setup
        self.action_size = squashed.size
        return squashed

    @builds_config_mlp
    def make_model(self) -> SACModelBase:
        model_cfg = deep_merge(self.DEFAULT_CONFIG["model"], self.config["model"])
        encoder = policy_encoder_description(self.network_observation_space, self.config)
        if uses_custom_model(model_cfg) or uses_custom_model(model_cfg, "custom_q_model"):
            return CustomSACModel(  # the user's cairn.models.SACActorModel / SACCriticModel
                model_cfg, self.network_observation_space, self.action_space, self.preprocessor.size,
                initial_alpha=float(self.config["initial_alpha"]), generator=self.generator,
                encoder=encoder)
        # Keras actor and critics on the torch backend (docs/keras.md)
        if model_framework(model_cfg) == "keras":
            return keras_sac_model(
                self.preprocessor.size, int(np.prod(self.action_space.shape)), model_cfg,  # type: ignore[arg-type]
                initial_alpha=float(self.config["initial_alpha"]), log_std_bounds=(LOG_STD_MIN, LOG_STD_MAX),
                encoder=encoder)
        return SACModel(
            self.preprocessor.size, int(np.prod(self.action_space.shape)),  # type: ignore[arg-type]
            hidden=list(model_cfg["hidden"]), activation=model_cfg["activation"],
            initial_alpha=float(self.config["initial_alpha"]), encoder=encoder,
        )

    def check_model_outputs(self) -> None:
        """SAC reads the actor's ``(mean, log_std)``, ``[B, A]`` each, and each critic's ``Q(s, a)``,
        ``[B]`` (:mod:`cairn.algorithms.sac.output_shapes`)."""
        check_sac_outputs(self.model, feature_size=self.preprocessor.size, action_size=self.action_size,
                          action_space=self.action_space, model_config=self.config["model"])

    def group_learning_rates(self) -> dict[str, float]:
        """The learning rate of each optimizer group (its own, else ``lr``)."""
        lr = float(self.config["lr"])
        return {name: lr if self.config[f"{name}_lr"] is None else float(self.config[f"{name}_lr"])
                for name in OPTIMIZER_GROUPS}

    def make_optimizer(self) -> torch.optim.Optimizer:
        """One Adam (torch's default eps, as SB3) with the ``actor``, ``critic`` and ``alpha``
        groups; ``fused`` steps each group's parameters in one kernel."""
        groups, lrs = self.model.parameter_groups(), self.group_learning_rates()
        return torch.optim.Adam([{"params": groups[name], "lr": lrs[name], "name": name}
                                 for name in OPTIMIZER_GROUPS], fused=True)

    def set_learning_rate(self, lr: float) -> None:
        """Set ``config["lr"]``, and the learning rate of every group that has none of its own."""
        self.config["lr"] = float(lr)
        self.apply_learning_rates()

    def follow_config(self, config: Mapping[str, Any]) -> None:
        """The learning rates (``lr`` and the groups' own, ``actor_lr``, ...) and the
        ``target_entropy`` of ``config`` (a restore's ``config_overrides={"target_entropy":
        ...}``: alpha learns towards it from then on); the Adam moments stay."""
        super().follow_config(config)
        self.set_group_learning_rates(config)  # the rates config names; the others stay
        if "target_entropy" in config:
            check_target_entropy("target_entropy", config["target_entropy"])
            self.config["target_entropy"] = config["target_entropy"]
        follow_initial_random_steps(self, config)  # a later learning start acts at random until then

    def set_group_learning_rates(self, rates: Mapping[str, Any]) -> None:
        """Set ``lr``, ``actor_lr``, ``critic_lr``, ``alpha_lr`` from ``rates`` (keys it lacks
        stay), and give the optimizer groups the result; their Adam moments stay."""
        for key in ("lr", *(f"{name}_lr" for name in OPTIMIZER_GROUPS)):
            if key in rates:
                self.config[key] = None if rates[key] is None else float(rates[key])
        self.apply_learning_rates()

    def apply_learning_rates(self) -> None:
        """Give each optimizer group its configured learning rate."""
        lrs = self.group_learning_rates()
        for group in self.optimizer.param_groups:
            group["lr"] = lrs[group["name"]]

    def set_state(self, state: Mapping[str, Any]) -> None:
        super().set_state(state)
        self.apply_learning_rates()  # the config's rates win over the stored ones

    # --------------------------------------------------------------------------- entropy
    @property
    def target_entropy(self) -> float:
        """``target_entropy``; ``"auto"`` is ``-dim(A)`` (Haarnoja et al. 2018)."""
        value = self.config["target_entropy"]
        return -float(self.action_size) if value == "auto" else float(value)

    @property
    def alpha(self) -> float:
        """The current entropy temperature ``exp(log_alpha)``."""
        return float(self.model.log_alpha.detach().exp()[0])

    # ------------------------------------------------------------------------------- act
    compute_raw_actions = box_raw_actions  # uniform during the initial random steps

    def export_graph(self) -> ExportGraph:
        """The export hook: outputs ``action`` (``tanh(mean)`` rescaled to the Box bounds, as
        :meth:`compute_actions` with ``explore=False``), ``mean`` and ``log_std`` (the
        pre-squash Gaussian's). The critics are not exported."""
        from cairn.algorithms.box_actor_export import box_actor_export_graph

        return box_actor_export_graph(self, SquashedGaussian, actor=self.model.actor)
