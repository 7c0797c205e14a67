"""TD3Config: TD3's settings on top of the shared AlgorithmConfig sections."""

from __future__ import annotations

from typing import Any, ClassVar

from cairn.algorithms.actor_critic_config import ActorCriticConfig, actor_critic_fields
from cairn.algorithms.td3.td3_policy import TD3Policy, check_exploration_noise
from cairn.config.fields import Field, number, positive_int

__all__ = ["TD3Config"]


class TD3Config(ActorCriticConfig):
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
      ``replay_buffer_config``, ``num_steps_sampled_before_learning_starts``,
      ``store_replay_buffer``: as SAC's
      (:class:`~cairn.algorithms.actor_critic_config.ActorCriticConfig`, docs/sac.md).

    >>> config = TD3Config().environment("Pendulum-v1").training(policy_delay=3, exploration_noise=0.2)
    """

    FIELDS: ClassVar[dict[str, Field]] = actor_critic_fields(TD3Policy.DEFAULT_CONFIG, {
        "policy_delay": Field("training", 2, positive_int, "critic updates per actor update"),
        "target_policy_noise": Field("training", 0.2, number(0.0, 10.0), "target smoothing noise std"),
        "target_noise_clip": Field("training", 0.5, number(0.0, 10.0), "target smoothing noise clip"),
        "exploration_noise": Field("training", TD3Policy.DEFAULT_CONFIG["exploration_noise"],
                                   check_exploration_noise, "acting noise std"),
    })
    algo_class_name = "TD3"

    # One attribute per TD3 field (documented above), so that mypy checks every option read.
    policy_delay: int
    target_policy_noise: float
    target_noise_clip: float
    exploration_noise: float

    def own_policy_settings(self) -> dict[str, Any]:
        """TD3's exploration noise."""
        return {"exploration_noise": self.exploration_noise}
