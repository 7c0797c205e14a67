"""AlgorithmConfig: typed, validated, JSON-convertible settings with RLlib-style fluent methods."""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, ClassVar, Self

import numpy as np

from cairn.callbacks.base import callbacks_reference
from cairn.config import algorithm_classes
from cairn.config.base_fields import BASE_FIELDS
from cairn.config.checks import (
    check_env,
    check_learners,
    check_policies_to_train,
    check_policy_mapping,
    map_agent,
    merge_setting,
    normalize_policies,
    normalize_policies_to_train,
    require_mapping,
    suggest,
)
from cairn.config.dict_form import check_saveable, config_to_dict, load_dict, owned_value
from cairn.config.fields import Field
from cairn.config.league_settings import DrawnMapping, league_settings, stored_as_named
from cairn.config.read_only import read_only
from cairn.core import AlgorithmLike
from cairn.errors import ConfigError
from cairn.policy.custom_model import model_references
from cairn.policy.mlp_actor_critic import check_model_config
from cairn.policy.spec import PolicySpec
from cairn.policy_ids import DEFAULT_POLICY_ID, check_mapped_policy_id
from cairn.registry import CALLABLE_KEY, warn_main_module_references

__all__ = ["AlgorithmConfig", "PolicyMapping", "BASE_FIELDS", "CALLABLE_KEY", "merge_setting"]

PolicyMapping = Callable[..., str] | Mapping[Any, str]
_NOT_PROVIDED: Any = object()

#: How to change each kind of setting a built algorithm took, for :func:`frozen_setting_message`.
_POLICY_SET_FIX = ("algo.add_policy(...) / algo.remove_policy(...) (which take policy_mapping_fn= "
                   "and policies_to_train=), or Algorithm.from_checkpoint(path, policy_ids=..., "
                   "policy_mapping_fn=..., policies_to_train=...)")
_FIXES = {
    "lr": "algo.get_policy(policy_id).set_learning_rate(lr) changes a policy's learning rate now "
          "(its checkpoints keep it); or ",
    "policies": _POLICY_SET_FIX + "; or ",
    "policy_mapping_fn": _POLICY_SET_FIX + "; or ",
    "policies_to_train": _POLICY_SET_FIX + "; or ",
}


def frozen_setting_message(key: str, *, in_place: bool = False) -> str:
    """The error for setting ``key`` on a built algorithm's (frozen) config; ``in_place``: for a
    write into its value (a dict or list, read-only once frozen), e.g. ``config.model["hidden"]``."""
    restore = ("" if key in ("policies", "policy_mapping_fn", "policies_to_train") else
               "save and restore with Algorithm.from_checkpoint(path, "
               f"config_overrides={{{key!r}: ...}}), or ")
    how = (f" (not in place either: the dicts and lists of a built algorithm's config {key!r} are "
           "read-only)") if in_place else ""
    return (f"Config {key!r} cannot change after the algorithm was built{how}: it took {key!r} then, "
            "so training would ignore the new value (and a restore from its checkpoints would use it). "
            f"Fix: {_FIXES.get(key, '')}{restore}build a new algorithm from algo.config.copy() with "
            f"the new {key!r}.")


