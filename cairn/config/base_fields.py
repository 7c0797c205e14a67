"""The settings every algorithm shares: one Field per key (section, default, check)."""

from __future__ import annotations

from typing import Any

from cairn.config.fields import (
    Field,
    boolean,
    choice,
    int_in,
    non_negative_int,
    number,
    optional,
    positive_int,
)
from cairn.config.league_settings import check_league
from cairn.errors import ConfigError
from cairn.policy.filters import FILTER_NAMES
from cairn.policy.mlp_actor_critic import check_model_config
from cairn.policy.policy import Policy
from cairn.registry import check_class_reference_form

__all__ = ["BASE_FIELDS", "GYM_ENV_VECTORIZE_MODES", "MAX_TORCH_NUM_THREADS", "check_fragment_length"]

#: ``gym_env_vectorize_mode`` values (RLlib's): environments stepped in the runner's process, or
#: each in its own child process (cairn.env_runner.vector_envs).
GYM_ENV_VECTORIZE_MODES = ("sync", "async")

#: The most torch intra-op threads a config may ask for. torch starts that many threads (twice,
#: with its inter-op pool), so a stored 3000 would start 6,000 on load; no machine cairn runs on
#: has more cores than this.
MAX_TORCH_NUM_THREADS = 1024


def check_fragment_length(key: str, value: Any) -> None:
    """``"auto"`` or a positive ``rollout_fragment_length``."""
    if value != "auto":
        positive_int(key, value)


def _check_any(key: str, value: Any) -> None:
    """Checked as a whole in validate()."""


def _check_model(key: str, value: Any) -> None:
    check_model_config(value)


def _check_seed(key: str, value: Any) -> None:
    # Negative seeds passed here and failed at build() in numpy ("expected non-negative integer").
    if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 0):
        raise ConfigError(f"Config {key!r}={value!r} is invalid: expected an int >= 0 or None.")


def _check_threads(key: str, value: Any) -> None:
    if value != "auto":
        int_in(1, MAX_TORCH_NUM_THREADS, '"auto", or at most one thread per core')(key, value)


def _check_str_or_none(key: str, value: Any) -> None:
    if value is not None and not isinstance(value, str):
        raise ConfigError(f"Config {key!r}={value!r} is invalid: expected a path str or None.")


def _check_callbacks(key: str, value: Any) -> None:
    if value is not None:
        if not isinstance(value, str):
            raise ConfigError(f"Config {key!r}={value!r:.100} is invalid: expected a reference str or None "
                              "(config.callbacks(MyCallbacks) stores the class's reference).")
        check_class_reference_form(value, what=key)


_seconds = number(0.0, 1e9, low_open=True)
#: The settings a policy takes (``lr``, ``observation_filter``, ``model``) keep the defaults of
#: the policy layer, which holds them for a Policy built on its own; their Fields read them.
_POLICY_DEFAULTS = Policy.DEFAULT_CONFIG

BASE_FIELDS: dict[str, Field] = {
    # environment
    "env": Field("environment", None, _check_any, "Gymnasium ID, registered name or creator",
                 holds_callable=True),
    "env_config": Field("environment", {}, _check_any, "kwargs for the env creator"),
    # env_runners
    "num_env_runners": Field("env_runners", 0, non_negative_int, "remote Ray env runners"),
    "num_envs_per_env_runner": Field("env_runners", 1, positive_int, "vectorised envs each"),
    "rollout_fragment_length": Field("env_runners", "auto", check_fragment_length, "steps per env"),
    "gym_env_vectorize_mode": Field("env_runners", "sync", choice(*GYM_ENV_VECTORIZE_MODES),
                                    "envs in this process or in children"),
    "observation_filter": Field("env_runners", _POLICY_DEFAULTS["observation_filter"],
                                choice(*FILTER_NAMES), "filter"),
    # fault_tolerance (remote env runners; RLlib's names and defaults, docs/ray.md)
    "restart_failed_env_runners": Field("fault_tolerance", True, boolean, "recreate failed runners"),
    "max_num_env_runner_restarts": Field("fault_tolerance", 1000, non_negative_int, "restarts in all"),
    "max_num_repeated_env_runner_failures": Field("fault_tolerance", 3, positive_int,
                                                  "same error in a row, no sample between"),
    "ignore_env_runner_failures": Field("fault_tolerance", False, boolean, "go on without them"),
    "sample_timeout_s": Field("fault_tolerance", 60.0, _seconds, "wait for one sample()"),
    "env_runner_health_probe_timeout_s": Field("fault_tolerance", 30.0, _seconds, "wait for a ping"),
    "env_runner_restore_timeout_s": Field("fault_tolerance", 1800.0, _seconds, "wait to rebuild one"),
    # learners (RLlib's names; docs/learners.md)
    "num_learners": Field("learners", 0, non_negative_int, "DDP learner actors (0: this process)"),
    "num_gpus_per_learner": Field("learners", 0, number(0.0, 1e6), "GPUs each learner uses"),
    "num_cpus_per_learner": Field("learners", 1, number(0.0, 1e6), "Ray CPUs each learner reserves"),
    # training
    "lr": Field("training", _POLICY_DEFAULTS["lr"], number(0.0, 10.0, low_open=True), "learning rate"),
    "gamma": Field("training", 0.99, number(0.0, 1.0), "discount factor"),
    "train_batch_size": Field("training", 2048, positive_int, "env steps per iteration"),
    "minibatch_size": Field("training", 64, positive_int, "SGD minibatch size"),
    "num_epochs": Field("training", 10, positive_int, "passes over each train batch"),
    "grad_clip": Field("training", 0.5, optional(number(0.0, 1e12, low_open=True)), "max grad norm"),
    "model": Field("training", _POLICY_DEFAULTS["model"], _check_model, "network settings"),
    # multi_agent
    "policies": Field("multi_agent", None, _check_any, "policy IDs or {pid: PolicySpec}"),
    "policy_mapping_fn": Field("multi_agent", None, _check_any, "agent ID -> policy ID",
                               holds_callable=True),
    "policies_to_train": Field("multi_agent", None, _check_any, "IDs that learn (None: all)"),
    # evaluation
    "evaluation_interval": Field("evaluation", None, optional(positive_int), "iterations"),
    "evaluation_duration": Field("evaluation", 10, positive_int, "episodes per evaluation"),
    # league (docs/league.md): None, or config.league(...)'s checked settings
    "league_config": Field("league", None, check_league, "league self-play settings"),
    # resources
    "torch_num_threads": Field("resources", "auto", _check_threads, "torch intra-op threads"),
    # checkpointing
    "export_native_model_files": Field("checkpointing", False, boolean, "write model/ files"),
    # debugging
    "seed": Field("debugging", None, _check_seed, "seed for weights, sampling and envs"),
    "log_dir": Field("debugging", None, _check_str_or_none, "default folder for save()"),
    # callbacks (cairn.Callbacks, docs/callbacks.md): the class's reference
    "callbacks_class": Field("callbacks", None, _check_callbacks, "cairn.Callbacks subclass"),
}
