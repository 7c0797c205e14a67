"""DQNPolicy: a Q-network acting epsilon-greedily, with its target network."""

from __future__ import annotations

import copy
import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import gymnasium as gym
import numpy as np
import torch

from cairn.algorithms.dqn.keras_model import KerasQNetwork, keras_q_network
from cairn.algorithms.dqn.model import QNetwork
from cairn.errors import ConfigError, RestoredSettingError
from cairn.models import QModel
from cairn.numpy_acting import in_torch
from cairn.policy.acting import check_action_inputs
from cairn.policy.action_masking import MaskedQModel, check_legal_scores, legal_argmax, random_legal_actions
from cairn.policy.custom_model import build_custom_model, uses_custom_model
from cairn.policy.keras_config import model_framework
from cairn.policy.merge import deep_merge
from cairn.policy.mlp_actor_critic import DEFAULT_MODEL_CONFIG, builds_config_mlp, policy_encoder_description
from cairn.policy.output_shapes import check_q_value_outputs
from cairn.policy.target_network import TargetNetworkPolicy
from cairn.registry import register_class

if TYPE_CHECKING:
    from cairn.policy.export_hook import ExportGraph

__all__ = ["DQNPolicy", "QValueModel", "epsilon_at", "check_epsilon_schedule", "DEFAULT_EPSILON"]

#: A DQNPolicy's network: what its ``make_model`` builds (the built-in Q-network, its Keras twin or
#: a user's :class:`cairn.models.QModel`), or that wrapped by ``mask_model`` for a masked policy.
QValueModel = QNetwork | KerasQNetwork | QModel | MaskedQModel

#: ``[[timestep, epsilon], ...]``: linear from 1.0 to 0.04 over the first 8k steps.
DEFAULT_EPSILON: list[list[float]] = [[0, 1.0], [8_000, 0.04]]


def check_epsilon_schedule(key: str, value: Any) -> None:
    """A schedule is a non-empty list of ``[timestep, epsilon]`` pairs with rising, finite
    timesteps from 0 on (an infinite one is never reached: the schedule would silently stay at
    the value before it)."""
    ok = isinstance(value, (list, tuple)) and len(value) > 0
    previous: float | None = None
    for pair in value if ok else []:
        if not (isinstance(pair, (list, tuple)) and len(pair) == 2
                and all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in pair)
                and math.isfinite(pair[0]) and pair[0] >= 0 and (previous is None or pair[0] > previous)
                and 0.0 <= pair[1] <= 1.0):
            ok = False
            break
        previous = pair[0]
    if not ok:
        raise ConfigError(
            f"Config {key!r}={value!r} is invalid: expected [[timestep, epsilon], ...] with "
            "rising finite timesteps >= 0 and epsilons in [0, 1], e.g. [[0, 1.0], [10000, 0.05]]."
        )


def epsilon_at(schedule: Sequence[Sequence[float]], timestep: int) -> float:
    """Piecewise-linear interpolation of ``schedule``, constant beyond its ends.

    >>> epsilon_at([[0, 1.0], [100, 0.0]], 25)
    0.75
    """
    # Plain Python: called once per sampling step, where np.interp's array setup dominated.
    (t0, v0), *rest = schedule
    if timestep <= t0:
        return float(v0)
    for t1, v1 in rest:
        if timestep < t1:
            return float(v0 + (v1 - v0) * (timestep - t0) / (t1 - t0))
        t0, v0 = t1, v1
    return float(v0)


