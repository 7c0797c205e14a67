"""ActorCriticConfig: the settings SAC and TD3 share, their training rounds and replay, and their
checks; each algorithm's config adds its own fields and policy settings."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from cairn.algorithms.dqn.config import check_fragment_length, check_replay_buffer_config
from cairn.config.algorithm_config import BASE_FIELDS, AlgorithmConfig
from cairn.config.fields import Field, boolean, non_negative_int, number, optional, positive_int
from cairn.errors import ConfigError
from cairn.replay.factory import DEFAULT_REPLAY_BUFFER_CONFIG

__all__ = ["ActorCriticConfig", "actor_critic_fields", "check_gradient_steps", "check_update_rounds"]


def check_gradient_steps(key: str, value: Any) -> None:
    """A positive ``gradient_steps``, or -1 (as many as the round's new transitions)."""
    if value != -1:
        positive_int(key, value)


def check_update_rounds(config: ActorCriticConfig, algorithm: str) -> None:
    """ConfigError unless ``rollout_fragment_length`` is ``"auto"`` (or ``train_freq``) and at
    most one of ``training_intensity`` and ``gradient_steps`` is set (SAC's and TD3's rounds)."""
    fragment = config.rollout_fragment_length
    if fragment != "auto" and fragment != config.train_freq:
        raise ConfigError(
            f"Config 'rollout_fragment_length'={fragment!r} contradicts 'train_freq'="
            f"{config.train_freq}: {algorithm} samples train_freq steps per env between rounds of "
            "gradient steps. Set train_freq only (rollout_fragment_length='auto')."
        )
    if config.training_intensity is not None and config.gradient_steps != 1:
        raise ConfigError(
            f"Config 'training_intensity'={config.training_intensity!r} and 'gradient_steps'="
            f"{config.gradient_steps} both set how many gradient steps {algorithm} takes. Set one: "
            "training_intensity with gradient_steps=1 (its default), or training_intensity=None."
        )


def actor_critic_fields(policy_defaults: Mapping[str, Any], own: Mapping[str, Field]) -> dict[str, Field]:
    """The FIELDS of SAC's or TD3's config: the shared sections with the policy's default ``lr``
    and ``model`` (``policy_defaults``), the round and replay settings, and the algorithm's
    ``own`` fields after ``n_step`` (the order of ``to_dict()``, which stored configs keep)."""
    return {
        **BASE_FIELDS,
        "rollout_fragment_length": Field("env_runners", "auto", check_fragment_length,
                                         "steps per env per round ('auto': train_freq)"),
        "lr": Field("training", policy_defaults["lr"], number(0.0, 10.0, low_open=True), "learning rate"),
        "train_batch_size": Field("training", 1000, positive_int, "env steps per iteration"),
        "minibatch_size": Field("training", 256, positive_int, "transitions per gradient step"),
        "grad_clip": Field("training", None, optional(number(0.0, 1e12, low_open=True)), "max grad norm"),
        "model": Field("training", policy_defaults["model"], BASE_FIELDS["model"].check, "network settings"),
        "replay_buffer_config": Field("training", {**DEFAULT_REPLAY_BUFFER_CONFIG, "capacity": 1_000_000},
                                      check_replay_buffer_config, "replay buffer type and size"),
        "train_freq": Field("training", 1, positive_int, "env steps per env between updates"),
        "gradient_steps": Field("training", 1, check_gradient_steps, "gradient steps per round"),
        "training_intensity": Field("training", None, optional(number(0.0, 1e6, low_open=True)),
                                    "replay ratio (None: gradient_steps)"),
        "tau": Field("training", 0.005, number(0.0, 1.0, low_open=True), "target Polyak coefficient"),
        "n_step": Field("training", 1, positive_int, "n-step returns"),
        **own,
        "num_steps_sampled_before_learning_starts": Field(
            "training", 100, non_negative_int, "env steps before learning"),
        "store_replay_buffer": Field("checkpointing", False, boolean, "buffer in checkpoints"),
    }


class ActorCriticConfig(AlgorithmConfig):
    """What SAC's and TD3's configs share (documented in docs/sac.md):

    - ``train_freq``: env steps per environment between two rounds of gradient steps (sets
      ``rollout_fragment_length``, which stays ``"auto"``).
    - ``gradient_steps``: gradient steps per policy per round; ``-1``: as many as the
      transitions the round added (SB3's ``-1``).
    - ``training_intensity`` (RLlib's): instead of ``gradient_steps``, the transitions
      replayed per transition sampled: each round takes ``rows * training_intensity /
      minibatch_size`` gradient steps per policy, fractions carried over (``minibatch_size``:
      one gradient step per sampled transition). None (default): ``gradient_steps`` decides;
      with a value, ``gradient_steps`` must stay 1.
    - ``tau``: Polyak coefficient of the targets.
    - ``n_step``: length of the return before bootstrapping; windows stop only at episode
      ends. A transition whose window runs past the end of a sampled fragment waits for the
      next fragment of its trajectory before it enters the buffer, so any ``n_step`` works
      with any ``train_freq``.
    - ``replay_buffer_config``: as DQN's (``{"type": "uniform" | "prioritized", "capacity",
      "alpha", "beta", "epsilon"}``), merged over the current value.
    - ``num_steps_sampled_before_learning_starts`` (SB3's ``learning_starts``): env steps
      collected before any gradient step. Until then each policy acts uniformly at random for
      as many of its own sampled steps (``initial_random_steps``): agent steps, which in
      multi-agent training are not env steps (docs/sac.md, docs/td3.md).

    ``checkpointing(store_replay_buffer=True)`` writes the replay buffers into checkpoints
    (and into ``get_state()``), for exact resume.
    """

    #: Minibatches come from replay: one larger than an iteration's env steps is fine.
    minibatches_from_train_batch = False

    # One attribute per shared field, so that mypy checks every option read.
    replay_buffer_config: dict[str, Any]
    train_freq: int
    gradient_steps: int
    training_intensity: float | None
    tau: float
    n_step: int
    num_steps_sampled_before_learning_starts: int
    store_replay_buffer: bool

    def validate(self) -> None:
        super().validate()
        check_update_rounds(self, str(self.algo_class_name))

    def get_rollout_fragment_length(self, num_runners: int | None = None) -> int:
        """``train_freq``: the steps per env between two rounds of gradient steps."""
        return self.train_freq

    def policy_config(self, policy_id: str) -> dict[str, Any]:
        """The shared policy settings plus :meth:`own_policy_settings` and the random warm-up."""
        base = super().policy_config(policy_id)
        base.setdefault("initial_random_steps", self.num_steps_sampled_before_learning_starts)
        return base

    def policy_settings_set_by(self, keys: Iterable[str]) -> frozenset[str]:
        """As the base class's, plus ``initial_random_steps`` for
        ``num_steps_sampled_before_learning_starts``."""
        keys = list(keys)
        derived = {"initial_random_steps"} if "num_steps_sampled_before_learning_starts" in keys else set()
        return super().policy_settings_set_by(keys) | derived
