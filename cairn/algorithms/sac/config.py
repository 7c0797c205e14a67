"""SACConfig: SAC's settings on top of the shared AlgorithmConfig sections."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

# The replay buffer check is DQN's: the same buffers, the same keys.
from cairn.algorithms.dqn.config import check_fragment_length, check_replay_buffer_config
from cairn.algorithms.sac.sac_policy import SACPolicy, check_target_entropy
from cairn.config.algorithm_config import BASE_FIELDS, AlgorithmConfig
from cairn.config.fields import Field, boolean, non_negative_int, number, optional, positive_int
from cairn.errors import ConfigError
from cairn.replay.factory import DEFAULT_REPLAY_BUFFER_CONFIG

__all__ = ["SACConfig", "check_gradient_steps", "check_update_rounds"]

_lr = optional(number(0.0, 10.0, low_open=True))


def check_gradient_steps(key: str, value: Any) -> None:
    """A positive ``gradient_steps``, or -1 (as many as the round's new transitions)."""
    if value != -1:
        positive_int(key, value)


def check_update_rounds(config: Any, algorithm: str) -> None:
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


class SACConfig(AlgorithmConfig):
    """Config for :class:`~cairn.algorithms.sac.SAC`. Defaults follow Stable-Baselines3's SAC
    (buffer 1e6, batch 256, tau 0.005, gamma 0.99, lr 3e-4, 256x256 ReLU, learning starts
    after 100 steps, one gradient step per env step, alpha tuned from 1.0 to the target
    entropy ``-dim(A)``).

    Shared settings keep their cairn meaning: ``train_batch_size`` is the number of env steps
    sampled per ``train()`` call, ``minibatch_size`` the transitions per gradient step (SB3's
    ``batch_size``), ``lr`` the learning rate of the actor, the critics and alpha unless
    ``actor_lr``, ``critic_lr`` or ``alpha_lr`` set their own, and ``grad_clip`` (default None,
    as SB3) clips the actor's and the critics' gradient norms separately.

    SAC's own ``training()`` settings:

    - ``train_freq``: env steps per environment between two rounds of gradient steps (sets
      ``rollout_fragment_length``, which stays ``"auto"``).
    - ``gradient_steps``: gradient steps per policy per round; ``-1``: as many as the
      transitions the round added (SB3's ``-1``).
    - ``training_intensity`` (RLlib's): instead of ``gradient_steps``, the transitions
      replayed per transition sampled: each round takes ``rows * training_intensity /
      minibatch_size`` gradient steps per policy, fractions carried over (``minibatch_size``:
      one gradient step per sampled transition). None (default): ``gradient_steps`` decides;
      with a value, ``gradient_steps`` must stay 1.
    - ``tau``: Polyak coefficient of the target critics, applied after every gradient step.
    - ``n_step``: length of the return before bootstrapping; windows stop only at episode
      ends. A transition whose window runs past the end of a sampled fragment waits for the
      next fragment of its trajectory before it enters the buffer, so any ``n_step`` works
      with any ``train_freq``.
    - ``initial_alpha``, ``target_entropy`` (``"auto"``: ``-dim(A)``): entropy tuning.
    - ``actor_lr``, ``critic_lr``, ``alpha_lr``: None: ``lr``.
    - ``replay_buffer_config``: as DQN's (``{"type": "uniform" | "prioritized", "capacity",
      "alpha", "beta", "epsilon"}``), merged over the current value.
    - ``num_steps_sampled_before_learning_starts`` (SB3's ``learning_starts``): env steps
      collected, with uniformly random actions, before any gradient step.

    ``checkpointing(store_replay_buffer=True)`` writes the replay buffers into checkpoints
    (and into ``get_state()``), for exact resume.

    >>> config = SACConfig().environment("Pendulum-v1").training(tau=0.01, critic_lr=1e-3)
    """

    FIELDS: ClassVar[dict[str, Field]] = {
        **BASE_FIELDS,
        "rollout_fragment_length": Field("env_runners", "auto", check_fragment_length,
                                         "steps per env per round ('auto': train_freq)"),
        "lr": Field("training", SACPolicy.DEFAULT_CONFIG["lr"], number(0.0, 10.0, low_open=True),
                     "learning rate"),
        "train_batch_size": Field("training", 1000, positive_int, "env steps per iteration"),
        "minibatch_size": Field("training", 256, positive_int, "transitions per gradient step"),
        "grad_clip": Field("training", None, optional(number(0.0, 1e12, low_open=True)), "max grad norm"),
        "model": Field("training", SACPolicy.DEFAULT_CONFIG["model"], BASE_FIELDS["model"].check,
                       "network settings"),
        "replay_buffer_config": Field("training", {**DEFAULT_REPLAY_BUFFER_CONFIG, "capacity": 1_000_000},
                                      check_replay_buffer_config, "replay buffer type and size"),
        "train_freq": Field("training", 1, positive_int, "env steps per env between updates"),
        "gradient_steps": Field("training", 1, check_gradient_steps, "gradient steps per round"),
        "training_intensity": Field("training", None, optional(number(0.0, 1e6, low_open=True)),
                                    "replay ratio (None: gradient_steps)"),
        "tau": Field("training", 0.005, number(0.0, 1.0, low_open=True), "target Polyak coefficient"),
        "n_step": Field("training", 1, positive_int, "n-step returns"),
        "initial_alpha": Field("training", 1.0, number(0.0, 1e9, low_open=True), "starting temperature"),
        "target_entropy": Field("training", "auto", check_target_entropy, "entropy target"),
        "actor_lr": Field("training", None, _lr, "actor learning rate (None: lr)"),
        "critic_lr": Field("training", None, _lr, "critic learning rate (None: lr)"),
        "alpha_lr": Field("training", None, _lr, "alpha learning rate (None: lr)"),
        "num_steps_sampled_before_learning_starts": Field(
            "training", 100, non_negative_int, "env steps before learning"),
        "store_replay_buffer": Field("checkpointing", False, boolean, "buffer in checkpoints"),
    }
    algo_class_name = "SAC"

    # One attribute per SAC field (documented above), so that mypy checks every option read.
    replay_buffer_config: dict[str, Any]
    train_freq: int
    gradient_steps: int
    training_intensity: float | None
    tau: float
    n_step: int
    initial_alpha: float
    target_entropy: float | str
    actor_lr: float | None
    critic_lr: float | None
    alpha_lr: float | None
    num_steps_sampled_before_learning_starts: int
    store_replay_buffer: bool

    def validate(self) -> None:
        super().validate()
        check_update_rounds(self, "SAC")

    def get_rollout_fragment_length(self, num_runners: int | None = None) -> int:
        """``train_freq``: the steps per env between two rounds of gradient steps."""
        return self.train_freq

    def policy_config(self, policy_id: str) -> dict[str, Any]:
        """The shared policy settings plus SAC's learning rates, alpha and random warm-up."""
        base = super().policy_config(policy_id)
        overrides: Mapping[str, Any] = self.policies[policy_id].config or {}
        own = {"actor_lr": self.actor_lr, "critic_lr": self.critic_lr, "alpha_lr": self.alpha_lr,
               "initial_alpha": self.initial_alpha, "target_entropy": self.target_entropy,
               "initial_random_steps": self.num_steps_sampled_before_learning_starts}
        for key, value in own.items():
            if key not in overrides:
                base[key] = value
        return base
