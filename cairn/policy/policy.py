"""Policy: maps observations to actions, and carries everything needed to keep learning."""

from __future__ import annotations

import contextlib
import copy
import os
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, overload

import gymnasium as gym
import numpy as np
import torch

from cairn.errors import ConfigError, RestoredSettingError
from cairn.policy import files as policy_files
from cairn.policy.acting import (
    ObservationInput,
    action_inputs,
    check_action_logp,
    raw_actions,
    raw_actions_and_logp,
    single_action,
)
from cairn.policy.action_masking import (
    MaskedActorCritic,
    MaskedObservationPreprocessor,
    action_sizes,
    check_legal_scores,
    checked_masks,
    legal_actions,
    make_preprocessor,
)
from cairn.policy.config_overrides import check_model_follows
from cairn.policy.custom_model import (
    model_references,
    refuse_unbuilt_model_classes,
    refuse_unmet_mask_requests,
    uses_custom_model,
)
from cairn.policy.distributions import ActionDistribution, distribution_for
from cairn.policy.filters import MeanStdFilter, NoFilter, make_filter
from cairn.policy.merge import deep_merge
from cairn.policy.mlp_actor_critic import (
    DEFAULT_MODEL_CONFIG,
    builds_config_mlp,
    check_model_config,
    warn_if_image_observations,
)
from cairn.policy.network_choice import actor_critic_model
from cairn.policy.output_shapes import check_actor_critic_outputs
from cairn.policy.recurrent import RecurrentActing, RecurrentState, recurrent_acting
from cairn.policy.recurrent_config import recurrent_settings
from cairn.policy.spec import PolicySpec
from cairn.policy.state_check import check_finite_policy_state
from cairn.policy.training_state import PolicyTrainingState, TrainingStateField
from cairn.policy.weights import adopt_weights, check_weights, load_weights, weights_to_numpy
from cairn.registry import class_reference, register_class, resolve_class
from cairn.space_json import space_from_json
from cairn.spaces import ObservationPreprocessor, check_action_space

if TYPE_CHECKING:
    from cairn.checkpoint.reader import CheckpointLike, StorageOptions
    from cairn.policy.export_hook import ExportGraph

__all__ = ["Policy"]


