"""DQNConfig: DQN's settings on top of the shared AlgorithmConfig sections."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any, ClassVar

from cairn.algorithms.dqn.dqn_policy import DEFAULT_EPSILON, DQNPolicy, check_epsilon_schedule
from cairn.algorithms.dqn.loss import TD_ERROR_LOSS_FNS
from cairn.config.algorithm_config import BASE_FIELDS, AlgorithmConfig
from cairn.config.base_fields import check_fragment_length
from cairn.config.fields import (
    Field,
    boolean,
    check_section,
    choice,
    int_in,
    non_negative_int,
    number,
    optional,
    positive_int,
)
from cairn.errors import ConfigError
from cairn.replay.factory import DEFAULT_REPLAY_BUFFER_CONFIG, MAX_REPLAY_CAPACITY, REPLAY_BUFFER_TYPES

__all__ = ["DQNConfig", "UPDATE_BACKENDS", "check_replay_buffer_config", "check_fragment_length"]

#: ``update_backend`` values: numpy where it applies, else torch; always torch; always numpy.
UPDATE_BACKENDS = ("auto", "torch", "numpy")


def check_replay_buffer_config(key: str, value: Any) -> None:
    """A ``replay_buffer_config`` (DQN's and SAC's): known keys, merged over the defaults."""
    check_section(key, dict(value) if isinstance(value, Mapping) else value, DEFAULT_REPLAY_BUFFER_CONFIG)
    merged = {**DEFAULT_REPLAY_BUFFER_CONFIG, **value}
    choice(*REPLAY_BUFFER_TYPES)(f"{key}.type", merged["type"])
    int_in(1, MAX_REPLAY_CAPACITY, "rows kept in memory")(f"{key}.capacity", merged["capacity"])
    number(0.0, 1e6)(f"{key}.alpha", merged["alpha"])
    number(0.0, 1e6)(f"{key}.beta", merged["beta"])
    number(0.0, 1e6)(f"{key}.epsilon", merged["epsilon"])


class DQNConfig(AlgorithmConfig):
    """Config for :class:`~cairn.algorithms.dqn.DQN`.

    Shared settings keep their cairn meaning: ``train_batch_size`` is the number of env steps
    sampled per ``train()`` call (RLlib calls this ``min_sample_timesteps_per_iteration``),
    ``minibatch_size`` the transitions per gradient update (RLlib's ``train_batch_size``,
    SB3's ``batch_size``), and ``rollout_fragment_length`` the steps per environment between
    two rounds of learning.

    DQN's own ``training()`` settings:

    - ``replay_buffer_config``: ``{"type": "uniform" | "prioritized", "capacity", "alpha",
      "beta", "epsilon"}`` (merged over the current value; the last three for prioritized).
    - ``target_network_update_freq``: sampled steps of a policy between target syncs.
    - ``double_q``, ``dueling``: double Q-learning targets; dueling value/advantage heads.
    - ``n_step``: length of the return before bootstrapping.
    - ``td_error_loss_fn``: ``"huber"`` (delta 1) or ``"mse"``.
    - ``epsilon``: ``[[timestep, epsilon], ...]``, piecewise linear over a policy's steps.
    - ``num_steps_sampled_before_learning_starts``: env steps collected before any update.
    - ``training_intensity``: replayed transitions per sampled transition (a replay ratio);
      None: one gradient update per sampling round. Default 32 (128 updates of 64 per 256 steps).
    - ``update_backend``: who runs each gradient update. ``"torch"``: autograd and the policy's
      optimizer. ``"numpy"``: the same step written in numpy (``dqn/numpy_update.py``), for a
      ``QNetwork`` with ``relu`` or ``tanh`` trained by plain ``torch.optim.Adam`` on float32
      CPU parameters; build() raises ConfigError for any other policy. ``"auto"`` (default):
      numpy where it applies, else torch. Results name the one that ran
      (``result["learners"][policy_id]["update_backend"]``).

    ``checkpointing(store_replay_buffer=True)`` writes the replay buffers into checkpoints
    (and into ``get_state()``), for exact resume.

    >>> config = DQNConfig().environment("CartPole-v1").training(n_step=3, lr=1e-3)
    """

    FIELDS: ClassVar[dict[str, Field]] = {
        **BASE_FIELDS,
        # Defaults: rl-baselines3-zoo's CartPole-v1 DQN settings (256 steps, then 128 updates
        # of 64), which reached a greedy return of 500 within 50k steps on 3 of 3 seeds here.
        "rollout_fragment_length": Field("env_runners", 256, check_fragment_length,
                                         "steps per env per round"),
        "lr": Field("training", DQNPolicy.DEFAULT_CONFIG["lr"], number(0.0, 10.0, low_open=True),
                     "learning rate"),
        "train_batch_size": Field("training", 1000, positive_int, "env steps per iteration"),
        "grad_clip": Field("training", 10.0, optional(number(0.0, 1e12, low_open=True)), "max grad norm"),
        "model": Field("training", DQNPolicy.DEFAULT_CONFIG["model"], BASE_FIELDS["model"].check,
                       "network settings"),
        "replay_buffer_config": Field("training", DEFAULT_REPLAY_BUFFER_CONFIG,
                                      check_replay_buffer_config, "replay buffer type and size"),
        "target_network_update_freq": Field("training", 256, positive_int, "steps between syncs"),
        "double_q": Field("training", True, boolean, "double Q-learning"),
        "dueling": Field("training", True, boolean, "dueling heads"),
        "n_step": Field("training", 1, positive_int, "n-step returns"),
        "td_error_loss_fn": Field("training", "huber", choice(*TD_ERROR_LOSS_FNS), "TD loss"),
        "epsilon": Field("training", DEFAULT_EPSILON, check_epsilon_schedule, "exploration schedule"),
        "num_steps_sampled_before_learning_starts": Field(
            "training", 1000, non_negative_int, "env steps before learning"),
        "training_intensity": Field("training", 32.0, optional(number(0.0, 1e6, low_open=True)),
                                    "replay ratio"),
        "update_backend": Field("training", "auto", choice(*UPDATE_BACKENDS),
                                "gradient update in numpy or torch"),
        "store_replay_buffer": Field("checkpointing", False, boolean, "buffer in checkpoints"),
    }
    algo_class_name = "DQN"
    #: Minibatches come from replay: one larger than an iteration's env steps is fine.
    minibatches_from_train_batch = False

    # One attribute per DQN field (documented above), so that mypy checks every option read.
    replay_buffer_config: dict[str, Any]
    target_network_update_freq: int
    double_q: bool
    dueling: bool
    n_step: int
    td_error_loss_fn: str
    epsilon: list[list[float]]
    num_steps_sampled_before_learning_starts: int
    training_intensity: float | None
    update_backend: str
    store_replay_buffer: bool

    def validate(self) -> None:
        super().validate()
        if self.update_backend == "numpy" and (self.num_learners or self.num_gpus_per_learner):
            raise ConfigError(
                "update_backend='numpy' runs in this process on the CPU, but config.learners(...) "
                f"asks for num_learners={self.num_learners}, num_gpus_per_learner="
                f"{self.num_gpus_per_learner}. Use update_backend='auto' or 'torch' (torch updates "
                "wherever the learners run), or num_learners=0 and num_gpus_per_learner=0."
            )

    def own_policy_settings(self) -> dict[str, Any]:
        """DQN's ``dueling`` and ``epsilon``."""
        return {key: copy.deepcopy(getattr(self, key)) for key in ("dueling", "epsilon")}
