"""IMPALAConfig and APPOConfig: V-trace's settings on top of the shared AlgorithmConfig sections,
with RLlib's names and defaults (docs/impala.md has the table)."""

from __future__ import annotations

from typing import Any, ClassVar

from cairn.config.algorithm_config import BASE_FIELDS, AlgorithmConfig
from cairn.config.fields import Field, boolean, number, optional, positive_int
from cairn.errors import ConfigError

__all__ = ["IMPALAConfig", "APPOConfig", "IMPALA_FIELDS"]

_ratio_clip = optional(number(0.0, 1e12, low_open=True))


def _check_vtrace(key: str, value: Any) -> None:
    boolean(key, value)
    if value is not True:
        # RLlib's new API stack refuses vtrace=False too: without the correction the learner
        # would treat every fragment as on-policy, which the lag of an asynchronous run breaks.
        raise ConfigError(
            f"Config {key!r}={value!r} is not supported: cairn's IMPALA and APPO always correct "
            "for the behaviour policy with V-trace (as RLlib's new API stack). Leave vtrace=True; "
            "for on-policy advantages use cairn.PPOConfig.")


#: The settings IMPALA's config has beyond (or instead of the defaults of) BASE_FIELDS.
IMPALA_FIELDS: dict[str, Field] = {
    **BASE_FIELDS,
    "rollout_fragment_length": Field("env_runners", 50, BASE_FIELDS["rollout_fragment_length"].check,
                                     "steps per env per fragment"),
    "max_requests_in_flight_per_env_runner": Field("env_runners", 1, positive_int,
                                                   "sample() requests queued on each remote runner"),
    "lr": Field("training", 0.0005, number(0.0, 10.0, low_open=True), "learning rate"),
    "train_batch_size": Field("training", 500, positive_int, "env steps per learner update"),
    "minibatch_size": Field("training", None, optional(positive_int), "rows per SGD step (None: all)"),
    "num_epochs": Field("training", 1, positive_int, "passes over each train batch"),
    "grad_clip": Field("training", 40.0, optional(number(0.0, 1e12, low_open=True)), "max grad norm"),
    "vtrace": Field("training", True, _check_vtrace, "V-trace off-policy correction"),
    "vtrace_clip_rho_threshold": Field("training", 1.0, _ratio_clip, "rho_bar of V-trace's targets"),
    "vtrace_clip_pg_rho_threshold": Field("training", 1.0, _ratio_clip, "clip of the policy gradient's rho"),
    "vf_loss_coeff": Field("training", 0.5, number(0.0, 1e6), "value loss weight"),
    "entropy_coeff": Field("training", 0.01, number(0.0, 1e6), "entropy bonus weight"),
    "broadcast_interval": Field("training", 1, positive_int, "learner updates between weight broadcasts"),
}


class IMPALAConfig(AlgorithmConfig):
    """Config for :class:`~cairn.algorithms.impala.IMPALA` (Espeholt et al. 2018). Defaults are
    RLlib's IMPALA's: fragments of ``rollout_fragment_length=50`` steps per environment, learner
    updates of ``train_batch_size=500`` env steps, ``lr=0.0005``, ``grad_clip=40``, one epoch
    over the whole batch (``num_epochs=1``, ``minibatch_size=None``).

    IMPALA's own ``training()`` settings:

    - ``vtrace``: must stay True (V-trace's off-policy correction; RLlib's new stack also
      refuses False).
    - ``vtrace_clip_rho_threshold`` (``rho_bar``, 1.0), ``vtrace_clip_pg_rho_threshold`` (the
      policy gradient's rho clip, 1.0); None: no clip.
    - ``vf_loss_coeff`` (0.5, on ``0.5 (V - v_s)^2``), ``entropy_coeff`` (0.01).
    - ``broadcast_interval`` (1): learner updates between two weight broadcasts to remote
      runners sampling asynchronously; the synchronous path sends the weights before every
      sample, so it does not read it.
    - ``minibatch_size``: None (one gradient step per epoch over the whole batch) or rows per
      step, drawn in a shuffled order from the algorithm's generator.

    ``env_runners(max_requests_in_flight_per_env_runner=...)`` (RLlib's name and default, 1):
    ``sample()`` requests kept queued on each remote runner. cairn's learner learns in the
    driver's thread, which sends a runner its next request only between learner updates, so a
    runner samples at most this many fragments while the learner learns one batch; raising it
    lets sampling overlap a longer learn step, at the price of older weights in the fragments
    (each request acts with the weights current when it was sent, so the policy lag grows) and
    fragments held in Ray's object store (docs/impala.md, "Settings").

    >>> config = IMPALAConfig().environment("CartPole-v1").training(vf_loss_coeff=0.25)
    """

    FIELDS: ClassVar[dict[str, Field]] = IMPALA_FIELDS
    algo_class_name = "IMPALA"

    minibatch_size: int | None  # type: ignore[assignment]  # None: the whole train batch
    vtrace: bool
    vtrace_clip_rho_threshold: float | None
    vtrace_clip_pg_rho_threshold: float | None
    vf_loss_coeff: float
    entropy_coeff: float
    broadcast_interval: int
    max_requests_in_flight_per_env_runner: int


class APPOConfig(IMPALAConfig):
    """Config for :class:`~cairn.algorithms.impala.APPO` (RLlib's name for IMPACT, Luo et al.
    2020): IMPALA's settings (RLlib's APPO overrides none of the ones cairn has) plus:

    - ``clip_param`` (0.4): the surrogate's clip range.
    - ``use_kl_loss`` (False), ``kl_coeff`` (1.0, the initial weight), ``kl_target`` (0.01): a
      penalty ``kl_coeff * KL(pi_target || pi)``, whose weight adapts at each target update.
    - ``target_network_update_freq`` (1): train batches learnt between two copies of the
      policy's weights into its target network (the policy the ratio is taken against).
      RLlib 2.60's default, 2, counts units of its circular buffer (8 x 2 train-batch updates
      each), which cairn does not have; docs/impala.md, "Settings", says how the two compare.
    - ``target_worker_clipping`` (2.0): IMPACT's clip of ``mu / pi_target``.

    >>> config = APPOConfig().environment("CartPole-v1").training(clip_param=0.3, use_kl_loss=True)
    """

    FIELDS: ClassVar[dict[str, Field]] = {
        **IMPALA_FIELDS,
        "clip_param": Field("training", 0.4, number(0.0, 10.0, low_open=True), "surrogate clip"),
        "use_kl_loss": Field("training", False, boolean, "add the KL(target || policy) penalty"),
        "kl_coeff": Field("training", 1.0, number(0.0, 1e6), "initial KL penalty weight"),
        "kl_target": Field("training", 0.01, number(0.0, 1e6, low_open=True), "KL the weight adapts to"),
        "target_network_update_freq": Field("training", 1, positive_int,
                                            "train batches between target syncs"),
        "target_worker_clipping": Field("training", 2.0, number(0.0, 1e12, low_open=True),
                                        "clip of mu / pi_target"),
    }
    algo_class_name = "APPO"

    clip_param: float
    use_kl_loss: bool
    kl_coeff: float
    kl_target: float
    target_network_update_freq: int
    target_worker_clipping: float

    def own_policy_settings(self) -> dict[str, Any]:
        """``kl_coeff``: the initial KL weight of an :class:`~cairn.algorithms.impala.APPOPolicy`."""
        return {"kl_coeff": self.kl_coeff}