class AlgorithmConfig:
    """Settings of an algorithm, set through fluent methods and validated once.

    >>> from cairn import PPOConfig
    >>> config = (
    ...     PPOConfig()
    ...     .environment("CartPole-v1")
    ...     .training(lr=3e-4, train_batch_size=2048)
    ...     .debugging(seed=0)
    ... )
    >>> config.to_dict()["lr"]
    0.0003
    """

    FIELDS: ClassVar[dict[str, Field]] = BASE_FIELDS
    #: Registry name of the algorithm class this config builds (set by subclasses).
    algo_class_name: ClassVar[str | None] = None
    #: Whether minibatches are cut from each iteration's train batch, so that ``minibatch_size``
    #: may not exceed ``train_batch_size`` (PPO, IMPALA). Off-policy configs draw them from
    #: replay instead, where ``train_batch_size`` only counts the env steps of an iteration.
    minibatches_from_train_batch: ClassVar[bool] = True
    #: The sections whose settings are read each time they are used (each save, evaluation,
    #: ``train()`` call or runner failure), which stay changeable on a built algorithm's
    #: config. Every other setting is taken when the algorithm is built (by its policies,
    #: environments, runners or learners): :meth:`freeze` makes changing one an error.
    LIVE_SECTIONS: ClassVar[frozenset[str]] = frozenset(
        {"checkpointing", "evaluation", "fault_tolerance", "resources"})
    #: Whether :meth:`freeze` was called (a built algorithm's config).
    _frozen = False

    # One attribute per field of FIELDS (documented there and in the fluent methods).
    env: Any
    env_config: dict[str, Any]
    num_env_runners: int
    num_envs_per_env_runner: int
    gym_env_vectorize_mode: str
    rollout_fragment_length: int | str
    observation_filter: str
    restart_failed_env_runners: bool
    max_num_env_runner_restarts: int
    max_num_repeated_env_runner_failures: int
    ignore_env_runner_failures: bool
    sample_timeout_s: float
    env_runner_health_probe_timeout_s: float
    env_runner_restore_timeout_s: float
    num_learners: int
    num_gpus_per_learner: float
    num_cpus_per_learner: float
    lr: float
    gamma: float
    train_batch_size: int
    minibatch_size: int
    num_epochs: int
    grad_clip: float | None
    model: dict[str, Any]
    policies: dict[str, PolicySpec]
    policy_mapping_fn: Any
    policies_to_train: list[str] | None
    league_config: dict[str, Any] | None
    evaluation_interval: int | None
    evaluation_duration: int
    torch_num_threads: int | str
    export_native_model_files: bool
    seed: int | None
    log_dir: str | None
    callbacks_class: str | None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        # Config classes know their algorithm by registry name only (config sits below the
        # algorithms): from_dict() picks the config class of a stored algo_class here.
        super().__init_subclass__(**kwargs)
        if cls.algo_class_name is not None:
            algorithm_classes.register_config_class(cls.algo_class_name, cls)

    def __init__(self) -> None:
        for key, field in self.FIELDS.items():
            setattr(self, key, field.default_value())
        self.policies = {DEFAULT_POLICY_ID: PolicySpec()}

    # ------------------------------------------------------------------------------ freezing
    def freeze(self) -> None:
        """Refuse changes to the settings an algorithm took when it was built (every setting
        outside :attr:`LIVE_SECTIONS`): ``Algorithm`` freezes its own config. Such a change
        would be silently ignored by training but used by a restore from the algorithm's
        checkpoints, so setting one (by a fluent method or an attribute) raises ConfigError
        naming the fix. Their dicts and lists (``model``, ``env_config``, ``policies`` and each
        PolicySpec in it, ``policies_to_train``, DQN's ``epsilon``, ...) become read-only
        (:mod:`cairn.config.read_only`): a write into one, ``config.model["hidden"] = [8]``,
        raises the same ConfigError; their numpy arrays become read-only copies (a write raises
        numpy's ValueError). A :meth:`copy` is not frozen, and its values are plain dicts, lists
        and changeable arrays again."""
        for key, field in self.FIELDS.items():
            if field.section not in self.LIVE_SECTIONS:  # past __setattr__, which refuses them
                self.__dict__[key] = read_only(getattr(self, key), frozen_setting_message(key, in_place=True))
        self._frozen = True  # not a field: __setattr__ lets it through

    @property
    def is_frozen(self) -> bool:
        """Whether :meth:`freeze` was called (this is a built algorithm's config)."""
        return self._frozen

    def __setattr__(self, name: str, value: Any) -> None:
        self._check_changeable((name,))
        super().__setattr__(name, value)

    def _check_changeable(self, keys: Iterable[str]) -> None:
        """ConfigError for the first of ``keys`` that a frozen config may not change."""
        if not self._frozen:
            return
        for key in keys:
            field = self.FIELDS.get(key)
            if field is not None and field.section not in self.LIVE_SECTIONS:
                raise ConfigError(frozen_setting_message(key))

    # ------------------------------------------------------------------------- fluent methods
    def _set(self, section: str, values: Mapping[str, Any]) -> AlgorithmConfig:
        """Check every value of ``values``, then set them: a call with one bad value changes
        nothing (it set the values before the bad one)."""
        allowed = sorted(k for k, f in self.FIELDS.items() if f.section == section)
        # numpy scalars (np.arange, a search space's draw) as the Python numbers they hold: an
        # np.int64(64) was refused as "'train_batch_size'=np.int64(64) is invalid: expected an
        # int >= 1", an np.float32 lr likewise.
        given = {key: value.item() if isinstance(value, np.generic) and value.ndim == 0 else value
                 for key, value in values.items() if value is not _NOT_PROVIDED}
        for key, value in given.items():
            if key not in allowed:
                raise ConfigError(
                    f"Unknown {section}() setting {key!r}; allowed: {allowed}."
                    + suggest(key, allowed)
                )
            self.FIELDS[key].check(key, value)
        self._check_changeable(given)  # before any is set: a refused call changes nothing
        for key, value in given.items():
            setattr(self, key, owned_value(self.FIELDS[key], value))
        return self

    def environment(
        self, env: str | Callable[[dict[str, Any]], Any] | None = _NOT_PROVIDED, *,
        env_config: dict[str, Any] | None = _NOT_PROVIDED,
    ) -> AlgorithmConfig:
        """Set the environment: a Gymnasium ID, a name given to :func:`cairn.register_env`, or
        a callable ``creator(env_config) -> env`` (Gymnasium Env or PettingZoo ParallelEnv)."""
        if env_config is not _NOT_PROVIDED and env_config is None:
            env_config = {}
        return self._set("environment", {"env": env, "env_config": env_config})

    def env_runners(
        self, *, num_env_runners: int = _NOT_PROVIDED, num_envs_per_env_runner: int = _NOT_PROVIDED,
        rollout_fragment_length: int | str = _NOT_PROVIDED, observation_filter: str = _NOT_PROVIDED,
        gym_env_vectorize_mode: str = _NOT_PROVIDED,
        max_requests_in_flight_per_env_runner: int = _NOT_PROVIDED,
    ) -> AlgorithmConfig:
        """Set how experience is collected.

        Args:
            num_env_runners: Remote env runners (Ray actors); 0 samples in this process.
            num_envs_per_env_runner: Environments each runner steps as one vectorised batch.
            rollout_fragment_length: Steps per environment per sample() call; ``"auto"`` splits
                ``train_batch_size`` evenly.
            observation_filter: ``"NoFilter"`` or ``"MeanStdFilter"`` (running normalisation,
                stored with each policy).
            gym_env_vectorize_mode: ``"sync"`` (default) steps a runner's environments one after
                another in its process; ``"async"`` runs each in its own child process, all
                stepped at once (for slow single-agent environments; same results for the same
                seed; docs/ppo.md "Environments in child processes").
            max_requests_in_flight_per_env_runner: IMPALA and APPO only (RLlib's name; other
                algorithms refuse it): ``sample()`` requests kept queued on each remote runner
                while the learner learns (docs/impala.md, "Settings").
        """
        return self._set("env_runners", {
            "num_env_runners": num_env_runners,
            "num_envs_per_env_runner": num_envs_per_env_runner,
            "rollout_fragment_length": rollout_fragment_length,
            "observation_filter": observation_filter,
            "gym_env_vectorize_mode": gym_env_vectorize_mode,
            "max_requests_in_flight_per_env_runner": max_requests_in_flight_per_env_runner,
        })

    def fault_tolerance(
        self, *, restart_failed_env_runners: bool = _NOT_PROVIDED,
        max_num_env_runner_restarts: int = _NOT_PROVIDED, ignore_env_runner_failures: bool = _NOT_PROVIDED,
        sample_timeout_s: float = _NOT_PROVIDED, env_runner_health_probe_timeout_s: float = _NOT_PROVIDED,
        env_runner_restore_timeout_s: float = _NOT_PROVIDED,
        max_num_repeated_env_runner_failures: int = _NOT_PROVIDED,
    ) -> AlgorithmConfig:
        """Set what happens when a remote env runner fails (RLlib's names and defaults; the
        behaviour is in docs/ray.md): it is recreated and restored (at most
        ``max_num_env_runner_restarts`` times in all), else left out when
        ``ignore_env_runner_failures``, else ``train()`` raises EnvRunnerFailedError. Timeouts
        in seconds: one ``sample()``, a ping, rebuilding a runner.

        ``max_num_repeated_env_runner_failures`` (cairn's own, default 3, at least 1): a runner
        that raised the same error (type and message) this many times in a row, with no
        ``sample()`` completed in between, is not recreated again: a deterministic error (a
        callback that raises on every step) ends ``train()`` after 2 restarts instead of using
        up all ``max_num_env_runner_restarts``."""
        return self._set("fault_tolerance", {k: v for k, v in locals().items() if k != "self"})

    def learners(
        self, *, num_learners: int = _NOT_PROVIDED, num_gpus_per_learner: float = _NOT_PROVIDED,
        num_cpus_per_learner: float = _NOT_PROVIDED,
    ) -> AlgorithmConfig:
        """Set who runs the gradient updates (RLlib's names; docs/learners.md).

        Args:
            num_learners: 0 (default) learns in this process; ``N >= 1`` starts N Ray actors
                that split every minibatch and all-reduce gradients (DDP over
                ``torch.distributed``: gloo on CPU, NCCL on GPUs).
            num_gpus_per_learner: 0 learns on the CPU; 1 puts the learner's networks and
                optimizer state on the accelerator torch sees (``cuda:0``, else ``mps``);
                ``build()`` raises ConfigError where torch sees none.
            num_cpus_per_learner: Ray CPUs each learner actor reserves (``num_learners >= 1``).
        """
        return self._set("learners", {k: v for k, v in locals().items() if k != "self"})

    def training(self, **kwargs: Any) -> AlgorithmConfig:
        """Set training settings: ``lr``, ``gamma``, ``train_batch_size``, ``minibatch_size``,
        ``num_epochs``, ``grad_clip``, ``model`` and the algorithm's own (see its FIELDS).

        Dict-valued settings (:meth:`merged_fields`: ``model``, DQN's ``replay_buffer_config``)
        are merged into the current value one level deep, as RLlib updates them
        (:func:`merge_setting`): ``model={"hidden": [32]}`` keeps the activation, and a
        ``custom_model_config`` given replaces the current one whole.
        """
        for key in sorted(self.merged_fields() & kwargs.keys()):
            given = kwargs[key]
            if key == "model" and isinstance(given, Mapping):  # model classes -> references
                given = model_references(given)
            # Checked once merged (by _set, with the other settings, before any is set): a key
            # may need another set earlier (model.keras_model needs the model.framework of
            # config.framework('keras')).
            kwargs[key] = merge_setting(getattr(self, key), require_mapping(given, key))
        return self._set("training", kwargs)

    def framework(self, framework: str = "torch") -> AlgorithmConfig:
        """Set ``model.framework``: ``"torch"`` networks (the default) or ``"keras"``, Keras 3
        models run on Keras' torch backend (docs/keras.md); the same as
        ``training(model={"framework": ...})``."""
        return self.training(model={"framework": framework})

    @classmethod
    def callable_fields(cls) -> frozenset[str]:
        """The keys whose Field may hold a callable (``env``, ``policy_mapping_fn``)."""
        return frozenset(key for key, field in cls.FIELDS.items() if field.holds_callable)

    @classmethod
    def merged_fields(cls) -> frozenset[str]:
        """The dict-valued training settings, e.g. ``model``: ``training()`` and a restore's
        ``config_overrides`` merge them into the current value (:func:`merge_setting`)."""
        return frozenset(key for key, field in cls.FIELDS.items()
                         if field.section == "training" and isinstance(field.default, dict))

    def multi_agent(
        self, *, policies: Any = _NOT_PROVIDED, policy_mapping_fn: Any = _NOT_PROVIDED,
        policies_to_train: Sequence[str] | None = _NOT_PROVIDED,
    ) -> AlgorithmConfig:
        """Set the policies and which agents they control.

        Args:
            policies: A set/list of policy IDs (spaces inferred from the env's agents) or a dict
                ``{policy_id: PolicySpec(...)}`` (None fields inferred).
            policy_mapping_fn: ``fn(agent_id, **kwargs) -> policy_id`` or a dict
                ``{agent_id: policy_id}``. Optional with a single policy. Called once per
                (episode, agent), at the agent's first step; every row of that agent in that
                episode goes to the policy it returns, so it may draw another policy per episode
                (docs/multi-agent.md).
            policies_to_train: IDs of the policies that learn; None means all.
        """
        self._check_changeable(key for key, value in (
            ("policies", policies), ("policy_mapping_fn", policy_mapping_fn),
            ("policies_to_train", policies_to_train)) if value is not _NOT_PROVIDED)
        # Copies, as every other section keeps: a dict (or a PolicySpec's config) the caller
        # changes later, say to build another config from it, must not change this one.
        if policies is not _NOT_PROVIDED:
            policies = copy.deepcopy(normalize_policies(policies))
        if policies_to_train is not _NOT_PROVIDED:
            policies_to_train = normalize_policies_to_train(policies_to_train)
        if policy_mapping_fn is not _NOT_PROVIDED:
            check_policy_mapping(policy_mapping_fn)
            if isinstance(policy_mapping_fn, Mapping):
                policy_mapping_fn = copy.deepcopy(policy_mapping_fn)
        for key, value in (("policies", policies), ("policy_mapping_fn", policy_mapping_fn),
                           ("policies_to_train", policies_to_train)):
            if value is not _NOT_PROVIDED:
                setattr(self, key, value)
        return self

    def evaluation(
        self, *, evaluation_interval: int | None = _NOT_PROVIDED,
        evaluation_duration: int = _NOT_PROVIDED,
    ) -> AlgorithmConfig:
        """Evaluate greedily every ``evaluation_interval`` iterations (None: only when asked)
        for ``evaluation_duration`` episodes."""
        return self._set("evaluation", {
            "evaluation_interval": evaluation_interval, "evaluation_duration": evaluation_duration,
        })

    def league(
        self, *, main: str = _NOT_PROVIDED, snapshot_every_iterations: int | None = _NOT_PROVIDED,
        snapshot_win_rate: float | None = _NOT_PROVIDED, max_snapshots: int | None = _NOT_PROVIDED,
        matchmaking: str = _NOT_PROVIDED, self_play_fraction: float = _NOT_PROVIDED,
        opponents: Mapping[str, str] = _NOT_PROVIDED, evaluation_games: int = _NOT_PROVIDED,
        win_rate_window: int = _NOT_PROVIDED,
    ) -> AlgorithmConfig:
        """Train policy ``main`` in a league (docs/league.md): frozen snapshots ``"<main>_v<n>"``
        taken every ``snapshot_every_iterations`` (snapshot n at the end of iteration n*K) and/or
        when main's win rate against them reaches ``snapshot_win_rate`` (with neither: every 10
        iterations), at most ``max_snapshots`` (None: no limit; then the oldest is removed);
        each game's opponent drawn by ``matchmaking`` (``"pfsp"``: weight ``(1 - p)^2``,
        ``"uniform"``, ``"latest"``), or main itself with probability ``self_play_fraction``
        (default 0.2), main's seat drawn per game; ``win_rate_window`` (default 100) games per
        opponent behind the win rates. ``opponents`` (``{name: "random_legal" |
        "module:function_or_class"}``: fixed scripted opponents, stored by import path) are drawn
        in training with the snapshots (not by ``"latest"``), and ``algo.evaluate()`` plays
        ``evaluation_games`` greedy games against each.

        The league draws the policy mapping itself: a ``policy_mapping_fn`` as well is a
        ConfigError. Without ``multi_agent(policies=...)`` the one policy is ``main``. As with
        every section, a later call sets what it names and keeps what earlier calls set (the
        default snapshot rule holds while no call named one).
        """
        given = {k: v for k, v in locals().items() if k != "self" and v is not _NOT_PROVIDED}
        self._check_changeable(("league_config", "policies"))
        # What earlier calls named: remembered while league_config is still what they made
        # (else, set by from_dict or by hand, all of it but the default snapshot rule).
        made, named = getattr(self, "_league_named", (None, {}))
        earlier = {} if self.league_config is None else (
            named if made == self.league_config else stored_as_named(self.league_config))
        given = {**earlier, **given}
        settings = league_settings(**given)
        self._league_named = (copy.deepcopy(settings), copy.deepcopy(given))
        if set(self.policies) == {DEFAULT_POLICY_ID} and self.policies[DEFAULT_POLICY_ID] == PolicySpec():
            self.policies = {settings["main"]: PolicySpec()}
        self.league_config = settings
        return self

    def resources(self, *, torch_num_threads: int | str = _NOT_PROVIDED) -> AlgorithmConfig:
        """Set torch's intra-op threads while this algorithm trains and evaluates.

        ``"auto"`` (default) uses 1 thread when every policy network is small (under 1M
        parameters), where splitting tiny matrix products across threads costs more than it
        saves (and collapses on a busy machine); otherwise torch's own setting. The previous
        setting is restored after each call.
        """
        return self._set("resources", {"torch_num_threads": torch_num_threads})

    def checkpointing(self, **kwargs: Any) -> AlgorithmConfig:
        """Set what checkpoints contain beyond the state.

        ``export_native_model_files=True`` writes each policy's model as ONNX and a torch
        program into ``policies/<id>/model/``; algorithms may add settings (DQN:
        ``store_replay_buffer``).
        """
        return self._set("checkpointing", kwargs)

    def callbacks(self, callbacks_class: Any = None) -> AlgorithmConfig:
        """Set the :class:`cairn.Callbacks` subclass whose hooks run in training (a class, a
        name registered with ``cairn.registry.register_class``, or ``"package.module:QualName"``;
        None: no callbacks). The config stores its reference (docs/callbacks.md)."""
        self._check_changeable(("callbacks_class",))
        reference = callbacks_reference(callbacks_class)
        self.FIELDS["callbacks_class"].check("callbacks_class", reference)
        self.callbacks_class = reference
        return self

    def debugging(
        self, *, seed: int | None = _NOT_PROVIDED, log_dir: str | None = _NOT_PROVIDED
    ) -> AlgorithmConfig:
        """Set the seed (reproducible runs with ``num_env_runners=0``) and the log directory
        under which ``save()`` numbers its checkpoints."""
        return self._set("debugging", {"seed": seed, "log_dir": log_dir})

    # ------------------------------------------------------------------------------ lifecycle
    def copy(self) -> Self:
        """A deep copy (callables are shared, not copied), not frozen: a built algorithm's
        ``algo.config.copy()`` may be changed (its dicts and lists too) and built into another
        algorithm (RLlib's ``copy(copy_frozen=False)``)."""
        # deepcopy shares functions but copied callable objects (a policy mapping with state, a
        # functools.partial): build() copies its config, so a user's later change to the object
        # never reached the algorithm.
        memo: dict[int, Any] = {}
        for key in self.callable_fields():
            value = getattr(self, key)
            if callable(value) and not isinstance(value, Mapping):
                memo[id(value)] = value
        return self._copied(memo, frozen=False)

    def __deepcopy__(self, memo: dict[int, Any]) -> Self:
        # A deep copy of a frozen config is frozen as well (its dicts and lists read-only again:
        # copying them gives plain ones); copy() gives a changeable one.
        return self._copied(memo, frozen=self._frozen)

    def _copied(self, memo: dict[int, Any], *, frozen: bool) -> Self:
        clone = type(self).__new__(type(self))
        memo[id(self)] = clone
        for name, value in self.__dict__.items():  # past __setattr__: the clone is not frozen yet
            clone.__dict__[name] = copy.deepcopy(value, memo)
        clone.__dict__["_frozen"] = False
        if frozen:
            clone.freeze()
        return clone

    def validate(self) -> None:
        """Check every setting; raise ConfigError naming the key, the value and the fix.

        Checks that need the environment (spaces, agent mapping) run in ``build()``.
        """
        for key, field in self.FIELDS.items():
            field.check(key, getattr(self, key))
        if self.env is None:
            raise ConfigError(
                "No environment set. Call config.environment('CartPole-v1') or pass a creator."
            )
        check_env(self.env)
        if not isinstance(self.env_config, Mapping):
            raise ConfigError(f"Config 'env_config' must be a dict, got {self.env_config!r}.")
        if (self.minibatches_from_train_batch and self.minibatch_size is not None
                and self.minibatch_size > self.train_batch_size):
            raise ConfigError(
                f"Config 'minibatch_size'={self.minibatch_size} is larger than "
                f"'train_batch_size'={self.train_batch_size}; lower minibatch_size or raise "
                "train_batch_size."
            )
        policies = normalize_policies(self.policies)
        check_policy_mapping(self.policy_mapping_fn)
        if self.policy_mapping_fn is None and len(policies) > 1 and self.league_config is None:
            raise ConfigError(
                f"{len(policies)} policies {sorted(policies)} but no policy_mapping_fn: pass "
                "config.multi_agent(policy_mapping_fn=...) to say which agent uses which policy."
            )
        if isinstance(self.policy_mapping_fn, Mapping):
            for agent_id, pid in self.policy_mapping_fn.items():
                check_mapped_policy_id(agent_id, pid, policies)
        check_policies_to_train(self.policies_to_train, policies)
        if self.league_config is not None:
            self._check_league(policies)
        check_learners(self.num_learners, self.model, policies)
        for pid, spec in policies.items():
            if spec.config:
                model = require_mapping(spec.config.get("model", {}), f"policies[{pid!r}].config['model']")
                check_model_config(merge_setting(self.model, model))  # the model policy_config gives
        check_saveable(self.to_dict())  # what every save stores: refused now, not after training

    def _check_league(self, policies: Mapping[str, PolicySpec]) -> None:
        main = self.league_config["main"] if self.league_config else None
        if main not in policies:
            raise ConfigError(
                f"config.league(main={main!r}) names no configured policy; the policies are "
                f"{sorted(policies)}. Pass multi_agent(policies={{{main!r}}}) or league(main=...).")
        taken = sorted(set(self.league_config["opponents"]) & set(policies)) if self.league_config else []
        if taken:
            raise ConfigError(
                f"config.league(opponents=...) names the fixed opponent {taken[0]!r}, which is also a policy "
                f"ID (the policies are {sorted(policies)}); the policy would play the games drawn against "
                "the opponent. Fix: give the opponent or the policy another name.")
        fn = self.policy_mapping_fn
        if fn is not None and not isinstance(fn, DrawnMapping):
            raise ConfigError(
                f"config.league(...) and policy_mapping_fn={getattr(fn, '__qualname__', fn)!r} are both "
                "set: the league draws each game's opponent itself. Remove the policy_mapping_fn "
                "(multi_agent(policy_mapping_fn=None)) or drop config.league().")

    def build(self) -> AlgorithmLike:
        """Validate, then build the algorithm (environments, policies, env runners): an
        :class:`~cairn.core.AlgorithmLike` (the config layer imports no algorithm; the class
        is found by its registry name)."""
        self.validate()
        if self.algo_class_name is None:
            raise ConfigError(
                "A plain AlgorithmConfig builds no algorithm; use an algorithm's config such as "
                "cairn.PPOConfig()."
            )
        algo_cls: Any = algorithm_classes.algorithm_class(self.algo_class_name)
        warn_main_module_references(self.to_dict(), when="build()", stacklevel=2)
        return algo_cls(config=self)  # type: ignore[no-any-return]

    # ---------------------------------------------------------------------------- derived
    @property
    def is_multi_agent(self) -> bool:
        """Whether more than one policy is configured, or agents are mapped explicitly."""
        return len(self.policies) > 1 or self.policy_mapping_fn is not None

    def get_rollout_fragment_length(self, num_runners: int | None = None) -> int:
        """Steps per environment per sample() call on each runner."""
        if self.rollout_fragment_length != "auto":
            return int(self.rollout_fragment_length)
        runners = max(1, self.num_env_runners if num_runners is None else num_runners)
        per_env = self.train_batch_size / (runners * self.num_envs_per_env_runner)
        return max(1, int(-(-per_env // 1)))

    def own_policy_settings(self) -> dict[str, Any]:
        """The algorithm's settings that each policy's config takes unless its PolicySpec.config
        sets them itself (DQN's ``epsilon``, SAC's learning rates); none here."""
        return {}

    def policy_config(self, policy_id: str) -> dict[str, Any]:
        """The settings a policy gets: shared ones, overridden by its PolicySpec.config, then
        :meth:`own_policy_settings` where the spec does not set them."""
        base: dict[str, Any] = {
            "model": copy.deepcopy(self.model),
            "lr": self.lr,
            "observation_filter": self.observation_filter,
        }
        spec = self.policies[policy_id]
        overrides = copy.deepcopy(spec.config or {})
        if "model" in overrides:
            base["model"] = merge_setting(base["model"], overrides.pop("model"))
        base.update(overrides)
        for key, value in self.own_policy_settings().items():
            base.setdefault(key, value)  # the shared keys are set: only a spec's own keys stay
        return base

    def policy_settings_set_by(self, keys: Iterable[str]) -> frozenset[str]:
        """The keys of :meth:`policy_config` that the settings ``keys`` (flat ``to_dict()``
        keys, as a restore's ``config_overrides`` names them) set: a restored policy takes
        those from the restored config and keeps its own stored value of the others (a
        ``set_learning_rate`` survives a save and restore)."""
        own = {"lr", "model", "observation_filter", *self.own_policy_settings()}
        return frozenset(key for key in keys if key in own)

    def map_agent(self, agent_id: Any, *, episode: Mapping[str, Any] | None = None,
                  worker: int | None = None) -> str:
        """The policy ID that controls ``agent_id``; the env runners pass the ``episode`` being
        mapped (``{"env_index": i, "mapped": {agent: policy ID so far}}``) and their ``worker``
        index, which a callable mapping receives as keywords (None when cairn probes it)."""
        return map_agent(self.policy_mapping_fn, self.policies, agent_id, episode=episode, worker=worker)

    # ----------------------------------------------------------------------- dict conversion
    def to_dict(self) -> dict[str, Any]:
        """Every setting as a flat, JSON-safe dict with RLlib-style keys.

        Callables become ``{"__callable__": "module:function"}`` when importable, else
        ``{"__callable__": None, "name": ...}`` (not storable; a restore must pass it again).
        """
        return config_to_dict(self)

    @classmethod
    def from_dict(
        cls, data: Mapping[str, Any], *, callables: Mapping[str, Any] | None = None
    ) -> AlgorithmConfig:
        """Rebuild a config from :meth:`to_dict` output (any subclass, picked by
        ``algo_class``). ``callables`` supplies values for keys whose callable was not
        storable, e.g. ``{"policy_mapping_fn": fn}``."""
        if not isinstance(data, Mapping):
            raise ConfigError(f"from_dict needs a dict, got {type(data).__name__}.")
        config = cls.class_for(data.get("algo_class"))()
        load_dict(config, data, callables)
        return config

    @classmethod
    def class_for(cls, algo_class: Any) -> type[AlgorithmConfig]:
        """The config class of the algorithm ``algo_class`` names (a registry name, as
        ``to_dict()`` stores it); this class for None or its own algorithm's name."""
        found = algorithm_classes.config_class_for(cls, algo_class)
        if not (isinstance(found, type) and issubclass(found, AlgorithmConfig)):
            raise algorithm_classes.missing_config_class(algo_class)
        return found

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.to_dict()!r})"
