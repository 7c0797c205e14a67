"""SACConfig: SAC's settings on top of the shared AlgorithmConfig sections."""

from __future__ import annotations

from typing import Any, ClassVar

from cairn.algorithms.actor_critic_config import ActorCriticConfig, actor_critic_fields
from cairn.algorithms.sac.sac_policy import SACPolicy, check_target_entropy
from cairn.config.fields import Field, number, optional

__all__ = ["SACConfig"]

_lr = optional(number(0.0, 10.0, low_open=True))


class SACConfig(ActorCriticConfig):
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

    - ``train_freq``, ``gradient_steps``, ``training_intensity``, ``tau`` (applied after
      every gradient step), ``n_step``, ``replay_buffer_config``,
      ``num_steps_sampled_before_learning_starts``: the rounds and replay SAC and TD3 share
      (:class:`~cairn.algorithms.actor_critic_config.ActorCriticConfig`, docs/sac.md).
    - ``initial_alpha``, ``target_entropy`` (``"auto"``: ``-dim(A)``): entropy tuning.
    - ``actor_lr``, ``critic_lr``, ``alpha_lr``: None: ``lr``.

    >>> config = SACConfig().environment("Pendulum-v1").training(tau=0.01, critic_lr=1e-3)
    """

    FIELDS: ClassVar[dict[str, Field]] = actor_critic_fields(SACPolicy.DEFAULT_CONFIG, {
        "initial_alpha": Field("training", 1.0, number(0.0, 1e9, low_open=True), "starting temperature"),
        "target_entropy": Field("training", "auto", check_target_entropy, "entropy target"),
        "actor_lr": Field("training", None, _lr, "actor learning rate (None: lr)"),
        "critic_lr": Field("training", None, _lr, "critic learning rate (None: lr)"),
        "alpha_lr": Field("training", None, _lr, "alpha learning rate (None: lr)"),
    })
    algo_class_name = "SAC"

    # One attribute per SAC field (documented above), so that mypy checks every option read.
    initial_alpha: float
    target_entropy: float | str
    actor_lr: float | None
    critic_lr: float | None
    alpha_lr: float | None

    def own_policy_settings(self) -> dict[str, Any]:
        """SAC's learning rates and alpha."""
        return {"actor_lr": self.actor_lr, "critic_lr": self.critic_lr, "alpha_lr": self.alpha_lr,
                "initial_alpha": self.initial_alpha, "target_entropy": self.target_entropy}
