"""TD3Config: TD3's settings on top of the shared AlgorithmConfig sections."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from cairn.algorithms.dqn.config import check_fragment_length, check_replay_buffer_config
from cairn.algorithms.sac.config import check_gradient_steps, check_update_rounds
from cairn.algorithms.td3.td3_policy import TD3Policy
from cairn.config.algorithm_config import BASE_FIELDS, AlgorithmConfig
from cairn.config.fields import Field, boolean, non_negative_int, number, optional, positive_int
from cairn.replay.factory import DEFAULT_REPLAY_BUFFER_CONFIG

__all__ = ["TD3Config"]


class TD3Config(AlgorithmConfig):
    """Config for :class:`~cairn.algorithms.td3.TD3`. Defaults follow Stable-Baselines3's TD3
    (lr 1e-3, buffer 1e6, learning starts after 100 steps, batch 256, tau 0.005, gamma 0.99,
    one gradient step per env step, ``policy_delay`` 2, ``target_policy_noise`` 0.2 clipped at
    ``target_noise_clip`` 0.5, 400x300 ReLU networks) with Gaussian exploration noise 0.1
    (SB3 takes none unless given; its docs and rl-baselines3-zoo use ``NormalActionNoise``
    with sigma 0.1, and so does Fujimoto et al.'s code). docs/td3.md lists where each comes from.

    Shared settings keep their cairn meaning: ``train_batch_size`` is the number of env steps
    sampled per ``train()`` call, ``minibatch_size`` the transitions per gradient step (SB3's
    ``batch_size``), ``lr`` the learning rate of the actor and the critics, and ``grad_clip``
    (default None, as SB3) clips the actor's and the critics' gradient norms separately.

    TD3's own ``training()`` settings:

    - ``policy_delay``: critic updates per actor update; the targets move with the actor.
    - ``target_policy_noise``, ``target_noise_clip``: target policy smoothing, the standard
      deviation of the noise added to the target actor's action and its clip (in the [-1, 1]
      action scale).
    - ``exploration_noise``: standard deviation of the Gaussian noise added to the actor's
      action while sampling, in the [-1, 1] scale (0.1 is 5% of ``high - low``).
    - ``train_freq``, ``gradient_steps``, ``training_intensity``, ``tau``, ``n_step``,
      ``replay_buffer_config``, ``num_steps_sampled_before_learning_starts``: as SAC's
      (docs/sac.md): env steps per env between rounds, gradient steps per round (or the
      replay ratio), the targets' Polyak coefficient, n-step returns, the replay buffer, and
      the uniformly random warm-up (SB3's ``learning_starts``).

    ``checkpointing(store_replay_buffer=True)`` writes the replay buffers into checkpoints
    (and into ``get_state()``), for exact resume.

    >>> config = TD3Config().environment("Pendulum-v1").training(policy_delay=3, exploration_noise=0.2)
    """

    FIELDS: ClassVar[dict[str, Field]] = {
        **BASE_FIELDS,
        "rollout_fragment_length": Field("env_runners", "auto", check_fragment_length,
                                         "steps per env per round ('auto': train_freq)"),
        "lr": Field("training", TD3Policy.DEFAULT_CONFIG["lr"], number(0.0, 10.0, low_open=True),
                    "learning rate"),
        "train_batch_size": Field("training", 1000, positive_int, "env steps per iteration"),
        "minibatch_size": Field("training", 256, positive_int, "transitions per gradient step"),
        "grad_clip": Field("training", None, optional(number(0.0, 1e12, low_open=True)), "max grad norm"),
        "model": Field("training", TD3Policy.DEFAULT_CONFIG["model"], BASE_FIELDS["model"].check,
                       "network settings"),
        "replay_buffer_config": Field("training", {**DEFAULT_REPLAY_BUFFER_CONFIG, "capacity": 1_000_000},
                                      check_replay_buffer_config, "replay buffer type and size"),
        "train_freq": Field("training", 1, positive_int, "env steps per env between updates"),
        "gradient_steps": Field("training", 1, check_gradient_steps, "gradient steps per round"),
        "training_intensity": Field("training", None, optional(number(0.0, 1e6, low_open=True)),
                                    "replay ratio (None: gradient_steps)"),
        "tau": Field("training", 0.005, number(0.0, 1.0, low_open=True), "target Polyak coefficient"),
        "n_step": Field("training", 1, positive_int, "n-step returns"),
        "policy_delay": Field("training", 2, positive_int, "critic updates per actor update"),
        "target_policy_noise": Field("training", 0.2, number(0.0, 10.0), "target smoothing noise std"),
        "target_noise_clip": Field("training", 0.5, number(0.0, 10.0), "target smoothing noise clip"),
        "exploration_noise": Field("training", TD3Policy.DEFAULT_CONFIG["exploration_noise"],
                                   number(0.0, 10.0), "acting noise std"),
        "num_steps_sampled_before_learning_starts": Field(
            "training", 100, non_negative_int, "env steps before learning"),
        "store_replay_buffer": Field("checkpointing", False, boolean, "buffer in checkpoints"),
    }
    algo_class_name = "TD3"

    # One attribute per TD3 field (documented above), so that mypy checks every option read.
    replay_buffer_config: dict[str, Any]
    train_freq: int
    gradient_steps: int
    training_intensity: float | None
    tau: float
    n_step: int
    policy_delay: int
    target_policy_noise: float
    target_noise_clip: float
    exploration_noise: float
    num_steps_sampled_before_learning_starts: int
    store_replay_buffer: bool

    def validate(self) -> None:
        super().validate()
        check_update_rounds(self, "TD3")

    def get_rollout_fragment_length(self, num_runners: int | None = None) -> int:
        """``train_freq``: the steps per env between two rounds of gradient steps."""
        return self.train_freq

    def policy_config(self, policy_id: str) -> dict[str, Any]:
        """The shared policy settings plus TD3's exploration noise and random warm-up."""
        base = super().policy_config(policy_id)
        overrides: Mapping[str, Any] = self.policies[policy_id].config or {}
        own = {"exploration_noise": self.exploration_noise,
               "initial_random_steps": self.num_steps_sampled_before_learning_starts}
        for key, value in own.items():
            if key not in overrides:
                base[key] = value
        return base