@register_class
class Policy:
    """A PyTorch actor-critic policy for one observation space and one action space.

    A Policy is enough to act (``compute_actions``) and enough to continue training: it owns its
    network and its :attr:`training` state (optimizer, observation filter, random generators and
    counters), and describes itself as data through :attr:`spec`.

    Args:
        observation_space: Box, Discrete, MultiDiscrete, MultiBinary, Dict or Tuple.
        action_space: Discrete, MultiDiscrete or Box.
        config: Policy settings merged over :attr:`DEFAULT_CONFIG`: ``model`` (``hidden``,
            ``activation``, ``vf_share_layers``, ``vf_stop_gradient``, ``log_std_init``; ``conv_*``
            for images: docs/models.md), ``lr``, and ``observation_filter`` (``"NoFilter"`` or
            ``"MeanStdFilter"``).
        seed: Seeds weight initialisation and action sampling. None: nondeterministic.

    >>> import gymnasium as gym
    >>> policy = Policy(gym.spaces.Box(-1, 1, (4,)), gym.spaces.Discrete(2), seed=0)
    >>> policy.compute_single_action([0.0, 0.1, 0.0, -0.1], explore=False) in (0, 1)
    True
    """

    #: Arrays that ``from_state(copy=False)`` hands to ``_setup``/``set_state`` as storage.
    _adopted_weights: Mapping[str, np.ndarray] | None = None

    #: Whether this policy's learner reads the behaviour log-probability of each sampled action:
    #: env runners then act through :meth:`compute_raw_actions_and_logp` and record it as the
    #: batch column ``action_logp`` (PPO's ratio, V-trace's importance weights). Off-policy
    #: classes that never read it (DQN, SAC, TD3) set it False and pay nothing.
    wants_action_logp: ClassVar[bool] = True

    #: The ``model`` keys naming a user's class that this policy builds (SAC and TD3 add
    #: ``custom_q_model``, their critics); a new policy refuses a class named under another.
    model_class_keys: ClassVar[tuple[str, ...]] = ("custom_model",)

    #: The network, built by :meth:`make_model` (and wrapped by :meth:`mask_model` for a masked
    #: policy): a torch module for every policy, Keras networks included (they run as torch
    #: modules, docs/keras.md). A subclass whose ``make_model`` builds a narrower type says so
    #: (``SACPolicy.model: SACModelBase``); this class's own is an actor-critic
    #: (:class:`cairn.models.ActorCriticModel`'s ``forward``, ``action_inputs``, ``value``).
    model: torch.nn.Module

    #: Kept by :attr:`training`, the one owner of the policy's training state.
    generator = TrainingStateField[torch.Generator]()
    np_random = TrainingStateField[np.random.Generator]()
    global_timestep = TrainingStateField[int]()
    num_grad_updates = TrainingStateField[int]()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        # A subclass that draws its actions its own way but would still have its rows' logps
        # taken by the base class's sampling would record the log-probability of an action it
        # did not draw: a wrong ratio that raises nothing. Refuse it where it is written.
        own = cls.__dict__
        draws_own_actions = "compute_raw_actions" in own and "compute_raw_actions_and_logp" not in own
        if cls.wants_action_logp and draws_own_actions:
            raise ConfigError(
                f"{cls.__qualname__} overrides compute_raw_actions but not compute_raw_actions_and_logp, "
                "while wants_action_logp is True: env runners act through compute_raw_actions_and_logp "
                "for such a policy, so the override would never act. Fix: override "
                "compute_raw_actions_and_logp too (returning the actions and their log-probabilities "
                "under the distribution they were drawn from), or set wants_action_logp = False for "
                "a policy whose learner does not read action_logp.")

    DEFAULT_CONFIG: dict[str, Any] = {
        "model": DEFAULT_MODEL_CONFIG,
        "lr": 3e-4,
        "observation_filter": "NoFilter",
    }

    def __init__(
        self,
        observation_space: gym.Space[Any],
        action_space: gym.Space[Any],
        config: Mapping[str, Any] | None = None,
        *,
        seed: int | None = None,
    ) -> None:
        self._setup(observation_space, action_space, config, seed=seed, init_weights=True)

    # ----------------------------------------------------------------------------------- build
    def _setup(
        self,
        observation_space: gym.Space[Any],
        action_space: gym.Space[Any],
        config: Mapping[str, Any] | None,
        *,
        seed: int | None,
        init_weights: bool,
    ) -> None:
        # Copies, the policy's own: an inferred space is the env's object, so the env (or the
        # caller) changing it in place (action_space.low[0] = 1.5) changed the spec this policy
        # saves while its distribution and preprocessor kept the bounds they were built with.
        observation_space, action_space = copy.deepcopy(observation_space), copy.deepcopy(action_space)
        config = dict(config or {})
        if isinstance(config.get("model"), Mapping):  # model classes -> references (JSON)
            config["model"] = model_references(config["model"])
        self.config: dict[str, Any] = deep_merge(self.DEFAULT_CONFIG, config)
        self.check_setup(action_space, self.config)
        try:
            check_action_space(action_space)
            preprocessor = make_preprocessor(observation_space, action_space)
        except ValueError as exc:
            raise ConfigError(str(exc)) from exc
        #: Raw observations -> network rows: the preprocessor and the observation filter.
        self.observation_input = ObservationInput(
            preprocessor, make_filter(self.config["observation_filter"], preprocessor.size))
        #: The optimizer, the observation filter's statistics, the generators and the counters.
        self.training = PolicyTrainingState(self.observation_input.observation_filter, seed=seed)
        #: Entries of the observation's action mask (0: no masking; docs/models.md, "Action
        #: masking") and the observation space the network reads (without the mask).
        self.action_mask_size = preprocessor.mask_size
        self.network_observation_space = preprocessor.network_space
        check_model_config(self.config["model"])
        if init_weights:  # a restore builds what its checkpoint holds, as it always did
            refuse_unbuilt_model_classes(self.config["model"], self.model_class_keys, type(self).__name__)
        self.observation_space = observation_space
        self.action_space = action_space
        # Only a new policy warns: a restored one was warned about when it was first made.
        if init_weights and getattr(self.make_model, "builds_config_mlp", False) and \
                not uses_custom_model(self.config["model"]):
            warn_if_image_observations(self.network_observation_space, self.config["model"], stacklevel=3)
        self.dist: ActionDistribution = self.make_distribution(action_space)
        # Restoring skips random initialisation: parameters are created uninitialised (meta
        # device, then empty CPU storage) and filled from the saved state right after. Not a
        # user's network: it may hold tensors that no state dict has and only its constructor
        # sets (a non-persistent buffer, a tensor attribute), which would stay uninitialised
        # memory or meta tensors; it is built as its constructor makes it, then loaded.
        skip_init = not init_weights and not self.switches_modes
        with torch.device("meta") if skip_init else contextlib.nullcontext():
            self.model = self.make_model()
            if self.action_mask_size:
                self.model = self.mask_model(self.model)
            else:
                refuse_unmet_mask_requests(self.model, type(self).__name__)
        #: The acting path with a state (None: feed-forward); use_lstm is PPO's, without a mask.
        self.recurrent: RecurrentActing | None = recurrent_acting(
            self.model, self.dist, self.config["model"], action_mask_size=self.action_mask_size,
            policy_class=type(self).__name__)
        if recurrent_settings(self.config["model"])["use_lstm"]:  # the state's size in the spec, as data
            self.config["model"] = {**self.config["model"], **recurrent_settings(self.config["model"])}
        adopted = self._adopted_weights
        if init_weights:
            self.init_weights()
        elif adopted is not None:
            adopt_weights(self.model, adopted)
        elif skip_init:
            self.model.to_empty(device="cpu")
        # The default optimizer is built on first use (see the optimizer property); an
        # overridden make_optimizer is built now, as its parameter grouping is its own.
        if type(self).make_optimizer is not Policy.make_optimizer:
            self.training.set_optimizer(self.make_optimizer())
        self.finish_setup()
        self.check_model_outputs()
        if self.switches_modes:  # a user's network rests in eval mode
            self.model.train(False)

    def check_setup(self, action_space: gym.Space[Any], config: Mapping[str, Any]) -> None:
        """Refuse (ConfigError) an action space or merged ``config`` this class cannot use;
        the first step of building a policy (DQN: Discrete actions, a valid epsilon schedule)."""

    def make_distribution(self, action_space: gym.Space[Any]) -> ActionDistribution:
        """The action distribution (override for another, e.g. SAC's squashed Gaussian)."""
        return distribution_for(action_space)

    def mask_model(self, model: torch.nn.Module) -> torch.nn.Module:
        """Wrap the network of a masked policy so that illegal actions get no probability
        (:class:`~cairn.policy.action_masking.MaskedActorCritic`; DQN masks Q-values)."""
        return MaskedActorCritic(model, self.preprocessor.size)

    def finish_setup(self) -> None:
        """The last step of building a policy, once its model, optimizer and filter exist
        (DQN: its target network and epsilon)."""

    def networks(self) -> list[torch.nn.Module]:
        """The torch networks this policy holds: :attr:`model`, and what a subclass adds (DQN's
        and APPO's target networks); a learner on an accelerator moves them there."""
        return [self.model]

    @property
    def switches_modes(self) -> bool:
        """Whether :attr:`model` is a user's network (``model.custom_model``, SAC's and TD3's
        ``custom_q_model``, or a Keras ``model.keras_model``, which is called with ``training=``
        the torch mode: Keras layers read no torch mode), which may hold layers whose output
        depends on the mode (``Dropout``, ``BatchNorm``). Such a model rests in eval mode, as it
        acts and as an export runs it, and a learner runs it in training mode for the length of
        one learn function (:func:`cairn.learners.actor.learning`), putting it back in eval mode
        after, also when the function raises. cairn's own networks hold no such layer
        (tests/models/test_user_model_acting.py walks every one), so both modes compute the same
        for them and theirs is never switched. A target network (DQN's, APPO's, SAC's and TD3's)
        is in eval mode always, as SB3 keeps its targets, also while its policy learns."""
        model = self.config["model"]
        return (uses_custom_model(model) or uses_custom_model(model, "custom_q_model")
                or model.get("keras_model") is not None)

    def check_model_outputs(self) -> None:
        """Refuse (ConfigError) a network whose outputs lack the shapes this policy reads, seen in
        one forward on sample rows when the policy is built or restored (cairn/policy/output_shapes.py);
        PPO's reads action inputs ``[B, num_outputs]`` and values ``[B]``. Override with the network."""
        check_actor_critic_outputs(self.model, feature_size=self.preprocessor.size,
                                   mask_size=self.action_mask_size, num_outputs=self.dist.num_inputs,
                                   action_space=self.action_space, model_config=self.config["model"])

    @builds_config_mlp
    def make_model(self) -> torch.nn.Module:
        """Build the network (override in subclasses for other architectures): the user's
        ``model.custom_model`` (:class:`cairn.models.ActorCriticModel`), else the built-in MLP
        (with a CNN encoder for images) or its Keras twin (:mod:`cairn.policy.network_choice`)."""
        return actor_critic_model(self.config, network_observation_space=self.network_observation_space,
                                  action_space=self.action_space, obs_size=self.preprocessor.size,
                                  num_outputs=self.dist.num_inputs, generator=self.generator)

    def init_weights(self) -> None:
        """Randomly initialise the network from the policy's own generator."""
        reset = getattr(self.model, "reset_parameters", None)
        if reset is not None:
            reset(self.generator)

    def make_optimizer(self) -> torch.optim.Optimizer:
        """Adam over all parameters (override for other optimizers).

        The fused implementation updates each parameter in one kernel: for small networks the
        per-operator overhead of the default implementation dominates the update.
        """
        lr = float(self.config["lr"])
        return torch.optim.Adam(self.model.parameters(), lr=lr, eps=1e-5, fused=True)

    @property
    def optimizer(self) -> torch.optim.Optimizer:
        """The optimizer, with any restored state loaded.

        Built on first use: constructing a torch optimizer imports ``torch._dynamo`` (about a
        second), which a policy restored only to act never needs. A restored optimizer state
        is checked against the network when it is restored, and loaded here
        (:class:`~cairn.policy.training_state.PolicyTrainingState`).
        """
        return self.training.optimizer(self.make_optimizer, lr=float(self.config["lr"]))

    @optimizer.setter
    def optimizer(self, optimizer: torch.optim.Optimizer) -> None:
        self.training.set_optimizer(optimizer)

    def set_learning_rate(self, lr: float) -> None:
        """Set ``config["lr"]`` and the optimizer's learning rate (now, or when it is built)."""
        self.config["lr"] = float(lr)
        self.training.set_learning_rate(float(lr))

    def follow_config(self, config: Mapping[str, Any]) -> None:
        """Take the settings of ``config`` that may change when this policy is restored into an
        algorithm (those of its policy config that the restore's ``config_overrides`` names:
        the others stay this policy's own) without changing the network: the learning rate
        here, a subclass's exploration settings in its override. Called before the env runners
        copy the policy, so that every copy acts with them.

        An ``observation_filter`` of another kind than this policy's (its statistics are this
        policy's state, which another filter cannot take) and a ``model`` setting other than the
        one this policy's network was built with (``hidden``, ``activation``, ...: the restored
        network keeps its stored structure) are a
        :class:`~cairn.errors.RestoredSettingError`, raised before anything changes. A model
        class reference given again (``custom_model``) is already this policy's: it matches."""
        wanted = config.get("observation_filter", self.observation_filter.name)
        if wanted != self.observation_filter.name:
            raise RestoredSettingError(
                f"Config 'observation_filter'={wanted!r}, but this restored policy normalises with "
                f"{self.observation_filter.name!r}, whose statistics are part of its state and "
                "cannot become another filter's. Fix: restore without that override (the policy "
                "keeps its filter), or train a new policy with the filter you want.",
                setting="observation_filter", given=wanted, stored=self.observation_filter.name)
        check_model_follows(config.get("model"), self.config["model"])
        if "lr" in config:
            self.set_learning_rate(float(config["lr"]))

    @property
    def spec(self) -> PolicySpec:
        """This policy as data: class, spaces and config; a deep copy, the caller's to change (to
        build another policy from it) without changing this policy or what it saves."""
        return copy.deepcopy(self._own_spec())

    def _own_spec(self) -> PolicySpec:
        """:attr:`spec` sharing this policy's spaces and nested config values (to read only)."""
        return PolicySpec(type(self), self.observation_space, self.action_space, self.config)

    @classmethod
    def from_spec(cls, spec: PolicySpec, *, seed: int | None = None) -> Policy:
        """Build a new policy from a complete spec (class, both spaces and config)."""
        chosen = spec.policy_class or cls  # a class reference must resolve to a Policy subclass
        policy_class = resolve_class(chosen, Policy) if isinstance(chosen, str) else chosen
        if not issubclass(policy_class, Policy):
            raise ConfigError(f"PolicySpec's policy_class is {policy_class!r}, which is not a subclass of "
                              "cairn.Policy. Fix: give a Policy subclass, or its 'module:QualName'.")
        if spec.observation_space is None or spec.action_space is None:
            raise ConfigError(
                "PolicySpec needs observation_space and action_space to build a policy on its own."
            )
        return policy_class(spec.observation_space, spec.action_space, spec.config, seed=seed)

    # ------------------------------------------------------------------------------------- act
    def process_observations(self, obs_batch: Sequence[Any] | np.ndarray, *,
                             update: bool) -> np.ndarray:
        """Raw observations -> the float32 network inputs (flattened, one-hot, filtered).

        ``update=True`` also feeds them to the observation filter's running statistics.
        """
        return self.observation_input(obs_batch, update=update)

    @property
    def preprocessor(self) -> ObservationPreprocessor | MaskedObservationPreprocessor:
        """Raw observations -> unfiltered rows (``size`` network inputs, then ``mask_size``)."""
        return self.observation_input.preprocessor

    @property
    def observation_filter(self) -> NoFilter | MeanStdFilter:
        """The observation filter (its statistics are part of the policy's training state)."""
        return self.training.observation_filter

    def compute_action_inputs(self, processed_obs: np.ndarray) -> np.ndarray:
        """The action distribution's inputs (logits, or mean and log-std) for processed obs."""
        return action_inputs(self.model, processed_obs)

    def compute_raw_actions(self, processed_obs: np.ndarray, *, explore: bool) -> np.ndarray:
        """Processed observations -> raw actions (category indices / unclipped samples)."""
        mask = self.action_masks(processed_obs)
        inputs = self.compute_action_inputs(processed_obs)
        if mask is not None:
            check_legal_scores(inputs, mask, action_sizes(self.action_space))
        raw = raw_actions(self.dist, inputs, self.np_random, explore=explore)
        return raw if mask is None else legal_actions(raw, inputs, mask, action_sizes(self.action_space))

    def compute_raw_actions_and_logp(self, processed_obs: np.ndarray, *,
                                     explore: bool) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`compute_raw_actions` (the same draws, the same actions) and each action's
        log-probability (float32 ``[B]``) under the distribution it was drawn from (masked, for a
        masked policy), from the same forward pass: what env runners record as the
        ``action_logp`` column of a policy that :attr:`wants_action_logp` (docs/ppo.md,
        "Behaviour log-probabilities")."""
        mask = self.action_masks(processed_obs)
        inputs = self.compute_action_inputs(processed_obs)
        sizes = action_sizes(self.action_space) if mask is not None else ()
        if mask is not None:
            check_legal_scores(inputs, mask, sizes)
        raw, logp = raw_actions_and_logp(self.dist, inputs, self.np_random, explore=explore)
        if mask is not None:
            legal = legal_actions(raw, inputs, mask, sizes)
            if legal is not raw:  # a draw replaced by the best legal action (a zero-probability draw)
                raw, logp = legal, self.dist.logp_numpy(inputs, legal)
                check_action_logp(logp, inputs)
        return raw, logp

    def action_masks(self, processed_obs: np.ndarray) -> np.ndarray | None:
        """The action masks of processed observations (None for an unmasked policy); raises
        :class:`~cairn.errors.ActionMaskError` when a row leaves no legal action."""
        if not self.action_mask_size:
            return None
        return checked_masks(processed_obs, self.preprocessor.size, action_sizes(self.action_space))

    def compute_actions(self, obs_batch: Sequence[Any] | np.ndarray, *, explore: bool = True,
                        state: Sequence[Any] | None = None) -> Any:
        """Actions for a batch of raw observations, ready for the environment.

        Returns an array whose first dimension is the batch; each entry lies in the action space
        (Box actions are clipped to its bounds). A recurrent policy takes ``state`` (``[h, c]``,
        ``[B, cell]`` each) and returns ``(actions, state_out)`` (docs/ppo.md). Raises
        :class:`~cairn.errors.ObservationSpaceError` for observations that do not fit the
        observation space (e.g. rows of the wrong shape, or one observation instead of a batch).
        """
        processed = self.process_observations(obs_batch, update=False)
        if state is not None or self.recurrent is not None:
            return self.recurrent_acting.actions(processed, state, self.np_random, explore=explore)
        return self.dist.to_env(self.compute_raw_actions(processed, explore=explore))

    def compute_single_action(self, obs: Any, *, explore: bool = True,
                              state: Sequence[Any] | None = None) -> Any:
        """The action for one raw observation (an int for Discrete spaces), sampled by default
        (``explore=True``; :meth:`Algorithm.compute_single_action` is greedy by default); with
        ``state`` (a recurrent policy's, unbatched) ``(action, state_out)``. Raises
        :class:`~cairn.errors.ObservationSpaceError` when ``obs`` does not fit the observation space."""
        if state is not None:
            batched = [np.asarray(s)[None] for s in state]
            actions, out = self.compute_actions([obs], explore=explore, state=batched)
            return single_action(self.action_space, actions[0]), [o[0] for o in out]
        return single_action(self.action_space, self.compute_actions([obs], explore=explore)[0])

    def get_initial_state(self) -> RecurrentState:
        """A recurrent policy's state at the start of an episode (``[h, c]``, ``[cell]`` each)."""
        return self.recurrent_acting.initial_state()

    @property
    def recurrent_acting(self) -> RecurrentActing:
        """:attr:`recurrent`, or TypeError for a policy whose network has no state."""
        if self.recurrent is None:
            raise TypeError(f"{type(self).__name__} with this model is not recurrent: it has no state; "
                            "call compute_actions without state.")
        return self.recurrent

    # --------------------------------------------------------------------------------- weights
    def get_weights(self) -> dict[str, np.ndarray]:
        """A copy of the network's parameters and buffers as numpy arrays."""
        return weights_to_numpy(self.model, copy=True)

    def set_weights(self, weights: Mapping[str, np.ndarray]) -> None:
        """Load parameters produced by :meth:`get_weights` (names and shapes must match)."""
        load_weights(self.model, weights)

    def acting_settings(self) -> dict[str, Any]:
        """The settings besides the weights and the observation filter that this policy's
        actions read and that may change while it trains (TD3's ``exploration_noise``, which
        ``set_exploration_noise`` changes); none here. Remote env runners' copies take them with
        the weights before every sample (:meth:`set_acting_settings`), so that they act as this
        policy would, not with the settings they were built with."""
        return {}

    def set_acting_settings(self, settings: Mapping[str, Any]) -> None:
        """Take the :meth:`acting_settings` of another copy of this policy (the learner's)."""

    # ----------------------------------------------------------------------------------- state
    def get_state(self, *, copy: bool = True) -> dict[str, Any]:
        """The whole policy as a tree of JSON values and numpy arrays.

        ``copy=True`` returns a snapshot that later training does not change; ``copy=False``
        may return views of the live weight and optimizer arrays, for a caller that writes them
        at once (a checkpoint save). Subclasses extend it (``super().get_state(copy=copy)``).
        """
        # to_dict copies the config and writes the spaces as JSON: no deep copy of spec needed
        return {"spec": self._own_spec().to_dict(), "weights": weights_to_numpy(self.model, copy=copy),
                **self.training.get_state(self.make_optimizer, lr=float(self.config["lr"]), copy=copy,
                                          exploration=self.get_exploration_state())}

    def check_state(self, state: Mapping[str, Any]) -> None:
        """Raise ValueError when :meth:`set_state` would refuse ``state`` (weights or optimizer
        state that do not fit this network, a filter of another kind), without changing
        anything: so that a caller restoring several objects can check them all first.
        Subclasses with more arrays of their own (a target network) extend it."""
        check_weights(self.model, state["weights"])
        self.training.check_state(state, list(self.model.parameters()))

    def set_state(self, state: Mapping[str, Any]) -> None:
        """Restore a state from :meth:`get_state` into this policy (same spaces and model); a
        state that :meth:`check_state` refuses changes nothing, nor does one holding a NaN
        weight or a NaN or infinite optimizer slot (ValueError naming the array; as a
        checkpoint's are refused: :func:`cairn.policy.state_check.check_finite_policy_state`,
        one sum per array). That check is skipped for a state checked already (a checkpoint's,
        by its reader; an algorithm state's, by ``Algorithm.set_state``) or made by cairn from
        policies it keeps finite, on a path taken every iteration (a learner's loan starting,
        its learned parts coming back to the driver's policy): those callers name the state in
        :func:`cairn.policy.state_check.finite_checked`. Subclasses extend it
        (``super().set_state(state)``); cairn calls it on restores and learner syncs."""
        adopted = self._adopted_weights
        check_finite_policy_state(state, "The policy state")
        self.check_state(state)  # before anything changes
        if adopted is not state["weights"]:
            self.set_weights(state["weights"])
        self.training.set_state(state, list(self.model.parameters()), adopt=adopted is not None)
        if self.training.built_optimizer is not None:
            self.set_learning_rate(float(self.config["lr"]))  # the config's lr wins
        self.set_exploration_state(state.get("exploration") or {})

    def get_exploration_state(self) -> dict[str, Any]:
        """Exploration state beyond the random generator (e.g. an epsilon schedule)."""
        return {}

    def set_exploration_state(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`get_exploration_state`."""

    @classmethod
    def from_state(cls, state: Mapping[str, Any], *, copy: bool = True) -> Policy:
        """Rebuild a policy from :meth:`get_state` alone, without running random init.

        The class named in the state must be a subclass of :class:`Policy`. A state holding a
        NaN weight or a NaN or infinite optimizer slot is refused (ValueError), as by
        :meth:`set_state` (which it calls; skipped as there). With
        ``copy=False`` the policy takes the state's arrays as its own storage instead of copying
        them (the checkpoint reader does this with the buffers it just read); the caller must
        not use those arrays afterwards.
        """
        spec = state["spec"]
        policy_class = resolve_class(spec["policy_class"], Policy)
        policy = policy_class.__new__(policy_class)
        policy._adopted_weights = None if copy else state["weights"]
        try:
            policy._setup(
                space_from_json(spec["observation_space"]),
                space_from_json(spec["action_space"]),
                spec.get("config") or {},
                seed=0,
                init_weights=False,
            )
            policy.set_state(state)
        finally:
            policy._adopted_weights = None
        return policy

    # ------------------------------------------------------------------------------ checkpoint
    def export_checkpoint(
        self, export_dir: str | os.PathLike[str], *, export_native_model_files: bool = False,
        storage_options: StorageOptions = None,
    ) -> None:
        """Write this policy alone as a Policy checkpoint directory (atomically), or under a URL
        (``s3://...``, ``memory://...``; ``storage_options`` for its file system, docs/storage.md).

        With ``export_native_model_files=True`` the checkpoint also gets ``model/`` (a torch
        program, and ONNX when the ``onnx`` extra is installed), as Algorithm checkpoints do with
        ``config.checkpointing(export_native_model_files=True)``.
        """
        policy_files.write_policy_checkpoint_dir(
            self, export_dir, export_native_model_files=export_native_model_files,
            storage_options=storage_options)

    def export_graph(self) -> ExportGraph:
        """The export hook: this policy's observation-to-output path as one torch module.

        ``cairn.export`` traces the returned graph into a torch program and ONNX, writes its
        outputs into ``signature.json`` and checks the files against ``graph.reference``
        (this policy's own ``compute_actions``, action inputs and value). This builds the
        actor-critic graph (:func:`cairn.policy.export_graph.actor_critic_export_graph`);
        a policy with another network or action path overrides it.
        """
        from cairn.policy.export_graph import actor_critic_export_graph

        return actor_critic_export_graph(self)

    def export_model(self, export_dir: str | os.PathLike[str], *, onnx: int | None = None,
                     extra_outputs: Sequence[str] = ()) -> None:
        """Write the observation-to-action path in a native format that loads without cairn.

        Without ``onnx``: a ``torch.export`` program plus safetensors weights; with
        ``onnx=<opset>``: ``model.onnx``. Both come with ``signature.json``. ``extra_outputs``
        adds optional outputs by name (``["value"]``). Raises
        :class:`~cairn.errors.ExportError` when the model cannot be exported.
        """
        policy_files.export_native_model(  # cairn.export's, named by cairn.registry.MODEL_EXPORTER
            self, export_dir, onnx=onnx, extra_outputs=extra_outputs)

    @overload
    @classmethod
    def from_checkpoint(cls, checkpoint: CheckpointLike, *, policy_ids: str | Sequence[str],
                        storage_options: StorageOptions = None,
                        config_overrides: Mapping[str, Any] | None = None) -> dict[str, Policy]: ...

    @overload
    @classmethod
    def from_checkpoint(cls, checkpoint: CheckpointLike, *, policy_ids: None = None,
                        storage_options: StorageOptions = None,
                        config_overrides: Mapping[str, Any] | None = None) -> Policy | dict[str, Policy]: ...

    @classmethod
    def from_checkpoint(
        cls, checkpoint: CheckpointLike, *, policy_ids: str | Sequence[str] | None = None,
        storage_options: StorageOptions = None, config_overrides: Mapping[str, Any] | None = None,
    ) -> Policy | dict[str, Policy]:
        """Load the policy of a Policy checkpoint, or the policies of an Algorithm checkpoint, from
        a directory or a URL (``s3://``, ``memory://``; ``storage_options`` for its file system).

        * a Policy checkpoint (``export_checkpoint``) gives a :class:`Policy`;
        * an Algorithm checkpoint gives ``{policy_id: Policy}``: all its policies, or only
          ``policy_ids`` (a list, or one ID as a str), reading only their files.

        ``config_overrides`` sets keys of each policy's config, as ``Algorithm.from_checkpoint``'s
        does: a ``model`` dict merges into the stored one (``{"model": {"custom_model": MyNet}}``
        brings back a class defined in ``__main__``), other values replace; an unknown key is a
        ConfigError (:mod:`cairn.policy.config_overrides`).

        The return type depends on the directory, so type checkers see ``Policy | dict``
        without ``policy_ids``; with ``policy_ids`` they see ``dict[str, Policy]``, and
        :meth:`from_policy_checkpoint` is typed ``-> Policy``. Each state is checked
        (:func:`cairn.policy.state_check.check_policy_state`) before a policy is built from it.
        The class stored in the checkpoint is built (it must subclass :class:`Policy`).
        """
        if policy_ids is None and policy_files.is_policy_checkpoint(
            checkpoint, storage_options=storage_options
        ):
            return cls.from_policy_checkpoint(checkpoint, storage_options=storage_options,
                                              config_overrides=config_overrides)
        return policy_files.policies_from_checkpoint(
            checkpoint, policy_ids=policy_ids, base=Policy, storage_options=storage_options,
            config_overrides=config_overrides)

    @classmethod
    def from_policy_checkpoint(cls, checkpoint: CheckpointLike, *, storage_options: StorageOptions = None,
                               config_overrides: Mapping[str, Any] | None = None) -> Policy:
        """Load a Policy checkpoint (written by :meth:`export_checkpoint`; a directory or a URL);
        an Algorithm checkpoint is refused with ``CheckpointFormatError`` (use
        :meth:`from_checkpoint`). ``config_overrides`` as in :meth:`from_checkpoint`."""
        return policy_files.policy_from_policy_checkpoint(
            checkpoint, base=Policy, storage_options=storage_options, config_overrides=config_overrides)

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(observation_space={self.observation_space}, "
                f"action_space={self.action_space})")

    def parameters(self) -> Iterator[torch.nn.Parameter]:
        """The network's parameters (for optimizers and gradient clipping)."""
        return self.model.parameters()

    @property
    def policy_class_reference(self) -> str:
        """The reference stored in checkpoints for this policy's class."""
        return class_reference(type(self))
