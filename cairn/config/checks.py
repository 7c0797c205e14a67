"""Checks and conversions behind AlgorithmConfig: policies, mappings, envs, callables."""

from __future__ import annotations

import difflib
import inspect
from collections.abc import Callable, Collection, Mapping
from typing import Any

import gymnasium as gym

from cairn.errors import ConfigError, MissingCallableError
from cairn.policy.keras_config import model_framework
from cairn.policy.merge import merge_setting
from cairn.policy.spec import PolicySpec
from cairn.policy_ids import DEFAULT_POLICY_ID, check_policy_ids
from cairn.registry import CALLABLE_KEY, callable_reference, registered_envs, resolve_callable

__all__ = [
    "CALLABLE_KEY",
    "encode_callable",
    "decode_callable",
    "suggest",
    "ALIASES",
    "NOT_A_MISSPELLING",
    "normalize_policies",
    "normalize_policies_to_train",
    "check_policy_mapping",
    "check_policies_to_train",
    "map_agent",
    "check_env",
    "merge_setting",
    "require_mapping",
]

def encode_callable(fn: Callable[..., Any]) -> dict[str, Any]:
    """``{"__callable__": "module:function"}``, or a ``None`` reference when not importable."""
    return {CALLABLE_KEY: callable_reference(fn), "name": getattr(fn, "__qualname__", repr(fn))}


def decode_callable(value: Any, key: str, callable_keys: Collection[str]) -> Any:
    """``value`` of config ``key`` from a config's JSON form: the callable it stores (only under
    ``callable_keys``, the fields that hold callables: :meth:`AlgorithmConfig.callable_fields`),
    resolved by the one resolver, or ``value`` itself when it is no ``{CALLABLE_KEY: ...}``
    object. MissingCallableError when the callable was not storable."""
    if not (isinstance(value, Mapping) and CALLABLE_KEY in value):
        return value
    if key not in callable_keys:
        raise ConfigError(
            f"Config {key!r} holds a callable reference {value.get(CALLABLE_KEY)!r:.100}, but only "
            f"{sorted(callable_keys)} may hold callables; give {key!r} a plain value."
        )
    reference = value.get(CALLABLE_KEY)
    if reference is None:
        hint = (
            "policy_mapping_fn=..." if key == "policy_mapping_fn"
            else f"config_overrides={{{key!r}: ...}}"
        )
        raise MissingCallableError(
            f"Config {key!r} was the callable {value.get('name')!r}, which has no import path "
            f"(a lambda, closure or __main__ function) and was not stored. Pass it again: "
            f"{hint}."
        )
    return resolve_callable(reference, what=key)


#: Stable-Baselines3's (and RLlib's old) names of settings -> cairn's, for "did you mean".
ALIASES = {
    "learning_starts": "num_steps_sampled_before_learning_starts",
    "learning_rate": "lr",
    "batch_size": "minibatch_size",
    "n_epochs": "num_epochs",
    "n_steps": "rollout_fragment_length",
    "n_envs": "num_envs_per_env_runner",
    "num_workers": "num_env_runners",
    "gae_lambda": "lambda_",
    "lambda": "lambda_",
    "ent_coef": "entropy_coeff",
    "vf_coef": "vf_coeff",
    "clip_range": "clip_param",
    "clip_range_vf": "vf_clip_param",
    "num_sgd_iter": "num_epochs",
    "max_grad_norm": "grad_clip",
    "buffer_size": "replay_buffer_config",
    "target_update_interval": "target_network_update_freq",
    "policy_kwargs": "model",
}


_KL_PENALTY = ("a KL penalty's setting (RLlib's PPO and APPO); cairn's APPO has one "
               "(use_kl_loss, kl_coeff, kl_target), its PPO and IMPALA have no KL penalty")

#: Settings of other algorithms or libraries whose spelling is close to a setting of another
#: meaning (RLlib's ``kl_coeff`` to ``vf_coeff``): never guessed, explained instead.
NOT_A_MISSPELLING = {
    "kl_coeff": _KL_PENALTY,
    "kl_target": _KL_PENALTY,
    "use_kl_loss": _KL_PENALTY,
    "target_kl": "Stable-Baselines3's early stop of PPO's epochs at a KL, which cairn does not have",
    "vf_clip_param": "value clipping (cairn's PPO has it; IMPALA and APPO clip no value)",
}