@register_class
class DQNPolicy(TargetNetworkPolicy):
    """A Q-network for a Discrete action space, acting epsilon-greedily when exploring.

    Owns a target network (a frozen copy of the Q-network, synchronised by the algorithm),
    whose weights and last update time are part of the policy's state, as is the current
    epsilon (:attr:`epsilon`, the schedule's at the policy's sampled steps); so a DQNPolicy
    checkpoint alone is enough to continue training.

    Config (merged over :attr:`DEFAULT_CONFIG`): ``model`` (``hidden``, ``activation``, and
    ``conv_filters``, ``conv_activation``, ``conv_dense`` for image observations: docs/models.md),
    ``lr``, ``observation_filter``, ``dueling`` (dueling heads) and ``epsilon`` (schedule
    over this policy's sampled timesteps, ``[[t, eps], ...]``).

    >>> policy = DQNPolicy(gym.spaces.Box(-1, 1, (4,)), gym.spaces.Discrete(2), seed=0)
    >>> policy.compute_single_action([0.0, 0.1, 0.0, -0.1], explore=False) in (0, 1)
    True
    """

    #: The Q-network (:data:`QValueModel`).
    model: QValueModel
    #: A frozen copy of :attr:`model`, synchronised by the algorithm.
    target_model: QValueModel
    target_numbers = {"last_update_timestep": ("last_target_update", int)}

    #: Off-policy: its learner never reads the behaviour log-probability of a row.
    wants_action_logp = False

    DEFAULT_CONFIG: dict[str, Any] = {
        "model": {**DEFAULT_MODEL_CONFIG, "hidden": [256, 256], "activation": "relu"},
        "lr": 2.3e-3,
        "observation_filter": "NoFilter",
        "dueling": True,
        "epsilon": DEFAULT_EPSILON,
    }

    def check_setup(self, action_space: gym.Space[Any], config: Mapping[str, Any]) -> None:
        if not isinstance(action_space, gym.spaces.Discrete):
            raise ConfigError(
                f"DQN needs a Discrete action space, got {action_space}. Use PPO for Box, "
                "MultiDiscrete or other action spaces."
            )
        check_epsilon_schedule("epsilon", config["epsilon"])

    def finish_setup(self) -> None:
        self.num_actions = int(self.action_space.n)  # type: ignore[attr-defined]
        super().finish_setup()
        self.last_target_update = 0

    @builds_config_mlp
    def make_model(self) -> QNetwork | KerasQNetwork | QModel:
        model_cfg = deep_merge(self.DEFAULT_CONFIG["model"], self.config["model"])
        if uses_custom_model(model_cfg):  # the user's cairn.models.QModel
            return build_custom_model(
                model_cfg, QModel, observation_space=self.network_observation_space,
                action_space=self.action_space, num_outputs=int(self.action_space.n),  # type: ignore[attr-defined]
                generator=self.generator)
        encoder = policy_encoder_description(self.network_observation_space, self.config)
        if model_framework(model_cfg) == "keras":  # Keras Dense layers on the torch backend (docs/keras.md)
            return keras_q_network(self.preprocessor.size, int(self.action_space.n), model_cfg,  # type: ignore[attr-defined]
                                   dueling=bool(self.config["dueling"]), encoder=encoder,
                                   generator=self.generator)
        return QNetwork(
            self.preprocessor.size, int(self.action_space.n), hidden=list(model_cfg["hidden"]),  # type: ignore[attr-defined]
            activation=model_cfg["activation"], dueling=bool(self.config["dueling"]), encoder=encoder,
        )

    def check_model_outputs(self) -> None:
        """DQN reads Q-values ``[B, num_actions]`` (:mod:`cairn.policy.output_shapes`); the
        target network is a copy of the same class."""
        check_q_value_outputs(self.model, feature_size=self.preprocessor.size,
                              mask_size=self.action_mask_size, num_actions=self.num_actions,
                              action_space=self.action_space, model_config=self.config["model"])

    def mask_model(self, model: torch.nn.Module) -> MaskedQModel:
        """Masked Q-values: an illegal action's is :data:`~cairn.policy.action_masking.MASKED_SCORE`,
        so greedy actions, ``max`` and double-Q's ``argmax`` in the targets pick legal ones."""
        return MaskedQModel(model, self.preprocessor.size)

    # ------------------------------------------------------------------------------------- act
    def compute_raw_actions(self, processed_obs: np.ndarray, *, explore: bool) -> np.ndarray:
        """Greedy actions, each replaced by a uniform random one with probability epsilon."""
        mask = self.action_masks(processed_obs)
        if explore:
            n = processed_obs.shape[0]
            explore_mask = np.asarray(self.np_random.random(n) < self.epsilon)
            random_actions = (np.asarray(self.np_random.integers(self.num_actions, size=n)) if mask is None
                              else random_legal_actions(mask, self.np_random))
            if explore_mask.all():  # nothing greedy to compute
                return random_actions
        q_values = self.compute_action_inputs(processed_obs)
        # Every legal Q-value -inf: the legal argmax would be index 0, legal or not. First, as the
        # row's illegal Q-values are then -inf too (mask_scores), which check_action_inputs refuses
        # with a less precise message.
        if mask is not None:
            check_legal_scores(q_values, mask, (self.num_actions,))
        check_action_inputs(self.dist, q_values)  # argmax over a NaN is the NaN's index
        # Among the legal actions only: a legal Q-value may lie below the masked score.
        greedy = q_values.argmax(axis=1) if mask is None else legal_argmax(q_values, mask)
        if explore:
            return np.where(explore_mask, random_actions, greedy)
        return greedy  # type: ignore[no-any-return]

    def compute_action_inputs(self, processed_obs: np.ndarray) -> np.ndarray:
        """Q-values of processed observations (the action distribution's logits)."""
        return self.model.numpy_q_values(processed_obs)

    def compute_q_values(self, obs_batch: Sequence[Any] | np.ndarray) -> np.ndarray:
        """``Q(s, .)`` for a batch of raw observations, ``[batch, num_actions]``, with the model
        in eval mode as the greedy actions (and exported models) take them: a user's Dropout or
        BatchNorm gives the same Q-values whatever mode the model was left in."""
        processed = self.process_observations(obs_batch, update=False)
        return in_torch(self.model, processed, self.model)

    def export_graph(self) -> ExportGraph:
        """The export hook: outputs ``action`` (the greedy action, argmax of Q plus the action
        space's start) and ``q_values``, checked against :meth:`compute_actions` with
        ``explore=False`` and :meth:`compute_q_values`."""
        from cairn.algorithms.dqn.export import q_value_export_graph

        return q_value_export_graph(self, self.model, self.compute_q_values)

    # ------------------------------------------------------------------------- target network
    def update_target(self) -> None:
        """Copy the Q-network's weights into the target network, at this timestep."""
        super().update_target()
        self.last_target_update = self.global_timestep

    # ----------------------------------------------------------------------------------- state
    def follow_config(self, config: Mapping[str, Any]) -> None:
        """The learning rate and the ``epsilon`` schedule of ``config`` (a restore's
        ``config_overrides={"epsilon": ...}``); epsilon is then the new schedule's at the
        policy's timestep (:attr:`epsilon` is derived, so the same schedule gives the restored
        epsilon: exact resume). Another
        ``dueling`` than the restored network's is a ConfigError, raised before anything changes."""
        dueling = config.get("dueling", self.config["dueling"])
        if bool(dueling) != bool(self.config["dueling"]):
            raise RestoredSettingError(
                f"Config 'dueling'={dueling!r}, but this restored policy's Q-network was built with "
                f"dueling={self.config['dueling']!r} and keeps its stored heads. Fix: restore without "
                "that override, or train a new policy with the heads you want.",
                setting="dueling", given=dueling, stored=self.config["dueling"])
        super().follow_config(config)
        if "epsilon" in config and config["epsilon"] != self.config["epsilon"]:
            check_epsilon_schedule("epsilon", config["epsilon"])
            self.config["epsilon"] = copy.deepcopy(config["epsilon"])

    @property
    def epsilon(self) -> float:
        """The exploration rate: the ``epsilon`` schedule's value at this policy's sampled steps
        (``global_timestep``), which its next exploring action uses. Derived, never held: the
        learner's policy of remote env runners never acts, and a held value stayed at the
        schedule's start there (in results and states) while the runners' copies moved on."""
        return epsilon_at(self.config["epsilon"], self.global_timestep)

    def get_exploration_state(self) -> dict[str, Any]:
        """``{"epsilon": ...}``: the current :attr:`epsilon`, for the state's readers (restoring
        derives it again from the schedule and the restored timestep)."""
        return {"epsilon": self.epsilon}