def suggest(key: str, allowed: Any) -> str:
    """``" Did you mean 'x'?"`` for the allowed name closest to ``key``: its cairn name when
    ``key`` is another library's (:data:`ALIASES`, e.g. SB3's ``learning_starts``), else the
    closest spelling; ``""`` when none is close. A name of another library, or of another
    algorithm's setting (:data:`NOT_A_MISSPELLING`), is never guessed by its spelling: the
    closest name may mean something else (SB3's ``clip_range_vf`` is not ``clip_param``)."""
    allowed = list(allowed)
    if ALIASES.get(key) in allowed:
        return f" Did you mean {ALIASES[key]!r} (cairn's name for {key!r})?"
    if key in NOT_A_MISSPELLING:
        return f" {key!r} is {NOT_A_MISSPELLING[key]}."
    if key in ALIASES:
        return ""
    close = difflib.get_close_matches(key, allowed, n=1)
    return f" Did you mean {close[0]!r}?" if close else ""


def normalize_policies(policies: Any) -> dict[str, PolicySpec]:
    """Accept a set/list of IDs or a dict of PolicySpec (or None) and return a dict."""
    if policies is None:
        return {DEFAULT_POLICY_ID: PolicySpec()}
    if isinstance(policies, (Mapping, set, frozenset, list, tuple)) and not policies:
        raise ConfigError(
            "policies is empty; configure at least one, e.g. config.multi_agent(policies={'p0'}), "
            "or leave it unset for the single 'default_policy'."
        )
    if isinstance(policies, Mapping):
        out = {}
        check_policy_ids(policies)
        for pid, spec in policies.items():
            if spec is None:
                spec = PolicySpec()
            elif isinstance(spec, Mapping):
                spec = PolicySpec(**spec)
            elif not isinstance(spec, PolicySpec):
                raise ConfigError(
                    f"policies[{pid!r}] must be a PolicySpec, a dict of its fields or None, got "
                    f"{type(spec).__name__}."
                )
            out[pid] = spec
        return out
    if isinstance(policies, (set, frozenset, list, tuple)):
        ids = sorted(policies, key=str) if isinstance(policies, (set, frozenset)) else list(policies)
        check_policy_ids(ids)
        if len(set(ids)) != len(ids):
            raise ConfigError(f"policies contains duplicates: {ids!r}.")
        return {pid: PolicySpec() for pid in ids}
    raise ConfigError(
        f"policies must be a set/list of policy IDs or a dict {{policy_id: PolicySpec}}, got "
        f"{type(policies).__name__}."
    )


def normalize_policies_to_train(policies_to_train: Any) -> list[str] | None:
    """``policies_to_train`` as a list (a set sorted), or None (all policies learn)."""
    if policies_to_train is None:
        return None
    if isinstance(policies_to_train, str) or not isinstance(
        policies_to_train, (list, tuple, set, frozenset)
    ):
        raise ConfigError(
            f"policies_to_train must be a list of policy IDs or None, got {policies_to_train!r}."
        )
    if isinstance(policies_to_train, (set, frozenset)):
        return sorted(policies_to_train)
    return list(policies_to_train)


def map_agent(fn: Any, policies: Mapping[str, Any], agent_id: Any, *,
              episode: Mapping[str, Any] | None = None, worker: int | None = None) -> str:
    """The policy ID that ``policy_mapping_fn`` ``fn`` (None: the first of ``policies``, a dict,
    or a callable) maps ``agent_id`` to (the body of ``AlgorithmConfig.map_agent``); a callable
    gets ``episode`` and ``worker`` as keywords."""
    if fn is None:
        return next(iter(policies))
    if isinstance(fn, Mapping):
        if agent_id in fn:
            return fn[agent_id]  # type: ignore[no-any-return]
        if str(agent_id) in fn:
            return fn[str(agent_id)]  # type: ignore[no-any-return]
        raise ConfigError(
            f"policy_mapping_fn (a dict) has no entry for agent {agent_id!r}; add one."
        )
    return fn(agent_id, episode=episode, worker=worker)  # type: ignore[no-any-return]


def check_policy_mapping(fn: Any) -> None:
    if isinstance(fn, Mapping):
        _check_mapping_keys(fn)
    if fn is None or isinstance(fn, Mapping):
        return
    if not callable(fn):
        raise ConfigError(
            f"policy_mapping_fn must be a callable (agent_id, **kwargs) -> policy_id or a dict "
            f"{{agent_id: policy_id}}, got {type(fn).__name__}."
        )
    try:
        inspect.signature(fn).bind("agent_0", episode=None, worker=None)
    except TypeError as exc:
        raise ConfigError(
            f"policy_mapping_fn {getattr(fn, '__qualname__', fn)!r} must accept "
            "(agent_id, **kwargs); cairn calls it as fn(agent_id, episode=None, worker=None). "
            "Write it as `def fn(agent_id, **kwargs)`."
        ) from exc
    except ValueError:
        return  # builtins without signatures: trust them


def _check_mapping_keys(mapping: Mapping[Any, Any]) -> None:
    """ConfigError for a dict ``policy_mapping_fn`` that a checkpoint cannot keep as it is: its
    keys are stored as JSON strings and looked up again by ``str(agent_id)`` (:func:`map_agent`),
    which only str and int agent IDs survive, each once. A tuple key failed the save with
    TypeError; ``{0: "p0", "0": "p1"}`` came back as ``{"0": "p1"}``, agent 0 acting with p1."""
    seen: dict[str, Any] = {}
    for key in mapping:
        if not isinstance(key, (str, int)) or isinstance(key, bool):
            raise ConfigError(
                f"policy_mapping_fn (a dict) has the agent ID {key!r} ({type(key).__name__}); a checkpoint "
                "stores the dict's keys as JSON strings, which only str and int agent IDs survive. Map "
                "such agents with a function policy_mapping_fn(agent_id, **kwargs) -> policy_id.")
        if str(key) in seen:
            raise ConfigError(
                f"policy_mapping_fn (a dict) has the agent IDs {seen[str(key)]!r} and {key!r}, which a "
                f"checkpoint stores as the one key {str(key)!r}; keep one of them, or map the agents "
                "with a function policy_mapping_fn(agent_id, **kwargs) -> policy_id.")
        seen[str(key)] = key


def check_policies_to_train(policies_to_train: Any, policies: Mapping[str, Any]) -> None:
    """ConfigError when ``policies_to_train`` (None: all) is no list of policy IDs or names a
    policy not in ``policies``. A str (from_dict's or ``--config policies_to_train=p0``) is
    refused: iterated, its letters were taken for policy IDs."""
    for pid in normalize_policies_to_train(policies_to_train) or ():
        if pid not in policies:
            raise ConfigError(
                f"policies_to_train names {pid!r}, which is not one of the policies "
                f"{sorted(policies)}."
            )


def check_env(env: Any) -> None:
    if callable(env):
        return
    if not isinstance(env, str):
        raise ConfigError(
            f"Config 'env'={env!r} is invalid: expected a Gymnasium ID, a registered name or a "
            "callable creator(env_config) -> env."
        )
    if env in registered_envs():
        return
    if "/" in env:  # "ALE/...": ale_py registers them (a fixed table, safe for checkpoints' IDs)
        from cairn.envs.gym_namespaces import import_env_namespace

        import_env_namespace(env)
    try:
        gym.spec(env)
    except gym.error.Error as exc:
        known = list(registered_envs()) + list(gym.envs.registry.keys())
        hint = "" if "Did you mean" in str(exc) else suggest(env, known)  # Gymnasium's own, else ours
        raise ConfigError(
            f"Unknown environment {env!r}: it is neither registered with cairn.register_env() "
            f"nor a Gymnasium ID ({str(exc).rstrip('.')})." + hint
        ) from None


# The one merge rule for dict settings is cairn.policy.merge.merge_setting (one level deep, as
# RLlib's training(model=...) updates the model dict): a dict-valued setting
# (AlgorithmConfig.merged_fields) after training() or a restore's config_overrides set a dict
# over it, a PolicySpec's model over the shared one, Tune's param_space and `cairn train
# --config` all merge this way. A nested dict inside a setting (model.custom_model_config) is
# one value: a new one replaces the old whole, keys it lacks are not carried over.


def require_mapping(value: Any, key: str) -> Mapping[str, Any]:
    """``value``, or ConfigError when config ``key`` is not a dict."""
    if not isinstance(value, Mapping):
        raise ConfigError(f"Config {key!r} must be a dict, got {value!r:.100}.")
    return value


def check_learners(num_learners: int, model: Mapping[str, Any], policies: Mapping[str, PolicySpec]) -> None:
    """DDP learners (``num_learners >= 1``) train feed-forward torch networks: refuse Keras and
    recurrent (``use_lstm``) ones, which learn in the driver's process only."""
    if not num_learners:
        return
    models = {pid: {**model, **((spec.config or {}).get("model") or {})} for pid, spec in policies.items()}
    for what, found in (("Keras", sorted(p for p, m in models.items() if model_framework(m) == "keras")),
                        ("recurrent", sorted(p for p, m in models.items() if m.get("use_lstm")))):
        if found:
            raise ConfigError(
                f"num_learners={num_learners} cannot train the {what} policies {found}: DDP learners "
                "run feed-forward torch networks only. Use config.learners(num_learners=0) (docs/"
                "learners.md)."
            )
